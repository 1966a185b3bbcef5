from __future__ import annotations

import os
from typing import TYPE_CHECKING

from modelfn.runtime.hardware import process_age_s, usable_cpus

if TYPE_CHECKING:
    from pathlib import Path


def test_cgroup_quota_caps_the_affinity_count(tmp_path: Path) -> None:
    cpu_max = tmp_path / "cpu.max"
    cpu_max.write_text("50000 100000\n")  # half a CPU
    assert usable_cpus(cpu_max) == 1
    cpu_max.write_text("150000 100000\n")  # 1.5 CPUs round up
    assert usable_cpus(cpu_max) == min(2, len(os.sched_getaffinity(0)))


def test_unlimited_quota_uses_the_affinity_set(tmp_path: Path) -> None:
    cpu_max = tmp_path / "cpu.max"
    cpu_max.write_text("max 100000\n")
    assert usable_cpus(cpu_max) == len(os.sched_getaffinity(0))


def test_process_age_is_positive() -> None:
    age = process_age_s()
    assert age is not None and age >= 0
