"""The gateway's own Prometheus series, per model and version (``split`` when the platform split).

- ``modelfn_gateway_requests_total{model,version,code}``: answers by status code;
- ``modelfn_gateway_upstream_latency_seconds``: histogram of the time to a function's answer;
- ``modelfn_gateway_retries_total``: attempts repeated because a function was cold or busy;
- ``modelfn_gateway_cold_wait_seconds_total``: time requests spent waiting on cold functions;
- ``modelfn_gateway_invocations_total{model,version,code}``: function invocations the gateway
  made for the batches it formed, by the function's status code (or the gateway's, when no
  answer came);
- ``modelfn_gateway_batch_size``: histogram of the rows per such invocation (Triton's batch
  size; a request carries one or more rows). Only where the gateway batches: routes whose
  function instances take one request at a time (Lambda).

For those versions the gateway is where Triton's counting happens (one caller, one request;
one invocation, one execution), so it also serves Triton's ``nv_inference_*`` series for
them, from each version's ``ModelStats``, named and labelled as a function serves them
(``runtime.metrics.inference_lines``). A function behind the gateway that never batches
keeps its own, on its own ``/metrics``.

Plain integers and floats updated on the loop, turned into text at scrape time.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field

from modelfn.runtime.metrics import edge_lines, inference_lines
from modelfn.runtime.stats import ModelStats

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                   5.0, 10.0, 30.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


@dataclass
class Histogram:
    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1

    def lines(self, name: str, labels: str) -> list[str]:
        out, running = [], 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += count
            le = "+Inf" if bound == float("inf") else repr(bound)
            out.append(f'{name}_bucket{{{labels},le="{le}"}} {running}')
        out.append(f"{name}_sum{{{labels}}} {self.total:.6f}")
        out.append(f"{name}_count{{{labels}}} {self.count}")
        return out


@dataclass
class RouteStats:
    codes: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    latency: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS))
    retries: int = 0
    cold_wait_s: float = 0.0
    batch_size: Histogram = field(default_factory=lambda: Histogram(BATCH_BUCKETS))
    invocations: dict[int, int] = field(default_factory=lambda: defaultdict(int))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class GatewayMetrics:
    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], RouteStats] = {}
        #: Triton's statistics of the versions the gateway batches for, by (model, version)
        self.models: dict[tuple[str, str], ModelStats] = {}

    def route(self, model: str, version: str) -> RouteStats:
        stats = self.routes.get((model, version))
        if stats is None:
            stats = self.routes[(model, version)] = RouteStats()
        return stats

    def model(self, model: str, version: str) -> ModelStats:
        """The statistics of a version the gateway batches for; kept when the version's
        route changes, so its counters only ever grow."""
        stats = self.models.get((model, version))
        if stats is None:
            stats = self.models[(model, version)] = ModelStats(model, version)
        return stats

    def render(self) -> str:
        lines: list[str] = []

        def family(name: str, kind: str, text: str) -> None:
            lines.append(f"# HELP {name} {text}")
            lines.append(f"# TYPE {name} {kind}")

        items = sorted(self.routes.items())
        labelled = [(f'model="{_escape(m)}",version="{_escape(v)}"', s) for (m, v), s in items]
        family("modelfn_gateway_requests_total", "counter", "Requests answered, by status code")
        for labels, stats in labelled:
            for code, count in sorted(stats.codes.items()):
                lines.append(f'modelfn_gateway_requests_total{{{labels},code="{code}"}} {count}')
        family("modelfn_gateway_upstream_latency_seconds", "histogram",
               "Time from sending a request to a function to its answer's headers")
        for labels, stats in labelled:
            lines.extend(stats.latency.lines("modelfn_gateway_upstream_latency_seconds", labels))
        family("modelfn_gateway_retries_total", "counter",
               "Requests to functions repeated because the function was cold or busy")
        for labels, stats in labelled:
            lines.append(f"modelfn_gateway_retries_total{{{labels}}} {stats.retries}")
        family("modelfn_gateway_cold_wait_seconds_total", "counter",
               "Seconds requests spent waiting for cold functions to answer")
        for labels, stats in labelled:
            lines.append(f"modelfn_gateway_cold_wait_seconds_total{{{labels}}} "
                         f"{stats.cold_wait_s:.6f}")
        family("modelfn_gateway_invocations_total", "counter",
               "Invocations of functions that run one request at a time, one per batch the "
               "gateway formed, by status code")
        for labels, stats in labelled:
            for code, count in sorted(stats.invocations.items()):
                lines.append(f'modelfn_gateway_invocations_total{{{labels},code="{code}"}} '
                             f"{count}")
        family("modelfn_gateway_batch_size", "histogram",
               "Rows per invocation of a batch the gateway formed for a function that runs "
               "one request at a time")
        for labels, stats in labelled:
            if stats.batch_size.count:
                lines.extend(stats.batch_size.lines("modelfn_gateway_batch_size", labels))
        lines.extend(inference_lines(stats for _, stats in sorted(self.models.items())))
        lines.extend(edge_lines())  # what the gateway's own HTTP edge refused or dropped
        return "\n".join(lines) + "\n"
