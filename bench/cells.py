"""One measured cell of ``bench/run.py``: a window of closed-loop load on a running server,
driven by wrk or by the aiohttp client on the client's cores, and what the server, the client
and everything else on the machine spent on it.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness import CpuWindow, run_client

from modelfn.client.scrape import stats_url
from modelfn.client.wrk import measure

if TYPE_CHECKING:
    from pathlib import Path

    from harness import Server


@dataclass(frozen=True, slots=True)
class Cell:
    """What one cell measures: the load, its window and where the client runs."""

    model: str
    body: str  # json or binary
    concurrency: int
    duration: float
    warmup: float
    client_cpus: str | None


def measure_aiohttp(server: Server, cell: Cell, out: Path,
                    record: dict[str, Any]) -> dict[str, Any]:
    """One cell with ``modelfn bench`` (aiohttp) in its own process on the client's cores."""
    spec = server.spec
    out.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "modelfn.cli.bench", spec.url, "--model", cell.model]
    argv += ["-c", str(cell.concurrency), "--duration", str(cell.duration)]
    argv += ["--warmup", str(cell.warmup), "--json", str(out)]
    argv += ["--binary"] if cell.body == "binary" else []
    argv += ["--metrics-url", spec.metrics_url] if spec.metrics_url else []
    with CpuWindow(server) as window:
        proc = run_client(argv, cell.client_cpus, cell.duration + cell.warmup + 180)
    record["foreign_cores"] = window.foreign_cores()
    if proc.returncode != 0 or not out.exists():
        raise RuntimeError((proc.stderr or proc.stdout).strip()[-300:])
    result: dict[str, Any] = json.loads(out.read_text())[0]
    return result


def measure_wrk(wrk: str, server: Server, cell: Cell, script_args: list[str],
                record: dict[str, Any]) -> dict[str, Any]:
    """One cell with wrk on the client's cores: a warm-up run, then the measured window. A
    server with Triton's statistics (modelfn, Triton) has its throughput counted over its
    whole batches; the others over the answers in the window."""
    spec = server.spec
    window = CpuWindow(server)
    result = measure(wrk, spec.url, cell.model, script_args, concurrency=cell.concurrency,
                     duration=cell.duration, warmup=cell.warmup, cpus=cell.client_cpus,
                     metrics_url=spec.metrics_url, stats_url=stats_url(spec.url, cell.model),
                     window=window)
    record["foreign_cores"] = window.foreign_cores()
    # the server's CPU per answered request: what a contended machine disturbs least
    server_cpu = window.server_seconds()
    result["server_cpu_us"] = server_cpu / result["requests"] * 1e6 if result["requests"] else None
    return result
