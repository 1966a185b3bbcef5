"""``modelfn bench``: the closed-loop load generator as a command, like Triton's perf_analyzer.

The measuring is in ``loadgen`` and the cost model in ``cost``; this module parses the
options and prints the tables. A run that completed no request fails the command, with the
exit code of its first error's status (as ``invoke``'s).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich import box
from rich.table import Table

from modelfn.cli.cost import Assumptions, Run, assumption_lines, cost_table
from modelfn.cli.errors import exit_on_error
from modelfn.cli.invoke import auth_options
from modelfn.cli.params import DURATION, DURATION_OR_ZERO
from modelfn.cli.prices import load_prices
from modelfn.cli.rows import check_rows_source, rows_per_request_option
from modelfn.cli.tables import table_console
from modelfn.client.auth import RequestAuth
from modelfn.client.cpu import client_bound, client_warning
from modelfn.client.loadgen import REQUEST_TIMEOUT_S, NoRequestCompleted, normalize_url, run_bench
from modelfn.platforms.aws_lambda import DEFAULT_MEMORY_MB, MEMORY_MB
from modelfn.runtime.errors import InvalidInput

if TYPE_CHECKING:
    from collections.abc import Sequence

    from modelfn.cli.prices import PriceTable
    from modelfn.client.loadgen import LoadResult


def _fmt(value: float | None, digits: int = 2) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def results_table(results: Sequence[LoadResult], title: str = "") -> Table:
    """One row per run. A run whose client used its core up shows its rates as lower bounds
    (``≥``) and its client CPU with ``!``: the server was not what limited it."""
    table = Table(title=title or None, box=box.SIMPLE_HEAD)
    table.add_column("body")
    columns = ["c", "req/s", "rows/s", "p50 ms", "p90 ms", "p99 ms", "batch", "errors",
               "client CPU"]
    in_model = any(r.busy is not None for r in results)
    if in_model:
        columns.append("in model")
    for column in columns:
        table.add_column(column, justify="right", no_wrap=True)
    for r in results:
        bound = client_bound(r.client_cpu)
        at_least = "≥" if bound else ""
        busy = ["-" if r.busy is None else f"{r.busy:.0%}"] if in_model else []
        table.add_row(
            "binary" if r.binary else "json",
            str(r.concurrency),
            at_least + _fmt(r.req_per_s, 1),
            at_least + _fmt(r.rows_per_s, 0),
            _fmt(r.p50_ms),
            _fmt(r.p90_ms),
            _fmt(r.p99_ms),
            _fmt(r.avg_batch_size),
            str(r.errors),
            "-" if r.client_cpu is None else f"{r.client_cpu:.0%}" + ("!" if bound else ""),
            *busy,
        )
    return table


def parse_concurrency(
    ctx: click.Context | None, param: click.Parameter | None, value: str | tuple[int, ...]
) -> tuple[int, ...]:
    """A comma-separated list of positive integers, e.g. ``1,8,32``."""
    if isinstance(value, tuple):
        return value
    try:
        levels = tuple(int(part) for part in value.split(",") if part.strip())
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a comma-separated list of integers") from None
    if not levels or min(levels) < 1:
        raise click.BadParameter(f"{value!r}: every concurrency must be a positive integer")
    return levels


@click.command("bench")
@click.argument("url")
@click.option("--model", "-m", required=True, help="Model name.")
@click.option("--version", "version", default=None, help="Model version (default: the server's).")
@click.option(
    "--input",
    "input_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="A V2 request .json or a .npy array (default: random inputs from the model metadata).",
)
@rows_per_request_option("load the model as a client that sends batches does.")
@click.option(
    "--concurrency",
    "-c",
    callback=parse_concurrency,
    default="1,8,32",
    show_default=True,
    help="Closed-loop workers, one run per value.",
)
@click.option(
    "--duration",
    type=DURATION,
    default="10s",
    show_default=True,
    help="Measured window per run (10s, 1m).",
)
@click.option(
    "--warmup",
    type=DURATION_OR_ZERO,
    default="2s",
    show_default=True,
    help="Warm-up before each window (0: none).",
)
@click.option("--binary", is_flag=True, help="Use the binary tensor extension both ways "
              "(FP16 inputs need it: JSON has no FP16 form).")
@auth_options
@click.option("--metrics-url", default=None, help="Prometheus endpoint (default: URL/metrics).")
@click.option("--count-batches", is_flag=True,
              help="Count req/s and rows/s over the server's whole batches, from its Triton "
                   "statistics (URL/v2/models/MODEL/stats), rather than the answers inside "
                   "the window: steady for a slow model that answers in bursts. URL must be "
                   "one server, not a gateway or ingress in front of several.")
@click.option(
    "--timeout",
    "request_timeout",
    type=DURATION,
    default=f"{REQUEST_TIMEOUT_S:g}s",
    show_default=True,
    help="Per-request timeout.",
)
@click.option(
    "--json",
    "json_out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write the results as JSON to this file.",
)
@click.option("--cost", is_flag=True,
              help="Also print the cost per million inferences on Lambda and Knative nodes.")
@click.option(
    "--prices",
    "prices_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Price table (YAML) for --cost (default: the built-in one); implies --cost.",
)
@click.option("--memory", "memory_mb", type=click.IntRange(*MEMORY_MB),
              default=DEFAULT_MEMORY_MB, show_default=True,
              help="Lambda memory size, MB, for --cost.")
@click.option("--utilisation", type=click.FloatRange(0, 1, min_open=True), default=0.6,
              show_default=True, help="Target utilisation of a Knative node, for --cost.")
@click.option("--demand", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Rows/s the Knative nodes must serve, for --cost (default: what keeps "
                   "one node at the target utilisation).")
def bench_command(
    url: str,
    model: str,
    version: str | None,
    input_path: Path | None,
    rows_per_request: int | None,
    concurrency: tuple[int, ...],
    duration: float,
    warmup: float,
    binary: bool,
    auth: str | None,
    api_key: str | None,
    region: str | None,
    metrics_url: str | None,
    count_batches: bool,
    request_timeout: float,
    json_out: Path | None,
    cost: bool,
    prices_path: Path | None,
    memory_mb: int,
    utilisation: float,
    demand: float | None,
) -> None:
    """Measure throughput and latency of MODEL at URL under closed-loop concurrency."""
    check_rows_source(rows_per_request, input_path)
    with exit_on_error():
        prices = None
        if cost or prices_path is not None:  # a bad price file is reported before the run
            prices = load_prices(prices_path)
        if json_out is not None and not json_out.parent.is_dir():  # say so before the run
            raise InvalidInput(f"--json {json_out}: {json_out.parent} is not a directory")
        url = normalize_url(url)
        results = run_bench(
            url,
            model,
            concurrency=concurrency,
            duration=duration,
            warmup=warmup,
            binary=binary,
            version=version,
            input_path=input_path,
            rows_per_request=rows_per_request or 1,
            metrics_url=metrics_url,
            count_batches=count_batches,
            request_timeout=request_timeout,
            auth=RequestAuth.for_url(url, auth, api_key, region),
        )
        _report(results, f"{model} at {url}", count_batches, prices,
                Assumptions(memory_mb, utilisation, demand))
        if json_out is not None:
            try:
                json_out.write_text(json.dumps([r.to_json() for r in results], indent=2)
                                    + "\n")
            except OSError as exc:
                raise InvalidInput(f"--json {json_out}: cannot write the results: "
                                   f"{exc.strerror or exc}") from None
        failed = [r for r in results if r.requests == 0]
        if failed:
            raise NoRequestCompleted(failed)


def _report(results: Sequence[LoadResult], title: str, count_batches: bool,
            prices: PriceTable | None, assume: Assumptions) -> None:
    """The results table, each run's errors and warnings, and the costs when asked for."""
    console = table_console()
    console.print(results_table(results, title=title))
    if any(r.rate_from == "batches" for r in results):
        click.echo("req/s and rows/s: over the server's whole batches (its statistics); "
                   "in model: the share of that time its instances ran the model")
    for r in results:
        if r.first_error and r.requests:  # a run with none fails the command with its error
            click.echo(f"c={r.concurrency}: {r.errors} errors; first: {r.first_error}", err=True)
        if count_batches and r.rate_from != "batches":
            click.echo(f"c={r.concurrency}: the server's statistics did not count its batches "
                       "(no statistics endpoint, or too few batches in the window): its rates "
                       "count the answers inside the window", err=True)
        warning = client_warning(r.concurrency, r.client_cpu)
        if warning:
            click.echo(f"warning: {warning}", err=True)
    if prices is not None:
        runs = [run for run in map(Run.from_result, results) if run is not None]
        if runs:
            console.print(cost_table(runs, prices, assume))
            for line in assumption_lines(prices, assume):
                click.echo(line)
        else:
            click.echo("no request completed: no cost to report", err=True)


if __name__ == "__main__":
    bench_command(auto_envvar_prefix="MODELFN")
