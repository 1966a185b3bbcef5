"""The cost model on fixed inputs, and ``modelfn bench --cost`` against a real server."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from click.testing import CliRunner
from rich.console import Console
from servers import Server

from modelfn.cli.bench import bench_command
from modelfn.cli.cost import (
    Assumptions,
    Run,
    assumption_lines,
    cost_table,
    knative_instances,
    knative_per_million,
    lambda_per_million,
)
from modelfn.cli.prices import InstancePrice, LambdaPrice, PriceTable
from modelfn.client.loadgen import LoadResult

if TYPE_CHECKING:
    from collections.abc import Iterator

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "models"
# round prices so that every expected figure below is exact
LAMBDA = LambdaPrice("x86_64", gb_second=0.00001, per_million_requests=0.25)
NODE = InstancePrice("node.large", hourly=3.6)  # $0.001 a second
PRICES = PriceTable("us-test-1", "2026-01", "USD", (LAMBDA,), (NODE,), "test prices")
# 1,000 rows/s, 4 ms billed per request of one row, the server's batches 8 rows
RUN = Run("json c=8", rows_per_s=1000.0, rows_per_request=1.0, billed_ms=4.0,
          rows_per_batch=8.0)


def test_lambda_bills_memory_times_rounded_duration_plus_the_request() -> None:
    # 2 GB x 0.004 s x $0.00001 = $0.00000008, + $0.00000025 a request; a million of them
    assert lambda_per_million(RUN, LAMBDA, 2048) == pytest.approx(0.33, rel=1e-12)
    # behind the gateway 8 rows share one invocation
    assert lambda_per_million(RUN, LAMBDA, 2048, batched=True) == pytest.approx(0.04125,
                                                                               rel=1e-12)
    # 512 MB is a quarter of the GB-seconds
    assert lambda_per_million(RUN, LAMBDA, 512) == pytest.approx(0.27, rel=1e-12)


def test_rows_per_request_divide_the_invocations() -> None:
    four_rows = Run("binary c=1", 400.0, rows_per_request=4.0, billed_ms=10.0)
    # 2 GB x 0.010 s x $0.00001 + $0.00000025 = $0.00000045 for 4 inferences
    assert lambda_per_million(four_rows, LAMBDA, 2048) == pytest.approx(0.1125, rel=1e-12)
    assert lambda_per_million(four_rows, LAMBDA, 2048, batched=True) is None  # no batch seen


def test_knative_pays_the_node_for_what_it_serves_at_the_target_utilisation() -> None:
    # at 50% one node serves 500 rows/s: $0.001 / 500 per row, $2 a million
    assert knative_instances(RUN, 0.5, None) == 1
    assert knative_per_million(RUN, NODE, 0.5) == pytest.approx(2.0, rel=1e-12)
    # 1,200 rows/s at 50% needs 3 nodes: $0.003 a second / 1,200 rows
    assert knative_instances(RUN, 0.5, 1200.0) == 3
    assert knative_per_million(RUN, NODE, 0.5, 1200.0) == pytest.approx(2.5, rel=1e-12)
    # a trickle still needs a whole node: 10 rows/s costs $100 a million
    assert knative_instances(RUN, 0.5, 10.0) == 1
    assert knative_per_million(RUN, NODE, 0.5, 10.0) == pytest.approx(100.0, rel=1e-12)
    # exactly the capacity of two nodes is two, not three
    assert knative_instances(RUN, 0.6, 1200.0) == 2


def test_run_from_a_load_result() -> None:
    result = LoadResult(model="m", concurrency=8, binary=True, duration_s=10.0, requests=100,
                        rows=400, errors=0, req_per_s=10.0, rows_per_s=40.0, p50_ms=1.0,
                        p90_ms=1.0, p99_ms=1.0, mean_ms=1.0, avg_batch_size=12.0,
                        billed_ms=2.0)
    assert Run.from_result(result) == Run("binary c=8", 40.0, 4.0, 2.0, 12.0)
    empty = LoadResult(model="m", concurrency=1, binary=False, duration_s=1.0, requests=0,
                       rows=0, errors=3, req_per_s=0.0, rows_per_s=0.0, p50_ms=None,
                       p90_ms=None, p99_ms=None, mean_ms=None, avg_batch_size=None)
    assert Run.from_result(empty) is None


def _render(runs: list[Run], assume: Assumptions) -> str:
    console = Console(width=200, record=True)
    console.print(cost_table(runs, PRICES, assume))
    return console.export_text()


def test_the_table_puts_the_platforms_side_by_side() -> None:
    fives = Run("json c=8", rows_per_s=1000.0, rows_per_request=1.0, billed_ms=4.0,
                rows_per_batch=5.0)
    text = _render([fives, Run("json c=1", 250.0, 1.0, 1.0)], Assumptions(2048, 0.5))
    lambda_row = next(line for line in text.splitlines() if "one request per" in line)
    assert re.findall(r"\$[\d.]+", lambda_row) == ["$0.3300", "$0.2700"]
    batched = next(line for line in text.splitlines() if "behind the gateway" in line)
    assert re.findall(r"\$[\d.]+|-", batched.split(")")[-1]) == ["$0.0660", "-"]
    node = next(line for line in text.splitlines() if "Knative node.large" in line)
    assert re.findall(r"\$[\d.]+", node) == ["$2.000", "$8.000"]
    lines = assumption_lines(PRICES, Assumptions(1024, 0.5, 300.0))
    assert "us-test-1 list prices as of 2026-01 (test prices)" in lines[0]
    assert "1024 MB" in lines[1] and "50% target utilisation" in lines[2]
    assert "a demand of 300.0 rows/s" in lines[2]


@pytest.fixture(scope="module")
def digits() -> Iterator[Server]:
    server = Server(EXAMPLES)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def test_bench_cost_end_to_end(digits: Server, tmp_path: Path) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text("region: eu-test-1\nas_of: '2026-02'\nlambda:\n"
                      "  arm64: {gb_second: 0.00001, per_million_requests: 0.2}\n"
                      "instances:\n  small.node: {hourly: 0.05, vcpus: 2}\n")
    result = CliRunner().invoke(bench_command, [
        digits.url, "-m", "digits", "-c", "1,4", "--duration", "0.5", "--warmup", "0.2",
        "--prices", str(prices), "--memory", "1024", "--utilisation", "0.5",
    ], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    out = result.output
    assert "cost per million inferences, USD" in out
    for row in ("Lambda arm64, one request per invocation",
                "Lambda arm64, behind the gateway (batched)",
                "Knative instances at 50%", "Knative small.node (0.05/h)"):
        line = next(line for line in out.splitlines() if row in line)
        assert len(re.findall(r"\$[\d.,]+|\b1\b", line.split(row)[1])) == 2, line
    assert f"eu-test-1 list prices as of 2026-02 ({prices})" in out
    assert "Lambda: 1024 MB" in out


def test_bench_cost_refuses_a_bad_price_file_before_measuring(tmp_path: Path) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text("region: x\nas_of: y\nlambda: {}\ninstances: {a: {hourly: 1}}\n")
    # no server at this address: the price file is checked first
    result = CliRunner().invoke(bench_command, ["127.0.0.1:9", "-m", "digits", "--cost",
                                                "--prices", str(prices)])
    assert result.exit_code == 2
    assert f"{prices}: lambda must be a mapping with at least one entry" in result.output
