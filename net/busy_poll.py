"""Busy polling: the event loop keeps polling, without sleeping, for a while after a request.

A server that sleeps between requests pays a wake-up for each one. On a virtual machine
whose idle CPU halts, that wake-up goes through the hypervisor, and the request then runs on
cold caches. Measured on a 2-vCPU VM (``bench/RESULTS.md``), one-row digits at c=1 with the
server on a core of its own, polling for 100 µs cut the median latency.
Linux makes the same trade for sockets (``net.core.busy_poll``) and KVM guests
for the whole CPU (``cpuidle-haltpoll``); a function cannot set either on its platform.

The price is CPU, and it only pays where the loop has a core to itself:

- after every request the loop spins for ``window`` unless the next request comes sooner:
  nothing under load (the loop never waits), up to ``window`` of CPU per request when
  traffic is sparse;
- where the server shares its cores with its client or its own ONNX Runtime threads, the
  spin takes their CPU: on the same VM with nothing pinned, c=1 p50 went up;
- under a CPU quota (a Kubernetes CPU limit) the spin spends the quota, and a CPU-based
  autoscaler sees a busy process. Knative's concurrency-based autoscaler and Lambda (whose
  function takes invocations from the runtime API, not from this loop) are not misled.

So it is off unless asked for (``MODELFN_BUSY_POLL_US``, ``modelfn serve --busy-poll-us``,
``modelfn deploy --busy-poll-us``).

The spin is one callback that re-schedules itself with ``call_soon`` while the window is
open: a loop with a ready callback polls its sockets with a zero timeout instead of
sleeping, and sockets are served between two turns of the spin as usual.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio

#: the longest window accepted: past a second, polling is a server that never sleeps
MAX_WINDOW_US = 1_000_000
#: why a function that speaks gRPC alone is refused a window rather than given one it ignores
GRPC_DOES_NOT_POLL = ("a function that serves gRPC alone takes its requests through grpc.aio's "
                      "own poller thread, never through the HTTP edge that starts the polling")


class BusyPoll:
    """Keeps one event loop polling until ``window`` seconds after the last ``touch``.

    ``touch`` runs on every request, so it only marks the activity; the spin, which runs
    once per turn of the loop, reads the clock and moves the window's end.
    """

    __slots__ = ("window", "spins", "_touched", "_until", "_loop")

    def __init__(self, window: float) -> None:
        if not 0 < window <= MAX_WINDOW_US / 1e6:
            raise ValueError(f"a busy-poll window must be more than 0 and at most "
                             f"{MAX_WINDOW_US} µs, not {window * 1e6:g} µs")
        self.window = window
        self.spins = 0  # turns of the loop spent polling, for tests and curiosity
        self._touched = False
        self._until = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop spinning; None: idle

    @property
    def spinning(self) -> bool:
        return self._loop is not None

    def touch(self, loop: asyncio.AbstractEventLoop) -> None:
        """Activity on ``loop``: keep it polling until ``window`` from now."""
        self._touched = True
        if self._loop is not loop:  # idle, or a server on a new loop
            self._loop = loop
            self._until = time.monotonic() + self.window
            loop.call_soon(self._spin, loop)

    def _spin(self, loop: asyncio.AbstractEventLoop) -> None:
        if loop is not self._loop:
            return  # a spin left on a loop the server has moved off
        now = time.monotonic()
        if self._touched:
            self._touched = False
            self._until = now + self.window
        elif now >= self._until:
            self._loop = None  # the window closed: the loop may sleep again
            return
        self.spins += 1
        loop.call_soon(self._spin, loop)
