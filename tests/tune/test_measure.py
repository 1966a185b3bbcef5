"""The parts of measuring that need no server: windows, cores, repositories, /proc."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

import pytest

from modelfn.runtime.config_file import parse_config
from modelfn.tune.candidates import Candidate, apply
from modelfn.tune.measure import (
    ForeignCpu,
    ServerMeasure,
    cpu_split,
    peak_rss,
    write_repository,
)
from modelfn.tune.search import Point

if TYPE_CHECKING:
    from pathlib import Path


def test_slow_levels_get_windows_that_hold_several_latencies(tmp_path: Path) -> None:
    measure = ServerMeasure(tmp_path, None, tmp_path, (1, 8, 32), duration=3.0, warmup=1.0)
    try:
        assert measure.window(1, None) == (1.0, 3.0)
        assert measure.window(8, Point(1, 10_000.0, 0.1, 0.2)) == (1.0, 3.0)  # fast: as set
        warmup, duration = measure.window(32, Point(8, 20.0, 400.0, 500.0))  # 1.6 s each
        assert warmup == pytest.approx(3.2) and duration == pytest.approx(8.0)
    finally:
        measure.close()


def test_cpu_split_gives_the_server_the_first_cores() -> None:
    mine = sorted(os.sched_getaffinity(0))
    assert cpu_split(None) == (None, None)
    server, client = cpu_split(1)
    assert server == mine[:1]
    assert client == (mine[1:] or None)


def test_peak_rss_of_this_process() -> None:
    rss = peak_rss(os.getpid())
    assert rss is not None and rss > 1 << 20
    assert peak_rss(2**22 + 1) is None  # above pid_max's default: no such process


def test_a_candidate_repository_links_the_model_and_writes_its_config(tmp_path: Path) -> None:
    model = tmp_path / "models" / "m"
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.onnx").write_bytes(b"onnx")
    (model / "config.pbtxt").write_text('name: "m"\nmax_batch_size: 4\n')
    tuned = apply(parse_config('name: "m"\nmax_batch_size: 4\n'), Candidate(2, 1, 16))
    repo = write_repository(tmp_path / "c1", model, tuned)
    assert (repo / "m" / "1").resolve() == (model / "1").resolve()
    assert parse_config((repo / "m" / "config.pbtxt").read_text()).max_batch_size == 16
    as_is = write_repository(tmp_path / "c2", model, None)
    assert (as_is / "m" / "config.pbtxt").resolve() == (model / "config.pbtxt").resolve()


def test_foreign_cpu_does_not_count_this_process() -> None:
    foreign = ForeignCpu(os.getpid())
    deadline = time.monotonic() + 0.3
    while time.monotonic() < deadline:  # busy here: ours, not foreign
        pass
    assert 0.0 <= foreign.cores() < 2.0 * len(os.sched_getaffinity(0))
