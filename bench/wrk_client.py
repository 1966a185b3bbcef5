"""wrk as ``bench/run.py``'s native load generator, for cells the Python client cannot drive.

The aiohttp generator (``modelfn.client.loadgen``) tops out near 10,000 requests/s on one core,
about where modelfn's digits cell sits, so at high rates it measures itself. wrk (C, one
thread, keep-alive) drives the same closed loop to 100,000+ requests/s on one core.

The request bytes are exactly the Python client's (``prepare_request``): written to a file here,
read by ``bench/wrk/v2_infer.lua``, which also counts every answer that is not 200. The client's
CPU over the measured window is the CPU wrk used (it is our child: ``RUSAGE_CHILDREN``), so a
cell where wrk itself used its core up can be flagged.
"""

from __future__ import annotations

import json
import math
import os
import resource
import shutil
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from modelfn.client.cpu import cpu_share

if TYPE_CHECKING:
    from modelfn.client.loadgen import PreparedRequest

SCRIPT = Path(__file__).resolve().parent / "wrk" / "v2_infer.lua"
RESULT_PREFIX = "wrk-result "
THREADS = 1  # one thread: the client's share is then a share of one core


class WrkUnavailable(RuntimeError):
    pass


def ensure_wrk() -> str:
    """The wrk executable: on PATH, or installed with Debian's ``apt-get install wrk``."""
    found = shutil.which("wrk")
    if found:
        return found
    if shutil.which("apt-get") is None:
        raise WrkUnavailable("wrk is not installed and this is no Debian/Ubuntu system (no "
                             "apt-get): install wrk (https://github.com/wg/wrk), or run with "
                             "--client aiohttp")
    prefix: list[str] = []
    if os.geteuid() != 0:
        if shutil.which("sudo") is None:
            raise WrkUnavailable("wrk is not installed and installing it needs root: run "
                                 "'apt-get install wrk' as root, or run with --client aiohttp")
        prefix = ["sudo", "-n"]
    print("installing wrk: apt-get install -y wrk", flush=True)
    install = [*prefix, "apt-get", "install", "-y", "wrk"]
    proc = _quiet(install)
    if proc.returncode != 0:  # a fresh machine may have no package lists yet
        _quiet([*prefix, "apt-get", "update"])
        proc = _quiet(install)
    found = shutil.which("wrk")
    if found is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise WrkUnavailable(f"could not install wrk with apt-get ({tail[0]}): install it by "
                             "hand, or run with --client aiohttp")
    return found


def _quiet(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)


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
    """One wrk run of ``duration`` s (whole seconds, at least 1): its result line and the CPU
    seconds wrk used (user + system)."""
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
