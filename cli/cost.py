"""Cost per million inferences on Lambda and on a Knative node, from a measured run.

Lambda bills each invocation for its configured memory times its billed duration (the
duration rounded up to a whole millisecond) at the GB-second price, plus the request price.
A request sent straight to a function is one invocation; behind the gateway, requests that
arrive while the function is busy go together as one invocation (a batch of N rows costs
one invocation), so the server's average batch is the rows an invocation carries. The
billed duration is the run's measured latency, each request's rounded up and averaged: for
a batch that is an upper bound, since a request's latency also holds its wait for the batch
before it.

A Knative node bills by the hour whatever it serves. One instance is taken to serve what the
measured server did (its rows/s); at a target utilisation, a demand of D rows/s needs
ceil(D / (utilisation x rows/s)) instances. Without a demand, the demand is what keeps one
instance at the target utilisation, which is the steady-state cost of a large fleet.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich import box
from rich.table import Table

if TYPE_CHECKING:
    from collections.abc import Sequence

    from modelfn.cli.prices import InstancePrice, LambdaPrice, PriceTable
    from modelfn.client.loadgen import LoadResult

PER = 1_000_000  # costs are per million inferences
MB_PER_GB = 1024  # Lambda's GB-second is of configured memory in MB / 1024


@dataclass(frozen=True)
class Run:
    """What cost needs of one measured run."""

    label: str
    rows_per_s: float
    rows_per_request: float
    billed_ms: float  # mean per request of its latency rounded up to 1 ms
    rows_per_batch: float | None = None  # the server's average batch (None: not reported)

    @classmethod
    def from_result(cls, result: LoadResult) -> Run | None:
        """None for a run in which no request completed."""
        if not result.requests or result.billed_ms is None:
            return None
        body = "binary" if result.binary else "json"
        return cls(f"{body} c={result.concurrency}", result.rows_per_s,
                   result.rows / result.requests, result.billed_ms, result.avg_batch_size)


@dataclass(frozen=True)
class Assumptions:
    memory_mb: int = 2048
    utilisation: float = 0.6
    demand: float | None = None  # rows/s; None: what keeps one instance at the utilisation


def lambda_per_million(run: Run, price: LambdaPrice, memory_mb: int, *,
                       batched: bool = False) -> float | None:
    """Cost of a million inferences on Lambda: one invocation per request, or per batch of
    the server's average size when ``batched`` (None when the server reported none)."""
    rows = run.rows_per_batch if batched else run.rows_per_request
    if rows is None or rows <= 0:
        return None
    invocation = memory_mb / MB_PER_GB * run.billed_ms / 1000 * price.gb_second + price.request
    return PER / rows * invocation


def knative_instances(run: Run, utilisation: float, demand: float | None) -> int:
    """Instances that serve ``demand`` rows/s, each at most ``utilisation`` busy."""
    wanted = demand if demand is not None else utilisation * run.rows_per_s
    # rounded first so that 1.0000000001 instances is one instance
    return max(1, math.ceil(round(wanted / (utilisation * run.rows_per_s), 9)))


def knative_per_million(run: Run, price: InstancePrice, utilisation: float,
                        demand: float | None = None) -> float | None:
    """Cost of a million inferences on nodes of ``price``'s type serving ``demand`` rows/s."""
    if run.rows_per_s <= 0:
        return None
    served = demand if demand is not None else utilisation * run.rows_per_s
    instances = knative_instances(run, utilisation, demand)
    return instances * price.hourly / 3600 / served * PER


def _money(value: float | None, currency: str) -> str:
    if value is None:
        return "-"
    symbol = "$" if currency == "USD" else f"{currency} "
    digits = 2 if value >= 10 else 3 if value >= 1 else 4
    return f"{symbol}{value:,.{digits}f}"


def cost_table(runs: Sequence[Run], prices: PriceTable, assume: Assumptions) -> Table:
    """Platforms down, measured runs across: the cost of a million inferences in each."""
    table = Table(title=f"cost per million inferences, {prices.currency}", box=box.SIMPLE_HEAD)
    table.add_column("platform")
    for run in runs:
        table.add_column(run.label, justify="right", no_wrap=True)
    table.add_row("measured rows/s", *(f"{r.rows_per_s:,.1f}" for r in runs))
    table.add_row("billed ms per invocation", *(f"{r.billed_ms:,.2f}" for r in runs))
    table.add_row("rows per gateway batch",
                  *("-" if r.rows_per_batch is None else f"{r.rows_per_batch:.2f}" for r in runs),
                  end_section=True)
    cur = prices.currency
    lambda_rows = [(f"Lambda {p.architecture}, one request per invocation", p, False)
                   for p in prices.lambdas]
    if any(r.rows_per_batch is not None for r in runs):
        lambda_rows += [(f"Lambda {p.architecture}, behind the gateway (batched)", p, True)
                        for p in prices.lambdas]
    for i, (name, price, batched) in enumerate(lambda_rows, 1):
        table.add_row(name, *(_money(lambda_per_million(r, price, assume.memory_mb,
                                                        batched=batched), cur) for r in runs),
                      end_section=i == len(lambda_rows))
    table.add_row(f"Knative instances at {assume.utilisation:.0%}",
                  *(str(knative_instances(r, assume.utilisation, assume.demand))
                    if r.rows_per_s > 0 else "-" for r in runs))
    for instance in prices.instances:
        table.add_row(f"Knative {instance.name} ({instance.hourly:g}/h)",
                      *(_money(knative_per_million(r, instance, assume.utilisation,
                                                   assume.demand), cur) for r in runs))
    return table


def assumption_lines(prices: PriceTable, assume: Assumptions) -> list[str]:
    """What the table assumed, printed under it."""
    where = f"{prices.region} list prices as of {prices.as_of}"
    demand = (f"a demand of {assume.demand:,.1f} rows/s" if assume.demand is not None
              else "a demand that keeps one instance at that utilisation")
    return [
        f"Prices: {where} ({prices.source or 'given'}).",
        f"Lambda: {assume.memory_mb} MB; billed duration = each request's measured latency "
        "rounded up to 1 ms, averaged; behind the gateway a batch (the server's average) is "
        "one invocation, billed for a request's latency (an upper bound).",
        f"Knative: one instance serves the run's measured rows/s (the highest concurrency is "
        f"the closest to its capacity); {assume.utilisation:.0%} target utilisation; "
        f"{demand}.",
    ]
