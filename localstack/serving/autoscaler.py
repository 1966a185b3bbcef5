"""A revision's autoscaler: how many instances it runs, from the requests in flight.

Every tick it samples the requests in flight (served and waiting); desired = ceil(average
over the window / target), between min-scale and max-scale (or the local cap). It starts
instances to reach it, and stops those idle past the idle window (the last one only after
the retention period too): an instance leaves the routing first, then gets SIGTERM and
drains. A revision without a place under the platform's cap starts nothing and tries again
each tick.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import deque
from typing import TYPE_CHECKING

from modelfn.localstack.plane import RevisionState
from modelfn.localstack.serving.capacity import INSTANCE_LIMIT

if TYPE_CHECKING:
    from modelfn.localstack.serving.revision import Revision

log = logging.getLogger("modelfn.serving")

#: seconds between autoscaler ticks
TICK_S = 0.05


class Autoscaler:
    """One revision's scaling loop on the plane's event loop (not thread safe)."""

    def __init__(self, revision: Revision, *, idle_s: float, window_s: float,
                 max_scale: int) -> None:
        self.revision = revision
        self.idle_s = idle_s
        self.window_s = window_s
        self.max_scale = max_scale
        self._samples: deque[tuple[float, int]] = deque()
        self._wake = asyncio.Event()
        self._loop: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._loop = asyncio.create_task(self._run(), name=f"{self.revision.spec.name}-autoscaler")

    async def stop(self) -> None:
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop
            self._loop = None

    def wake(self) -> None:
        """Tick now: a request waits, or an instance left the routing."""
        self._wake.set()

    def desired(self, now: float) -> int:
        revision = self.revision
        spec = revision.spec
        self._samples.append((now, revision.activator.in_flight))
        while self._samples and self._samples[0][0] < now - self.window_s:
            self._samples.popleft()
        average = sum(s for _, s in self._samples) / len(self._samples)
        target = spec.target
        if spec.container_concurrency > 0:  # the hard limit caps the soft target
            target = min(target, spec.container_concurrency) if target > 0 else \
                spec.container_concurrency
        want = math.ceil(average / target) if target > 0 else 0
        if revision.breaker.waiters:
            want = max(want, 1)
        return max(spec.min_scale, min(self.max_scale, want))

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), TICK_S)
            self._wake.clear()
            try:
                self._tick(time.monotonic())
            except Exception:  # one bad tick must not stop scaling
                log.exception("autoscaler tick for %s failed", self.revision.spec.name)

    def _tick(self, now: float) -> None:
        revision = self.revision
        spec = revision.spec
        for instance in [i for i in revision.instances if i.ready and not i.process.running]:
            revision.instances.remove(instance)  # it died under us
            log.warning("instance %s exited: %s", instance.name, instance.process.tail(5))
            revision.spawn_stop(instance)
        want = self.desired(now)
        if revision.reason == INSTANCE_LIMIT and not revision.ready_s:  # still to prove it starts
            want = max(want, min(self.max_scale, spec.initial_scale))
        live = [i for i in revision.instances if not i.draining]
        failed = (revision.state is RevisionState.FAILED and revision.reason != INSTANCE_LIMIT
                  and not revision.breaker.waiters)
        if want > len(live) and not failed and revision.launch(want - len(live)):
            revision.changed()
        surplus = len(live) - want
        last_active = revision.activator.last_active
        for instance in sorted(live, key=lambda i: i.last_used):
            if surplus <= 0:
                break
            busy = instance.in_flight or now - instance.last_used < self.idle_s
            if not instance.accepting or busy:
                continue
            if len(live) - 1 == 0 and now - last_active < max(self.idle_s, spec.retention_s):
                continue
            instance.draining = True  # out of the routing before the SIGTERM
            revision.instances.remove(instance)
            live.remove(instance)
            surplus -= 1
            log.info("instance %s idle for %.1f s: stopping", instance.name,
                     now - instance.last_used)
            revision.spawn_stop(instance)
