"""``modelfn bench``'s table and warnings on given results: the client-bound verdict shows."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from click.testing import CliRunner
from rich.console import Console

from modelfn.cli import bench
from modelfn.client.loadgen import LoadResult

if TYPE_CHECKING:
    import pytest


def result(concurrency: int, client_cpu: float | None) -> LoadResult:
    return LoadResult(
        model="digits", concurrency=concurrency, binary=False, duration_s=5.0, requests=50_000,
        rows=50_000, errors=0, req_per_s=10_000.0, rows_per_s=10_000.0, p50_ms=3.0,
        p90_ms=4.0, p99_ms=6.0, mean_ms=3.1, avg_batch_size=12.0, client_cpu=client_cpu,
    )


def rendered(results: list[LoadResult]) -> str:
    console = Console(width=200, record=True)
    console.print(bench.results_table(results))
    return console.export_text()


def test_table_marks_a_client_bound_run_as_a_lower_bound() -> None:
    text = rendered([result(1, 0.35), result(32, 0.97), result(8, None)])
    lines = {line.split()[1]: line for line in text.splitlines() if line.strip().startswith("json")}
    assert "client CPU" in text
    assert "35%" in lines["1"] and "≥" not in lines["1"] and "!" not in lines["1"]
    assert "97%!" in lines["32"] and "≥10,000.0" in lines["32"]
    assert lines["8"].rstrip().endswith("-")


def test_command_warns_when_its_client_was_the_bottleneck(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def fake_run_bench(url: str, model: str, **kwargs: Any) -> list[LoadResult]:
        return [result(1, 0.3), result(32, 0.95)]

    monkeypatch.setattr(bench, "run_bench", fake_run_bench)
    out = CliRunner().invoke(bench.bench_command, ["127.0.0.1:9", "-m", "digits", "-c", "1,32"])
    assert out.exit_code == 0, out.output
    assert "warning: c=32: the load generator used 95% of its CPU core" in out.stderr
    assert "c=1:" not in out.stderr


def test_command_is_quiet_when_the_client_had_room(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench, "run_bench", lambda url, model, **kw: [result(32, 0.5)])
    out = CliRunner().invoke(bench.bench_command, ["127.0.0.1:9", "-m", "digits", "-c", "32"])
    assert out.exit_code == 0, out.output
    assert "warning" not in out.stderr
