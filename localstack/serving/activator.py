"""A revision's activator: requests held while it scales from zero, handed to an instance.

A request that finds no instance with a free slot waits in the breaker's queue (never
refused while the revision can still serve); with no instance at all, one is started and
the queue drains into it the moment its readiness answers. A full queue answers 503, a
wait past the timeout 504 (503 naming the cap when no instance could start at all). A
request whose instance died under it, untouched, goes to another instance (or is held
until the autoscaler has started one), as Knative's activator retries it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from modelfn.localstack.plane import RevisionState
from modelfn.localstack.serving.capacity import INSTANCE_LIMIT, InstanceLimitReached
from modelfn.localstack.serving.http import InstanceGone, error_response, forward
from modelfn.runtime.errors import ModelfnError

if TYPE_CHECKING:
    from modelfn.localstack.serving.instance import Instance
    from modelfn.localstack.serving.revision import Revision
    from modelfn.net.grpc_relay import Metadata
    from modelfn.net.http1 import Head

log = logging.getLogger("modelfn.serving")

#: a request whose instance died before answering goes to another this many times at most
REPLAYS = 2


class HoldTimeout(ModelfnError):
    status_code = 504

    def __init__(self, revision: str, waited_s: float) -> None:
        super().__init__(f"revision {revision}: no instance could take the request "
                         f"within {waited_s:g} s")


class RevisionUnavailable(ModelfnError):
    status_code = 503


class Activator:
    """The data path into one revision, on the plane's event loop (not thread safe)."""

    def __init__(self, revision: Revision, *, timeout_s: float) -> None:
        self.revision = revision
        self.breaker = revision.breaker
        self.timeout_s = timeout_s  # how long a request may wait for an instance
        self.in_flight = 0  # requests being served or waiting for an instance
        self.requests = 0
        self.holds_s: list[float] = []  # each scale-from-zero: first request held -> answered
        self.last_active = time.monotonic()
        self._hold_open = False

    async def acquire(self) -> tuple[Instance, bool]:
        """An instance with a free slot (its slot taken), and whether this request opened a
        scale from zero (its hold time is recorded when it is answered)."""
        self.in_flight += 1
        self.requests += 1
        self.last_active = time.monotonic()
        instance = self.breaker.free() if not self.breaker.waiters else None
        if instance is not None:
            instance.in_flight += 1
            return instance, False
        if self.revision.closing:
            self.in_flight -= 1
            raise RevisionUnavailable(f"revision {self.revision.spec.name} has no free "
                                      "instance and the local platform is stopping")
        try:
            return await self._hold()
        except BaseException:
            self.in_flight -= 1
            raise

    async def _hold(self) -> tuple[Instance, bool]:
        revision = self.revision
        # a revision that never became ready is not retried (Knative marks it failed); one
        # that served before gets a new cold start per request burst after a failed one
        if (revision.state is RevisionState.FAILED and revision.reason != INSTANCE_LIMIT
                and not revision.instances and not revision.ready_s):
            raise RevisionUnavailable(f"revision {revision.spec.name} cannot start: "
                                      f"{revision.message}")
        self.breaker.check()
        opened = not self._hold_open and not any(i.accepting for i in revision.instances)
        if opened:
            self._hold_open = True
        if not revision.instances:  # start one now, the autoscaler adds more
            revision.launch()
            revision.changed()
        fut = self.breaker.queue()
        revision.autoscaler.wake()
        try:
            return await asyncio.wait_for(fut, self.timeout_s), opened
        except BaseException as exc:
            if opened:
                self._hold_open = False
            self.breaker.leave(fut)
            if isinstance(exc, TimeoutError) and not revision.instances:
                raise InstanceLimitReached(revision.spec.name, self.timeout_s,
                                           revision.cap) from None
            if isinstance(exc, TimeoutError):
                raise HoldTimeout(revision.spec.name, self.timeout_s) from None
            raise

    def evict(self, instance: Instance) -> None:
        """An instance the data path found dead (refused or dropped a connection): out of
        the routing now, not at the next autoscaler tick, which starts a replacement."""
        revision = self.revision
        if instance in revision.instances:
            revision.instances.remove(instance)
            log.warning("instance %s stopped answering: %s", instance.name,
                        instance.process.tail(5))
            revision.spawn_stop(instance)
            revision.autoscaler.wake()

    def release(self, instance: Instance, *, opened_at: float | None, ok: bool) -> None:
        """The request is answered (or failed): free its slot and record what it cost."""
        instance.in_flight -= 1
        instance.served += 1
        self.in_flight -= 1
        now = time.monotonic()
        instance.last_used = self.last_active = now
        if opened_at is not None:
            self._hold_open = False
            if ok:
                self.holds_s.append(now - opened_at)
        self.breaker.dispatch()

    async def proxy(self, head: Head, reader: asyncio.StreamReader,
                    writer: asyncio.StreamWriter) -> bool:
        """One HTTP request to an instance, its answer to ``writer``; whether the client's
        connection stays open. An error is answered here, but for ``BadGateway``, which
        the ingress answers (it knows whether the platform is stopping)."""
        spec = self.revision.spec
        held_at = time.monotonic()
        try:
            instance, opened = await self.acquire()
        except ModelfnError as exc:
            writer.write(error_response(exc.status_code, exc.message, close=True))
            return False
        ok = False
        replay: bytes | None = None
        try:
            for attempt in range(REPLAYS + 1):
                try:
                    keep = await forward(head, reader, writer, instance.pool,
                                         timeout_s=spec.timeout_s,
                                         keep_alive=not head.close, replay=replay)
                    ok = True
                    return keep
                except InstanceGone as exc:
                    # it died under the request (killed, crashed): hand the untouched
                    # request to another instance, or hold it until one has started
                    if exc.replay is None or attempt == REPLAYS:
                        raise
                    replay = exc.replay
                    self.evict(instance)
                    self.release(instance, opened_at=None, ok=False)
                    held_at = time.monotonic()
                    try:
                        instance, opened = await self.acquire()
                    except ModelfnError as held:
                        instance = None  # type: ignore[assignment]
                        writer.write(error_response(held.status_code, held.message,
                                                    close=True))
                        return False
            return False  # not reached: the loop returns or raises
        except TimeoutError:
            writer.write(error_response(
                504, f"revision {spec.name}: no answer within {spec.timeout_s:g} s",
                close=True))
            return False
        finally:
            if instance is not None:
                self.release(instance, opened_at=held_at if opened else None, ok=ok)

    async def call_grpc(self, method: str, request: bytes, metadata: Metadata,
                        deadline_s: float | None, *, service: str) -> bytes:
        """One unary gRPC call to an instance, held while the revision scales from zero,
        replayed on another instance if its instance died under it."""
        import grpc

        from modelfn.net.grpc_relay import forwarded, is_unreached, unary

        spec = self.revision.spec
        timeout = spec.timeout_s if deadline_s is None else min(deadline_s, spec.timeout_s)
        sent = forwarded(metadata)
        held_at = time.monotonic()
        instance: Instance | None
        instance, opened = await self.acquire()
        answered = False
        try:
            for attempt in range(REPLAYS + 1):
                try:
                    answer = await unary(instance.channel(), method, request, sent, timeout,
                                         where=f"{service} revision {spec.name}")
                    answered = True
                    return answer
                except grpc.aio.AioRpcError as exc:
                    answered = not is_unreached(exc)
                    if answered or attempt == REPLAYS:
                        raise
                self.evict(instance)
                self.release(instance, opened_at=None, ok=False)
                instance = None
                held_at = time.monotonic()
                instance, opened = await self.acquire()
            raise AssertionError("not reached: the loop returns or raises")
        finally:
            if instance is not None:
                self.release(instance, opened_at=held_at if opened else None, ok=answered)
