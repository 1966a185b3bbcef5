"""modelfn.client.wrk: wrk's result line and figures from given strings, and one real wrk run
against `modelfn serve` (skipped where wrk is not on PATH)."""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING

import numpy as np
import pytest
from functions import DIGITS
from servers import Server

from modelfn.client.bodies import prepare_request
from modelfn.client.scrape import stats_url
from modelfn.client.wrk import (
    SCRIPT,
    find_wrk,
    measure,
    parse_output,
    steady_rate,
    summarise,
    write_body,
)

if TYPE_CHECKING:
    from pathlib import Path

RAW = {"requests": 1000, "duration_us": 2_000_000, "bytes": 1, "non_200": 0,
       "connect_errors": 0, "read_errors": 0, "write_errors": 0, "timeouts": 0,
       "mean_us": 900.0, "max_us": 5000, "p50_us": 800, "p90_us": 1500, "p99_us": 3000}


def test_parse_output_finds_the_result_line() -> None:
    text = "Running 2s test\n  1 threads\nwrk-result {\"requests\":3,\"non_200\":1}\n"
    assert parse_output(text) == {"requests": 3, "non_200": 1}
    with pytest.raises(ValueError, match="no result line"):
        parse_output("Running 2s test\nsegfault\n")


def test_summarise_counts_rates_latencies_and_client_cpu() -> None:
    result = summarise(RAW, 1, cpu_seconds=1.9)
    assert result["requests"] == 1000 and result["errors"] == 0
    assert result["req_per_s"] == pytest.approx(500.0)
    assert result["p50_ms"] == pytest.approx(0.8) and result["p99_ms"] == pytest.approx(3.0)
    assert result["client_cpu"] == pytest.approx(0.95)
    assert result["first_error"] is None


def test_the_steady_rate_counts_only_whole_seconds_inside_the_window() -> None:
    # a closed loop that starts empty: nothing in its first second, then steady
    per_second = {"100": 0, "101": 40, "102": 100, "103": 100, "104": 100, "105": 30}
    assert steady_rate(per_second, 101.5, 104.9) == pytest.approx(100.0)  # 102 and 103
    assert steady_rate(per_second, 102.0, 105.0) == pytest.approx(100.0)  # 102 to 104
    assert steady_rate({"102": 7}, 100.2, 105.0) == pytest.approx(7 / 4)  # silent seconds count
    assert steady_rate(per_second, 102.2, 102.9) is None  # no whole second in the window


def test_summarise_takes_the_window_rate_over_the_whole_run() -> None:
    result = summarise(RAW, 2, cpu_seconds=1.0, window=(450.0, 1.5))
    assert result["req_per_s"] == pytest.approx(450.0)
    assert result["rows_per_s"] == pytest.approx(900.0)
    assert result["requests"] == 675 and result["duration_s"] == pytest.approx(1.5)
    assert result["client_cpu"] == pytest.approx(0.5)  # wrk's CPU over its whole run


def test_summarise_counts_rows_of_each_answered_request() -> None:
    result = summarise({**RAW, "non_200": 100}, 8, cpu_seconds=0.5)
    assert result["rows"] == 900 * 8
    assert result["rows_per_s"] == pytest.approx(3600.0)
    assert result["req_per_s"] == pytest.approx(450.0)


def test_summarise_counts_answers_other_than_200_as_errors() -> None:
    result = summarise({**RAW, "non_200": 10, "timeouts": 2}, 1, cpu_seconds=0.2)
    assert result["requests"] == 990 and result["errors"] == 12
    assert result["first_error"] == "10 answers other than 200, 2 timeouts"


def test_summarise_has_no_latencies_without_an_answer() -> None:
    result = summarise({**RAW, "requests": 5, "non_200": 5}, 1, cpu_seconds=0.1)
    assert result["requests"] == 0 and result["rows_per_s"] == 0.0
    assert result["p50_ms"] is None and result["p99_ms"] is None


def test_write_body_gives_the_script_its_arguments(tmp_path: Path) -> None:
    inputs = {"input": np.zeros((1, 4), dtype=np.float32)}
    plain = prepare_request(inputs)
    assert write_body(plain, tmp_path / "b" / "json") == [str(tmp_path / "b" / "json")]
    assert (tmp_path / "b" / "json").read_bytes() == plain.body
    binary = prepare_request(inputs, binary=True)
    length = binary.headers["Inference-Header-Content-Length"]
    assert write_body(binary, tmp_path / "binary") == [str(tmp_path / "binary"), length]


def test_the_lua_script_ships_beside_the_module() -> None:
    assert SCRIPT.is_file() and "wrk-result" in SCRIPT.read_text()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is not on PATH")
def test_wrk_drives_modelfn_serve_with_json_and_binary_bodies(tmp_path: Path) -> None:
    wrk = find_wrk()
    assert wrk is not None
    server = Server(DIGITS.parent, "--model", "digits")
    try:
        server.wait_ready(60)
        inputs = {"input": np.zeros((1, 64), dtype=np.float32)}
        for body in ("json", "binary"):
            request = prepare_request(inputs, binary=body == "binary")
            args = write_body(request, tmp_path / body)
            url = f"http://{server.url}"
            result = measure(wrk, url, "digits", args, concurrency=4, duration=2.5,
                             warmup=1, cpus=None, stats_url=stats_url(url, "digits"))
            assert result["errors"] == 0, result
            assert result["rate_from"] == "batches"
            assert 0 < result["busy"] <= 1.05  # one instance: at most all of the window
            assert result["requests"] > 10 and result["p99_ms"] > 0
            # the window's whole seconds, not the run's 4 s with its warm-up, set the rate
            assert result["duration_s"] == pytest.approx(2.5, abs=0.3)
            assert result["requests"] == round(result["req_per_s"] * result["duration_s"])
            assert result["avg_batch_size"] is not None and result["avg_batch_size"] >= 1
    finally:
        server.stop()
