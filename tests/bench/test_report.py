"""bench/: the report's client and error flags, on given numbers (wrk's parsing is
modelfn.client.wrk's: tests/client/test_wrk.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def report() -> ModuleType:
    return _load("report")


def _cell(target: str, client: str, req: float, cpu: float | None,
          errors: int = 0, concurrency: int = 32) -> dict[str, Any]:
    return {"config": "pinned", "workload": "digits", "target": target, "body": "json",
            "concurrency": concurrency, "client": client, "rep": 0, "foreign_cores": 0.05,
            "result": {"req_per_s": req, "rows_per_s": req, "p50_ms": 1.0, "p99_ms": 2.0,
                       "avg_batch_size": None, "errors": errors, "first_error":
                       "HTTP 503" if errors else None, "client_cpu": cpu,
                       "server_cpu_us": 100.0}}


def test_report_names_the_client_and_flags_bound_and_failed_cells(report: ModuleType) -> None:
    data = SimpleNamespace(
        command="python bench/run.py --quick", interrupted=False, raw=[], starts=[],
        unavailable={}, configs={"pinned": "server on core 0"},
        settings={"started": "now", "duration": 5, "warmup": 1, "repeat": 1,
                  "raw_duration": 0.5, "spinning": "default", "concurrency": [32],
                  "clients": ["wrk", "aiohttp"], "load_start": [1.0, 1.0, 1.0],
                  "machine": {"cpu": "x", "cores": "2", "kernel": "k"}},
        cells=[_cell("modelfn", "wrk", 11000.0, 0.2), _cell("naive", "wrk", 4000.0, 0.1),
               _cell("modelfn", "aiohttp", 9600.0, 0.97),
               _cell("naive", "aiohttp", 4700.0, 0.5, errors=3)],
    )
    text = report.render(data)
    rows = {tuple(c.strip() for c in line.split("|")[3:5]): line
            for line in text.splitlines() if line.startswith("| json")}
    assert "2.75×" in rows[("wrk", "modelfn")] and "20%" in rows[("wrk", "modelfn")]
    assert "97%!" in rows[("aiohttp", "modelfn")]
    assert "not reported" in rows[("aiohttp", "naive")]
    assert "measured with aiohttp: modelfn 9,600.0 req/s (client-bound: a lower bound)" in text
    assert "load average (1, 5, 15 min) 1.00 1.00 1.00 at the start" in text


def test_the_polling_target_is_headlined_at_every_concurrency(report: ModuleType) -> None:
    data = SimpleNamespace(
        command="python bench/run.py --quick --targets modelfn,modelfn-poll", interrupted=False,
        raw=[], starts=[], unavailable={}, configs={"pinned": "server on core 0"},
        settings={"started": "now", "duration": 5, "warmup": 1, "repeat": 1,
                  "raw_duration": 0.5, "spinning": "default", "concurrency": [1, 32],
                  "clients": ["wrk"], "load_start": [1.0, 1.0, 1.0],
                  "machine": {"cpu": "x", "cores": "2", "kernel": "k"}},
        cells=[_cell(target, "wrk", req, 0.2, concurrency=c)
               for target, c, req in (("modelfn", 1, 5000.0), ("modelfn-poll", 1, 6500.0),
                                      ("modelfn", 32, 18000.0), ("modelfn-poll", 32, 17900.0))],
    )
    headline = report.render(data).split("## Headline")[1].split("##")[0]
    assert "c=1, measured with wrk: modelfn-poll 6,500.0 req/s" in headline
    assert "c=32, measured with wrk: modelfn-poll 17,900.0 req/s" in headline
    assert "c=32, measured with wrk: modelfn 18,000.0 req/s" in headline
    assert "c=1, measured with wrk: modelfn 5" not in headline  # modelfn: the top level only
    assert "p50 1.000 ms" in headline


def _raw(phase: str, spinning: bool, readings: dict[int, float]) -> dict[str, Any]:
    return {"config": "pinned", "workload": "cnn", "phase": phase, "threads": 1,
            "spinning": spinning, "batches": [{"batch": b, "rows_per_s": r}
                                              for b, r in readings.items()]}


def test_raw_best_is_the_best_mean_of_the_readings_before_and_after(report: ModuleType) -> None:
    """One lucky reading does not set the bar: batch 16 read 41 once and 33 after the
    servers, batch 32 read 38 both times."""
    data = SimpleNamespace(raw=[
        _raw("before", False, {1: 33.0, 16: 41.0, 32: 38.0}),
        _raw("after", False, {1: 31.0, 16: 33.0, 32: 38.0}),
        _raw("before", True, {1: 30.0, 16: 35.0, 32: 36.0}),
        _raw("after", True, {1: 30.0, 16: 35.0, 32: 36.0}),
    ])
    assert report._raw_best(data) == {("pinned", "cnn"): 38.0}
    assert report.mean_best({1: [33.0, 31.0], 16: [41.0, 33.0]}) == (16, 37.0)
