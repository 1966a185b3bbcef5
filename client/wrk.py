"""wrk as a native load generator, for servers the aiohttp client cannot keep busy.

The aiohttp generator (``modelfn.client.loadgen``) tops out at a few thousand requests/s
on one core, about where a small model's server sits, so at high rates it measures itself.
wrk (C, one thread, keep-alive) drives the same closed loop an order of magnitude faster on
one core (bench/RESULTS.md). ``modelfn tune --client wrk`` and ``bench/run.py`` drive it
through this module.

The request bytes are exactly the Python client's (``prepare_request``): written to a file,
read by ``wrk_v2_infer.lua`` beside this module, which also counts every answer that is not
200. The client's CPU over a window is the CPU wrk used (it is our child: ``RUSAGE_CHILDREN``),
so a window where wrk itself used its core up can be flagged. This module only finds wrk on
PATH: installing it is the user's (Debian/Ubuntu: ``apt-get install wrk``).
"""

from __future__ import annotations

import contextlib
import json
import math
import resource
import shutil
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from modelfn.client.cpu import cpu_share
from modelfn.client.endpoint import endpoint_url, infer_url
from modelfn.client.scrape import (
    batch_size,
    scrape_batch_counters,
    scrape_stats_reading,
    served_rate,
)

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from modelfn.client.bodies import PreparedRequest

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


def summarise(raw: dict[str, Any], rows_per_request: int, cpu_seconds: float,
              window: tuple[float, float] | None = None) -> dict[str, Any]:
    """wrk's figures in the shape of ``LoadResult.to_json()``, plus the client's CPU share.
    ``window``: (answers per second, seconds) of a measured window inside the run, which then
    gives the throughput and the answered count; else the whole run does."""
    run_seconds = raw["duration_us"] / 1e6
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
    seconds, rate = run_seconds, ok / run_seconds if run_seconds else 0.0
    if window is not None:
        rate, seconds = window
        ok = round(rate * seconds)
    first_error = ", ".join(f"{n} {what}" for what, n in failures.items() if n) or None

    def ms(key: str) -> float | None:
        return raw[key] / 1e3 if ok else None

    return {
        "requests": ok,
        "rows": ok * rows_per_request,
        "errors": errors,
        "duration_s": seconds,
        "req_per_s": rate,
        "rows_per_s": rate * rows_per_request,
        "p50_ms": ms("p50_us"),
        "p90_ms": ms("p90_us"),
        "p99_ms": ms("p99_us"),
        "mean_ms": ms("mean_us"),
        "first_error": first_error,
        "client_cpu": cpu_share(cpu_seconds, run_seconds, THREADS),
    }


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _argv(wrk: str, url: str, script_args: list[str], concurrency: int, seconds: int,
          cpus: str | None, timeout_s: float) -> list[str]:
    argv = [wrk, f"-t{THREADS}", f"-c{concurrency}", f"-d{seconds}s",
            f"--timeout={max(1, math.ceil(timeout_s))}s", "-s", str(SCRIPT), url,
            "--", *script_args]
    return ["taskset", "-c", cpus, *argv] if cpus is not None else argv


def _finish(proc: subprocess.Popen[str], started: float, limit_s: float
            ) -> tuple[dict[str, Any], float]:
    """Wait for a wrk run: its result line and the CPU seconds it used (user + system)."""
    before = _children_cpu()
    try:
        stdout, stderr = proc.communicate(timeout=max(1.0, limit_s - (time.perf_counter()
                                                                      - started)))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise RuntimeError(f"wrk did not finish within {limit_s:.0f} s") from None
    cpu = _children_cpu() - before
    if proc.returncode != 0:
        raise RuntimeError(f"wrk exited {proc.returncode} after "
                           f"{time.perf_counter() - started:.1f} s: "
                           f"{(stderr or stdout).strip()[-300:]}")
    return parse_output(stdout), cpu


def steady_rate(per_second: dict[str, int], start: float, end: float) -> float | None:
    """Answers per second over the whole wall-clock seconds inside ``[start, end]``; None when
    no whole second fits."""
    inside = [n for second, n in ((int(s), n) for s, n in per_second.items())
              if start <= second and second + 1 <= end]
    first, last = math.ceil(start), math.floor(end)
    whole = last - first
    if whole <= 0:
        return None
    return sum(inside) / whole


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
    stats_url: str | None = None,
    window: AbstractContextManager[object] | None = None,
    timeout_s: float = 60.0,
) -> dict[str, Any]:
    """One wrk run: ``warmup`` seconds, then the measured window of ``duration`` seconds on
    the same busy connections, then a second more so the window ends under load.
    ``summarise``'s figures, with the throughput of the window's whole seconds (the Lua
    script counts answers per second), plus the server's ``avg_batch_size`` from its
    ``/metrics`` counters read at the window's ends. A closed loop that starts empty
    answers nothing for the first latency: measured from a fresh start, a model that takes
    a second per request would read slow by a share of its first second. Latency percentiles
    cover the whole run.
    ``stats_url`` (the statistics endpoint of the one server behind ``url``): its whole
    batches give the throughput instead (``scrape.served_rate``), which a slow model's
    bursts of answers do not disturb, and ``busy``, the share of the window the model ran;
    ``rate_from`` says which counted it.

    ``window`` is entered just around the measured window, for a caller that accounts for
    something over exactly that stretch (bench's CPU of the server and of other processes).
    """
    metrics_url = metrics_url or endpoint_url(url, "/metrics")
    seconds = max(1, math.ceil(warmup)) + max(1, math.ceil(duration)) + 1
    started = time.perf_counter()
    proc = subprocess.Popen(
        _argv(wrk, infer_url(url, model), script_args, concurrency, seconds, cpus, timeout_s),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        _sleep_until(started + max(1, math.ceil(warmup)), proc)
        before = scrape_batch_counters(metrics_url, model)
        reading_before = scrape_stats_reading(stats_url, model) if stats_url else None
        with window if window is not None else contextlib.nullcontext():
            opened = time.time()
            _sleep_until(time.perf_counter() + duration, proc)
            closed = time.time()
        after = scrape_batch_counters(metrics_url, model)
        reading_after = scrape_stats_reading(stats_url, model) if stats_url else None
    except BaseException:
        proc.kill()
        proc.communicate()
        raise
    raw, cpu_seconds = _finish(proc, started, seconds + timeout_s + 30)
    served = served_rate(reading_before, reading_after, (closed - opened) / 2)
    rate = (served.rows_per_s / rows_per_request if served is not None
            else steady_rate(raw.get("per_second", {}), opened, closed))
    result = summarise(raw, rows_per_request, cpu_seconds,
                       window=(rate, closed - opened) if rate is not None else None)
    result["avg_batch_size"] = batch_size(before, after)
    result["rate_from"] = "answers" if served is None else "batches"
    result["busy"] = None if served is None else served.busy
    return result


def _sleep_until(deadline: float, proc: subprocess.Popen[str]) -> None:
    """Sleep until ``deadline`` (``perf_counter``), or until wrk ends early (it failed)."""
    remaining = deadline - time.perf_counter()
    if remaining > 0:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=remaining)
