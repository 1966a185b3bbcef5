"""A revision's breaker: the per-instance concurrency limit and the queue behind it.

As Knative's queue-proxy and activator breakers: ``containerConcurrency`` is a hard
per-instance limit; a request goes to the least busy instance that accepts, oldest first
(so light load stays on one instance and the rest go idle). A request that finds none
waits in a bounded queue, handed the first slot that frees, in order; with the queue
full it is refused (503).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from typing import TYPE_CHECKING

from modelfn.runtime.errors import ModelfnError

if TYPE_CHECKING:
    from collections.abc import Callable

    from modelfn.localstack.serving.instance import Instance


class BreakerFull(ModelfnError):
    status_code = 503

    def __init__(self, revision: str, size: int) -> None:
        super().__init__(f"revision {revision}: queue full ({size} requests waiting)")


class Breaker:
    """Slots on ``instances`` (the revision's own list, which it keeps current) and the
    requests waiting for one. Owned by the plane's event loop (not thread safe)."""

    def __init__(self, revision: str, instances: list[Instance], *, limit: int,
                 queue_size: int) -> None:
        self.revision = revision
        self.instances = instances
        self.limit = limit  # containerConcurrency; 0 is no limit
        self.queue_size = queue_size
        self.waiters: deque[asyncio.Future[Instance]] = deque()

    def free(self) -> Instance | None:
        """The least busy instance that accepts a request now, if any."""
        limit = self.limit
        best: Instance | None = None
        for instance in self.instances:
            if instance.accepting and (limit <= 0 or instance.in_flight < limit) and (
                    best is None or instance.in_flight < best.in_flight):
                best = instance
        return best

    def dispatch(self) -> None:
        """Hand free slots to the requests waiting, oldest first."""
        while self.waiters:
            instance = self.free()
            if instance is None:
                return
            fut = self.waiters.popleft()
            if not fut.done():
                instance.in_flight += 1
                fut.set_result(instance)

    def check(self) -> None:
        """``BreakerFull`` when the queue has no room for another request."""
        if len(self.waiters) >= self.queue_size:
            raise BreakerFull(self.revision, len(self.waiters))

    def queue(self) -> asyncio.Future[Instance]:
        """A place in the queue (``check`` first), resolved with an instance whose slot it
        holds."""
        fut: asyncio.Future[Instance] = asyncio.get_running_loop().create_future()
        self.waiters.append(fut)
        return fut

    def leave(self, fut: asyncio.Future[Instance]) -> None:
        """A request that gave up waiting: out of the queue, and a slot it was handed as it
        gave up goes to the next."""
        if fut.done() and not fut.cancelled() and fut.exception() is None:
            fut.result().in_flight -= 1
            self.dispatch()
        with contextlib.suppress(ValueError):
            self.waiters.remove(fut)

    def refuse(self, error: Callable[[], Exception]) -> None:
        """Every request waiting gets an ``error()``."""
        for fut in self.waiters:
            if not fut.done():
                fut.set_exception(error())
        self.waiters.clear()
