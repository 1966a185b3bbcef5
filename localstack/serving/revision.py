"""One revision on the serving plane: its instances, its state, and its roles.

A revision runs its instances (``instance.Instance``) and says how they are doing
(Ready, or Failed with Knative's reason); the roles act on them: the ``Breaker`` (the
per-instance ``containerConcurrency`` limit and the queue behind it), the ``Activator``
(requests held while it scales from zero, handed to an instance) and the ``Autoscaler``
(how many instances run). Every instance holds a place of the platform's
``InstanceCap`` until its process is gone; a revision without a place starts nothing
(its autoscaler tries again each tick); with no instance at all it is ``InstanceLimit``
(Ready=False, naming the cap), and a request held past the timeout is answered 503
naming it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from modelfn.localstack.plane import RevisionState, RevisionStatus
from modelfn.localstack.serving.activator import Activator, RevisionUnavailable
from modelfn.localstack.serving.autoscaler import Autoscaler
from modelfn.localstack.serving.breaker import Breaker
from modelfn.localstack.serving.capacity import INSTANCE_LIMIT
from modelfn.localstack.serving.instance import CpuSets, Instance
from modelfn.process.supervisor import ProcessFailed

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from pathlib import Path

    from modelfn.localstack.plane import RevisionSpec
    from modelfn.localstack.serving.capacity import InstanceCap
    from modelfn.platforms.podman import Podman

log = logging.getLogger("modelfn.serving")


class Revision:
    """One revision on the plane's event loop. Not thread safe: the loop owns it."""

    def __init__(self, spec: RevisionSpec, *, idle_s: float, window_s: float, cap: InstanceCap,
                 queue_size: int, queue_timeout_s: float | None, cpusets: CpuSets,
                 podman: Podman | None, log_dir: Path | None, base_env: Mapping[str, str],
                 tmp_root: Path | None = None,
                 changed: Callable[[Revision], None]) -> None:
        self.spec = spec
        self.cap = cap
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
        self.cold_starts = 0
        self.ready_s: list[float] = []  # each instance: process start -> readiness answered
        self._tasks: set[asyncio.Task[None]] = set()
        self.closing = False  # the platform is stopping: no scaling, no new instance
        self.breaker = Breaker(spec.name, self.instances, limit=spec.container_concurrency,
                               queue_size=queue_size)
        self.activator = Activator(
            self, timeout_s=spec.timeout_s if queue_timeout_s is None else queue_timeout_s)
        self.autoscaler = Autoscaler(
            self, idle_s=idle_s, window_s=window_s,
            max_scale=max(spec.max_scale if spec.max_scale > 0 else cap.limit, 1))

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        self.launch(max(self.spec.initial_scale, self.spec.min_scale, 1))
        self.autoscaler.start()

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
        await self.autoscaler.stop()

    def _refuse_waiters(self, why: str) -> None:
        self.breaker.refuse(lambda: RevisionUnavailable(why))

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

    def changed(self) -> None:
        """Tell the plane this revision's status changed."""
        self._changed(self)

    def launch(self, count: int = 1) -> int:
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
        self.breaker.dispatch()
        self._changed(self)

    def _fail(self, reason: str, message: str) -> None:
        if any(i.accepting for i in self.instances):
            self._changed(self)  # a scale-out failed; the revision still serves
            return
        self.state, self.reason, self.message = RevisionState.FAILED, reason, message
        if not any(not i.ready for i in self.instances):
            error = RevisionUnavailable(f"revision {self.spec.name} cannot start: {message}")
            self.breaker.refuse(lambda: error)
        self._changed(self)

    async def _drop(self, instance: Instance) -> None:
        instance.draining = True
        with contextlib.suppress(ValueError):
            self.instances.remove(instance)
        await self._stop(instance)

    def spawn_stop(self, instance: Instance) -> None:
        """Stop ``instance`` (already out of the routing) in the background."""
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
            in_flight=self.activator.in_flight, cold_starts=self.cold_starts,
            requests=self.activator.requests,
        )

    def describe(self) -> dict[str, object]:
        st = self.status()
        return {
            "namespace": self.spec.namespace, "service": self.spec.service,
            "name": self.spec.name, "state": st.state.value, "reason": st.reason,
            "message": st.message, "instances": st.instances,
            "ready_instances": st.ready_instances, "in_flight": st.in_flight,
            "waiting": len(self.breaker.waiters), "cold_starts": st.cold_starts,
            "requests": st.requests, "holds_s": list(self.activator.holds_s),
            "ready_s": list(self.ready_s),
            "pids": self.pids(),
            "instance_list": [
                {"name": i.name, "port": i.port, "ready": i.ready, "draining": i.draining,
                 "in_flight": i.in_flight, "served": i.served} for i in self.instances],
        }

    def pids(self) -> list[int]:
        return [i.pid for i in self.instances if i.process.running]
