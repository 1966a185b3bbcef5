"""wrk as a native load generator, for servers the aiohttp client cannot keep busy.

The aiohttp generator (``modelfn.client.loadgen``) tops out near 5,000 to 10,000 requests/s
on one core, about where a small model's server sits, so at high rates it measures itself.
wrk (C, one thread, keep-alive) drives the same closed loop to 100,000+ requests/s on one
core. ``modelfn tune --client wrk`` and ``bench/run.py`` drive it through this module.

The request bytes are exactly the Python client's (``prepare_request``): written to a file,
read by ``wrk_v2_infer.lua`` beside this module, which also counts every answer that is not
200. The client's CPU over a window is the CPU wrk used (it is our child: ``RUSAGE_CHILDREN``),
so a window where wrk itself used its core up can be flagged. This module only finds wrk on
PATH: installing it is the user's (Debian/Ubuntu: ``apt-get install wrk``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import resource
import shutil
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from modelfn.client.cpu import cpu_share
from modelfn.client.loadgen import batch_size, infer_url, scrape_batch_counters

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from modelfn.client.loadgen import PreparedRequest

SCRIPT = Path(__file__).resolve().with_name("wrk_v2_infer.lua")
RESULT_PREFIX = "wrk-result "
THREADS = 1  # one thread: the client's share is then a share of one core
#: what to tell a user who asked for wrk and has none
INSTALL_HINT = ("install wrk (Debian/Ubuntu: apt-get install wrk; elsewhere "
                "https://github.com/wg/wrk)")


def find_wrk() -> str | None:
    """The wrk executable on PATH, or None."""
    return shutil.which("wrk")


def write_body(request: PreparedRequest, path: Path) -> list[str]:
    """Write the request body for the Lua script; return the script's arguments."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(request.body)
    length = request.headers.get("Inference-Header-Content-Length")
    return [str(path), *([length] if length is not None else [])]


def parse_output(stdout: str) -> dict[str, Any]:
    """The Lua script's ``wrk-result {...}`` line as a dict (counts; latencies in µs)."""
    for line in stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            result: dict[str, Any] = json.loads(line[len(RESULT_PREFIX):])
            return result
    raise ValueError(f"wrk printed no result line: {stdout.strip()[-300:]!r}")


def summarise(raw: dict[str, Any], rows_per_request: int, cpu_seconds: float) -> dict[str, Any]:
    """wrk's figures in the shape of ``LoadResult.to_json()``, plus the client's CPU share."""
    seconds = raw["duration_us"] / 1e6
    requests = raw["requests"]
    failures = {
        "answers other than 200": raw["non_200"],
        "connect errors": raw["connect_errors"],
        "read errors": raw["read_errors"],
        "write errors": raw["write_errors"],
        "timeouts": raw["timeouts"],
    }
    errors = sum(failures.values())
    ok = max(0, requests - raw["non_200"])  # wrk counts a non-200 answer as a request
    first_error = ", ".join(f"{n} {what}" for what, n in failures.items() if n) or None

    def ms(key: str) -> float | None:
        return raw[key] / 1e3 if ok else None

    return {
        "requests": ok,
        "rows": ok * rows_per_request,
        "errors": errors,
        "duration_s": seconds,
        "req_per_s": ok / seconds if seconds else 0.0,
        "rows_per_s": ok * rows_per_request / seconds if seconds else 0.0,
        "p50_ms": ms("p50_us"),
        "p90_ms": ms("p90_us"),
        "p99_ms": ms("p99_us"),
        "mean_ms": ms("mean_us"),
        "first_error": first_error,
        "client_cpu": cpu_share(cpu_seconds, seconds, THREADS),
    }


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_wrk(
    wrk: str,
    url: str,
    script_args: list[str],
    *,
    concurrency: int,
    duration: float,
    cpus: str | None,
    timeout_s: float = 60.0,
) -> tuple[dict[str, Any], float]:
    """One wrk run of ``duration`` s (whole seconds, at least 1) under ``taskset -c cpus``
    when ``cpus`` is given: its result line and the CPU seconds wrk used (user + system)."""
    seconds = max(1, math.ceil(duration))
    argv = [wrk, f"-t{THREADS}", f"-c{concurrency}", f"-d{seconds}s",
            f"--timeout={max(1, math.ceil(timeout_s))}s", "-s", str(SCRIPT), url,
            "--", *script_args]
    if cpus is not None:
        argv = ["taskset", "-c", cpus, *argv]
    before = _children_cpu()
    started = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=seconds + timeout_s + 30)
    cpu = _children_cpu() - before
    if proc.returncode != 0:
        raise RuntimeError(f"wrk exited {proc.returncode} after "
                           f"{time.perf_counter() - started:.1f} s: "
                           f"{(proc.stderr or proc.stdout).strip()[-300:]}")
    return parse_output(proc.stdout), cpu


def measure(
    wrk: str,
    url: str,
    model: str,
    script_args: list[str],
    *,
    concurrency: int,
    duration: float,
    warmup: float,
    cpus: str | None,
    rows_per_request: int = 1,
    metrics_url: str | None = None,
    window: AbstractContextManager[object] | None = None,
) -> dict[str, Any]:
    """A warm-up run, then the measured one: ``summarise``'s figures plus the server's
    ``avg_batch_size`` from its ``/metrics`` counters read around the window.

    ``window`` is entered just around the measured run, for a caller that accounts for
    something over exactly that stretch (bench's CPU of the server and of other processes).
    """
    run = functools.partial(run_wrk, wrk, infer_url(url, model), script_args,
                            concurrency=concurrency, cpus=cpus)
    if warmup > 0:
        run(duration=warmup)
    metrics_url = metrics_url or f"{url.rstrip('/')}/metrics"
    before = scrape_batch_counters(metrics_url, model)
    with window if window is not None else contextlib.nullcontext():
        raw, cpu_seconds = run(duration=duration)
    after = scrape_batch_counters(metrics_url, model)
    result = summarise(raw, rows_per_request, cpu_seconds)
    result["avg_batch_size"] = batch_size(before, after)
    return result
