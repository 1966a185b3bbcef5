"""A revision's instances, its activator queue, its queue-proxy limit and its autoscaler.

- **Activator**: a request that finds no instance with a free slot waits in a bounded
  queue (never refused while the revision can still serve); with no instance at all,
  one is started and the queue drains into it the moment its readiness answers. A full
  queue answers 503, a wait past the timeout 504.
- **Queue-proxy**: ``containerConcurrency`` is a hard per-instance limit; a request goes
  to the least busy instance that accepts, oldest first (so light load stays on one
  instance and the rest go idle).
- **Autoscaler**: every tick it samples the requests in flight (served and waiting);
  desired = ceil(average over the window / target), between min-scale and max-scale
  (or the local cap). It starts instances to reach it, and stops those idle past the
  idle window (the last one only after the retention period too): an instance leaves
  the routing first, then gets SIGTERM and drains.
- **Instance cap**: every instance holds a place of the platform's ``InstanceCap`` until
  its process is gone. A revision without a place starts nothing (and tries again each
  tick); with no instance at all it is ``InstanceLimit`` (Ready=False, naming the cap),
  and a request held past the timeout is answered 503 naming it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import deque
from typing import TYPE_CHECKING

from modelfn.localstack.plane import RevisionState, RevisionStatus
from modelfn.localstack.serving.capacity import INSTANCE_LIMIT, InstanceLimitReached
from modelfn.localstack.serving.instance import CpuSets, Instance
from modelfn.process.supervisor import ProcessFailed
from modelfn.runtime.errors import ModelfnError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from pathlib import Path

    from modelfn.localstack.plane import RevisionSpec
    from modelfn.localstack.serving.capacity import InstanceCap
    from modelfn.platforms.podman import Podman

log = logging.getLogger("modelfn.serving")

#: seconds between autoscaler ticks
TICK_S = 0.05


class QueueFull(ModelfnError):
    status_code = 503

    def __init__(self, revision: str, size: int) -> None:
        super().__init__(f"revision {revision}: queue full ({size} requests waiting)")


class HoldTimeout(ModelfnError):
    status_code = 504

    def __init__(self, revision: str, waited_s: float) -> None:
        super().__init__(f"revision {revision}: no instance could take the request "
                         f"within {waited_s:g} s")


class RevisionUnavailable(ModelfnError):
    status_code = 503


class Revision:
    """One revision on the plane's event loop. Not thread safe: the loop owns it."""

    def __init__(self, spec: RevisionSpec, *, idle_s: float, window_s: float, cap: InstanceCap,
                 queue_size: int, queue_timeout_s: float | None, cpusets: CpuSets,
                 podman: Podman | None, log_dir: Path | None, base_env: Mapping[str, str],
                 tmp_root: Path | None = None,
                 changed: Callable[[Revision], None]) -> None:
        self.spec = spec
        self.idle_s = idle_s
        self.window_s = window_s
        self.cap = cap
        self.max_scale = max(spec.max_scale if spec.max_scale > 0 else cap.limit, 1)
        self.queue_size = queue_size
        self.queue_timeout_s = spec.timeout_s if queue_timeout_s is None else queue_timeout_s
        self._cpusets = cpusets
        self._podman = podman
        self._log_dir = log_dir
        self._tmp_root = tmp_root
        self._base_env = base_env
        self._changed = changed
        self.instances: list[Instance] = []
        self.state = RevisionState.UNKNOWN
        self.reason = "Deploying"
        self.message = ""
        self.waiters: deque[asyncio.Future[Instance]] = deque()
        self.in_flight = 0  # requests being served or waiting for an instance
        self.requests = 0
        self.cold_starts = 0
        self.holds_s: list[float] = []  # each scale-from-zero: first request held -> answered
        self.ready_s: list[float] = []  # each instance: process start -> readiness answered
        self.last_active = time.monotonic()
        self._hold_open = False
        self._samples: deque[tuple[float, int]] = deque()
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._loop: asyncio.Task[None] | None = None
        self.closing = False  # the platform is stopping: no scaling, no new instance

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        self._launch(max(self.spec.initial_scale, self.spec.min_scale, 1))
        self._loop = asyncio.create_task(self._autoscale(), name=f"{self.spec.name}-autoscaler")

    async def stop_scaling(self) -> None:
        """The platform drains: the autoscaler stops (no instance starts or stops for load),
        requests held for a revision with no instance at all are refused with a 503, and
        requests that find no free instance from now on are refused too."""
        await self._stop_autoscaler()
        if not self.instances:
            self._refuse_waiters(f"revision {self.spec.name} is at zero and the local "
                                 "platform is stopping")

    async def _stop_autoscaler(self) -> None:
        self.closing = True
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop
            self._loop = None

    def _refuse_waiters(self, why: str) -> None:
        for fut in self.waiters:
            if not fut.done():
                fut.set_exception(RevisionUnavailable(why))
        self.waiters.clear()

    async def close(self, grace: float | None = None) -> None:
        """Stop the autoscaler and every instance (``grace`` seconds to drain each, the
        instance's own default when None); held requests are refused with a 503."""
        await self._stop_autoscaler()
        for task in list(self._tasks):
            if task.get_name().endswith("-start"):
                task.cancel()
        # stops under way finish (their processes must be gone when close returns)
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._refuse_waiters(f"revision {self.spec.name} was removed")
        await asyncio.gather(*(self._stop(i, grace) for i in self.instances),
                             return_exceptions=True)
        self.instances.clear()

    def _launch(self, count: int = 1) -> int:
        """Start up to ``count`` instances, as many as the platform's cap has places for;
        how many started (none while the platform is stopping)."""
        if self.closing:
            return 0
        for started in range(count):
            if self.cap.full:
                self._limited()
                return started
            instance = Instance.create(self.spec, cpusets=self._cpusets, podman=self._podman,
                                       log_dir=self._log_dir, base_env=self._base_env,
                                       tmp_root=self._tmp_root)
            self.cap.take(instance)
            if self.reason == INSTANCE_LIMIT:
                self.state, self.reason, self.message = RevisionState.UNKNOWN, "Deploying", ""
            self.instances.append(instance)
            self.cold_starts += 1
            task = asyncio.create_task(self._bring_up(instance), name=f"{instance.name}-start")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return count

    def _limited(self) -> None:
        """No place for another instance: with none at all, the revision says so."""
        if self.instances or self.reason == INSTANCE_LIMIT:
            return
        log.warning("revision %s cannot start an instance: %s", self.spec.name,
                    self.cap.describe())
        self.state, self.reason = RevisionState.FAILED, INSTANCE_LIMIT
        self.message = f"no instance can start: {self.cap.describe()}"
        self._changed(self)

    async def _stop(self, instance: Instance, grace: float | None = None) -> None:
        try:
            await (instance.stop() if grace is None else instance.stop(grace))
        finally:
            self.cap.give(instance)

    async def _bring_up(self, instance: Instance) -> None:
        try:
            elapsed = await instance.start(self.spec.readiness_path, self.spec.progress_deadline_s)
        except (ProcessFailed, OSError) as exc:
            message = exc.message if isinstance(exc, ProcessFailed) else str(exc)
            log.warning("instance %s failed: %s", instance.name, message)
            await self._drop(instance)
            self._fail("ProgressDeadlineExceeded" if "was not ready" in message
                       else "ExitCode", message)
            return
        log.info("instance %s ready in %.3f s", instance.name, elapsed)
        self.ready_s.append(elapsed)
        if self.state is not RevisionState.READY:
            self.state, self.reason, self.message = RevisionState.READY, "", ""
        self._dispatch()
        self._changed(self)

    def _fail(self, reason: str, message: str) -> None:
        if any(i.accepting for i in self.instances):
            self._changed(self)  # a scale-out failed; the revision still serves
            return
        self.state, self.reason, self.message = RevisionState.FAILED, reason, message
        if not any(not i.ready for i in self.instances):
            error = RevisionUnavailable(f"revision {self.spec.name} cannot start: {message}")
            while self.waiters:
                fut = self.waiters.popleft()
                if not fut.done():
                    fut.set_exception(error)
        self._changed(self)

    async def _drop(self, instance: Instance) -> None:
        instance.draining = True
        with contextlib.suppress(ValueError):
            self.instances.remove(instance)
        await self._stop(instance)

    # -- the data path -----------------------------------------------------------------

    def _free(self) -> Instance | None:
        limit = self.spec.container_concurrency
        best: Instance | None = None
        for instance in self.instances:
            if instance.accepting and (limit <= 0 or instance.in_flight < limit) and (
                    best is None or instance.in_flight < best.in_flight):
                best = instance
        return best

    def _dispatch(self) -> None:
        while self.waiters:
            instance = self._free()
            if instance is None:
                return
            fut = self.waiters.popleft()
            if not fut.done():
                instance.in_flight += 1
                fut.set_result(instance)

    async def acquire(self) -> tuple[Instance, bool]:
        """An instance with a free slot (its slot taken), and whether this request opened a
        scale from zero (its hold time is recorded when it is answered)."""
        self.in_flight += 1
        self.requests += 1
        self.last_active = time.monotonic()
        instance = self._free() if not self.waiters else None
        if instance is not None:
            instance.in_flight += 1
            return instance, False
        if self.closing:
            self.in_flight -= 1
            raise RevisionUnavailable(f"revision {self.spec.name} has no free instance and "
                                      "the local platform is stopping")
        try:
            return await self._hold()
        except BaseException:
            self.in_flight -= 1
            raise

    async def _hold(self) -> tuple[Instance, bool]:
        # a revision that never became ready is not retried (Knative marks it failed); one
        # that served before gets a new cold start per request burst after a failed one
        if (self.state is RevisionState.FAILED and self.reason != INSTANCE_LIMIT
                and not self.instances and not self.ready_s):
            raise RevisionUnavailable(f"revision {self.spec.name} cannot start: {self.message}")
        if len(self.waiters) >= self.queue_size:
            raise QueueFull(self.spec.name, len(self.waiters))
        opened = not self._hold_open and not any(i.accepting for i in self.instances)
        if opened:
            self._hold_open = True
        if not self.instances:  # the activator: start one now, the autoscaler adds more
            self._launch()
            self._changed(self)
        fut: asyncio.Future[Instance] = asyncio.get_running_loop().create_future()
        self.waiters.append(fut)
        self._wake.set()
        try:
            return await asyncio.wait_for(fut, self.queue_timeout_s), opened
        except BaseException as exc:
            if opened:
                self._hold_open = False
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                fut.result().in_flight -= 1  # given a slot as it gave up: hand it back
                self._dispatch()
            with contextlib.suppress(ValueError):
                self.waiters.remove(fut)
            if isinstance(exc, TimeoutError) and not self.instances:
                raise InstanceLimitReached(self.spec.name, self.queue_timeout_s,
                                           self.cap) from None
            if isinstance(exc, TimeoutError):
                raise HoldTimeout(self.spec.name, self.queue_timeout_s) from None
            raise

    def evict(self, instance: Instance) -> None:
        """An instance the data path found dead (refused or dropped a connection): out of
        the routing now, not at the next autoscaler tick, which starts a replacement."""
        if instance in self.instances:
            self.instances.remove(instance)
            log.warning("instance %s stopped answering: %s", instance.name,
                        instance.process.tail(5))
            self._spawn_stop(instance)
            self._wake.set()

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
        self._dispatch()

    # -- the autoscaler ----------------------------------------------------------------

    def desired(self, now: float) -> int:
        self._samples.append((now, self.in_flight))
        while self._samples and self._samples[0][0] < now - self.window_s:
            self._samples.popleft()
        average = sum(s for _, s in self._samples) / len(self._samples)
        target = self.spec.target
        if self.spec.container_concurrency > 0:  # the hard limit caps the soft target
            target = min(target, self.spec.container_concurrency) if target > 0 else \
                self.spec.container_concurrency
        want = math.ceil(average / target) if target > 0 else 0
        if self.waiters:
            want = max(want, 1)
        return max(self.spec.min_scale, min(self.max_scale, want))

    async def _autoscale(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), TICK_S)
            self._wake.clear()
            try:
                self._tick(time.monotonic())
            except Exception:  # one bad tick must not stop scaling
                log.exception("autoscaler tick for %s failed", self.spec.name)

    def _tick(self, now: float) -> None:
        for instance in [i for i in self.instances if i.ready and not i.process.running]:
            self.instances.remove(instance)  # it died under us
            log.warning("instance %s exited: %s", instance.name, instance.process.tail(5))
            self._spawn_stop(instance)
        want = self.desired(now)
        if self.reason == INSTANCE_LIMIT and not self.ready_s:  # still to prove it starts
            want = max(want, min(self.max_scale, self.spec.initial_scale))
        live = [i for i in self.instances if not i.draining]
        failed = (self.state is RevisionState.FAILED and self.reason != INSTANCE_LIMIT
                  and not self.waiters)
        if want > len(live) and not failed and self._launch(want - len(live)):
            self._changed(self)
        surplus = len(live) - want
        for instance in sorted(live, key=lambda i: i.last_used):
            if surplus <= 0:
                break
            busy = instance.in_flight or now - instance.last_used < self.idle_s
            if not instance.accepting or busy:
                continue
            if len(live) - 1 == 0 and now - self.last_active < max(self.idle_s,
                                                                    self.spec.retention_s):
                continue
            instance.draining = True  # out of the routing before the SIGTERM
            self.instances.remove(instance)
            live.remove(instance)
            surplus -= 1
            log.info("instance %s idle for %.1f s: stopping", instance.name,
                     now - instance.last_used)
            self._spawn_stop(instance)

    def _spawn_stop(self, instance: Instance) -> None:
        async def stop() -> None:
            await self._stop(instance)
            self._changed(self)

        task = asyncio.create_task(stop(), name=f"{instance.name}-stop")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        self._changed(self)

    # -- status ------------------------------------------------------------------------

    def status(self) -> RevisionStatus:
        return RevisionStatus(
            state=self.state, reason=self.reason, message=self.message,
            instances=len(self.instances),
            ready_instances=sum(1 for i in self.instances if i.accepting),
            in_flight=self.in_flight, cold_starts=self.cold_starts, requests=self.requests,
        )

    def describe(self) -> dict[str, object]:
        st = self.status()
        return {
            "namespace": self.spec.namespace, "service": self.spec.service,
            "name": self.spec.name, "state": st.state.value, "reason": st.reason,
            "message": st.message, "instances": st.instances,
            "ready_instances": st.ready_instances, "in_flight": st.in_flight,
            "waiting": len(self.waiters), "cold_starts": st.cold_starts,
            "requests": st.requests, "holds_s": list(self.holds_s),
            "ready_s": list(self.ready_s),
            "pids": self.pids(),
            "instance_list": [
                {"name": i.name, "port": i.port, "ready": i.ready, "draining": i.draining,
                 "in_flight": i.in_flight, "served": i.served} for i in self.instances],
        }

    def pids(self) -> list[int]:
        return [i.pid for i in self.instances if i.process.running]
