"""bench/: wrk's result parsing and the report's client and error flags, on given numbers."""

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
def wrk_client() -> ModuleType:
    return _load("wrk_client")


@pytest.fixture(scope="module")
def report() -> ModuleType:
    return _load("report")


RAW = {"requests": 1000, "duration_us": 2_000_000, "bytes": 1, "non_200": 0,
       "connect_errors": 0, "read_errors": 0, "write_errors": 0, "timeouts": 0,
       "mean_us": 900.0, "max_us": 5000, "p50_us": 800, "p90_us": 1500, "p99_us": 3000}


def test_parse_output_finds_the_result_line(wrk_client: ModuleType) -> None:
    text = "Running 2s test\n  1 threads\nwrk-result {\"requests\":3,\"non_200\":1}\n"
    assert wrk_client.parse_output(text) == {"requests": 3, "non_200": 1}
    with pytest.raises(ValueError, match="no result line"):
        wrk_client.parse_output("Running 2s test\nsegfault\n")


def test_summarise_counts_rates_latencies_and_client_cpu(wrk_client: ModuleType) -> None:
    result = wrk_client.summarise(RAW, 1, cpu_seconds=1.9)
    assert result["requests"] == 1000 and result["errors"] == 0
    assert result["req_per_s"] == pytest.approx(500.0)
    assert result["p50_ms"] == pytest.approx(0.8) and result["p99_ms"] == pytest.approx(3.0)
    assert result["client_cpu"] == pytest.approx(0.95)
    assert result["first_error"] is None


def test_summarise_counts_answers_other_than_200_as_errors(wrk_client: ModuleType) -> None:
    result = wrk_client.summarise({**RAW, "non_200": 10, "timeouts": 2}, 1, cpu_seconds=0.2)
    assert result["requests"] == 990 and result["errors"] == 12
    assert result["first_error"] == "10 answers other than 200, 2 timeouts"


def _cell(target: str, client: str, req: float, cpu: float | None,
          errors: int = 0) -> dict[str, Any]:
    return {"config": "pinned", "workload": "digits", "target": target, "body": "json",
            "concurrency": 32, "client": client, "rep": 0, "foreign_cores": 0.05,
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
