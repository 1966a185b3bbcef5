"""Is the load generator the bottleneck? Its own CPU time over a window, and the verdict.

A closed-loop client that used its core up measured itself, not the server: the server
might have answered faster had it been asked faster. ``modelfn bench`` and ``bench/run.py``
both measure the client's CPU time across the window and call ``client_bound`` on it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

CLK_TCK = os.sysconf("SC_CLK_TCK")

#: a client busy this share of its cores (or more) over the window is taken as the bottleneck
CLIENT_BOUND_SHARE = 0.9


def client_bound(cpu_share: float | None, threshold: float = CLIENT_BOUND_SHARE) -> bool:
    """True when the client's CPU share of its cores reached ``threshold`` (None: unknown)."""
    return cpu_share is not None and cpu_share >= threshold


def cpu_share(cpu_seconds: float, wall_seconds: float, cores: int = 1) -> float | None:
    """CPU time over wall time, as a share of ``cores`` (None for an empty window)."""
    if wall_seconds <= 0 or cores < 1:
        return None
    return cpu_seconds / wall_seconds / cores


def client_warning(concurrency: int, share: float | None) -> str | None:
    """The line ``modelfn bench`` prints for a client-bound run, or None."""
    if not client_bound(share):
        return None
    assert share is not None
    return (
        f"c={concurrency}: the load generator used {share:.0%} of its CPU core: the client, "
        "not the server, limited this run, so its req/s is only a lower bound for the server. "
        "Measure with a faster client (bench/run.py drives wrk), or on a machine with a core "
        "to spare for the client."
    )


@dataclass(slots=True)
class CpuClock:
    """This process's CPU time and the wall clock, read at ``start()`` and ``stop()``."""

    cpu0: float = 0.0
    wall0: float = 0.0
    share: float | None = None

    def start(self) -> None:
        self.cpu0, self.wall0 = time.process_time(), time.perf_counter()

    def stop(self) -> float | None:
        self.share = cpu_share(time.process_time() - self.cpu0, time.perf_counter() - self.wall0)
        return self.share


def busy_cpu_seconds() -> float:
    """CPU time the whole machine has been busy since boot (not idle, not iowait)."""
    with open("/proc/stat") as stat:
        values = [int(v) for v in stat.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (values + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


def process_cpu_seconds(pid: int) -> float:
    """CPU time of ``pid`` (user + system, its waited-for children too); 0 when gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    # after the command name: utime, stime, cutime, cstime are fields 14 to 17
    return sum(int(v) for v in fields[11:15]) / CLK_TCK
