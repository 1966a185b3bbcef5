"""What this process may run on: usable CPUs (affinity and cgroup quota) and whether a GPU exists.

A function on Lambda or Knative typically sees the host's cores in
``os.cpu_count()`` but is limited by its cgroup's CPU quota; sizing ORT thread
pools by the host count oversubscribes the quota and slows every request.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

_CGROUP_V2 = Path("/sys/fs/cgroup/cpu.max")
_CGROUP_V1_QUOTA = Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")
_CGROUP_V1_PERIOD = Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us")


def _quota_cpus(cpu_max: Path = _CGROUP_V2) -> float | None:
    """The cgroup CPU quota in CPUs, or None when unlimited or unknown."""
    try:
        quota, period = cpu_max.read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass  # no cgroup v2 controller here: try v1
    try:
        q = int(_CGROUP_V1_QUOTA.read_text())
        p = int(_CGROUP_V1_PERIOD.read_text())
        if q > 0 and p > 0:
            return q / p
    except (OSError, ValueError):
        pass
    return None


def usable_cpus(cpu_max: Path = _CGROUP_V2) -> int:
    """CPUs this process may run on: min(affinity set, ceil(cgroup quota)), at least 1."""
    try:
        count = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        count = os.cpu_count() or 1
    quota = _quota_cpus(cpu_max)
    if quota is not None:
        count = min(count, max(1, math.ceil(quota)))
    return max(1, count)


def gpu_available() -> bool:
    """An NVIDIA device node exists and onnxruntime was built with the CUDA provider.

    The provider list alone is not enough: an onnxruntime-gpu wheel lists CUDA
    on machines that have no GPU at all.
    """
    if not Path("/dev/nvidiactl").exists():
        return False
    import onnxruntime as ort

    return "CUDAExecutionProvider" in ort.get_available_providers()


def process_age_s() -> float | None:
    """Seconds since this process started (Linux), for the cold-start import phase."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        start_ticks = int(fields[19])  # field 22 of the whole line: starttime
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))


_MEMINFO = Path("/proc/meminfo")
_CGROUP_MEMORY_MAX = Path("/sys/fs/cgroup/memory.max")
_CGROUP_MEMORY_CURRENT = Path("/sys/fs/cgroup/memory.current")


def available_memory() -> int | None:
    """Bytes this process could still allocate: the kernel's MemAvailable, or less when a
    cgroup memory limit is nearer (a container's, a Lambda function's). None if unknown."""
    found: list[int] = []
    try:
        for line in _MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
                break
    except (OSError, ValueError):
        pass
    try:
        limit = _CGROUP_MEMORY_MAX.read_text().strip()
        if limit != "max":
            found.append(max(0, int(limit) - int(_CGROUP_MEMORY_CURRENT.read_text())))
    except (OSError, ValueError):
        pass
    return min(found) if found else None
