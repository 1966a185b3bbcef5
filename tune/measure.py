"""Measuring a candidate for real: ``modelfn serve`` with its config, driven by a load generator.

Each candidate gets its own repository (a ``config.pbtxt`` written by ``candidates.apply``
beside links to the model's version folders), its own server process under the one
supervisor (pinned to the cores a function would get, and killed by the kernel if tune is),
the same prepared request at every concurrency, and its peak RSS from ``/proc`` before it
is stopped. The load comes from wrk (``modelfn.client.wrk``, pinned to the client's cores)
when tune found it, else from the aiohttp client (``modelfn.client.loadgen``), which tops
out at a few thousand requests/s on one core (bench/RESULTS.md): below what a small model's
server does, so
only wrk tells such candidates apart. A server that fails to start is a ``Measurement``
with an ``error``, not an exception: one bad candidate does not end the search.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from modelfn.client.bodies import (
    LoadgenError,
    input_file_rows,
    load_inputs,
    prepare_request,
    random_inputs,
)
from modelfn.client.cpu import busy_cpu_seconds, process_cpu_seconds
from modelfn.client.loadgen import event_loop_runner, fetch_metadata, run_load
from modelfn.client.scrape import stats_url
from modelfn.client.v2 import V2Client
from modelfn.client.wrk import measure, write_body
from modelfn.process.supervisor import Process, ProcessFailed, free_port, http_probe
from modelfn.runtime.config import ModelConfig
from modelfn.runtime.errors import ModelfnError
from modelfn.tune.candidates import apply, from_config_json, render
from modelfn.tune.search import Measurement, Point

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable, Sequence
    from pathlib import Path

    from modelfn.client.bodies import PreparedRequest
    from modelfn.tune.candidates import Candidate

HOST = "127.0.0.1"
#: seconds a candidate server may take to load and warm up
READY_TIMEOUT_S = 300.0
#: a level's warm-up and window, in the latencies expected there, at the least
WARMUP_LATENCIES = 2.0
WINDOW_LATENCIES = 5.0


def peak_rss(pid: int) -> int | None:
    """The process's peak resident set (``VmHWM``), bytes; None when /proc cannot say."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


class ForeignCpu:
    """Cores that processes other than the server and tune used over a stretch of time:
    on a shared machine, the measure of how far a candidate's figures can be trusted."""

    def __init__(self, server_pid: int) -> None:
        self.server_pid = server_pid
        self.start = time.monotonic()
        self.busy = busy_cpu_seconds()
        self.ours = self._ours()

    def _ours(self) -> float:
        return process_cpu_seconds(os.getpid()) + process_cpu_seconds(self.server_pid)

    def cores(self) -> float:
        elapsed = time.monotonic() - self.start
        foreign = (busy_cpu_seconds() - self.busy) - (self._ours() - self.ours)
        return max(0.0, foreign) / elapsed if elapsed > 0 else 0.0


def cpu_split(cpus: int | None) -> tuple[list[int] | None, list[int] | None]:
    """(server cores, client cores) for ``--cpus``: the server gets the first ``cpus`` of
    this process's cores and the load generator the rest; None: both share every core."""
    if cpus is None:
        return None, None
    mine = sorted(os.sched_getaffinity(0))
    rest = mine[cpus:]
    return mine[:cpus], rest or None


def write_repository(root: Path, model_dir: Path, config: ModelConfig | None) -> Path:
    """``root/<name>/`` with ``config``'s text and links to everything else of the model;
    ``config`` None links the model's own ``config.pbtxt`` too (served as it is)."""
    target = root / model_dir.name
    target.mkdir(parents=True)
    for entry in model_dir.iterdir():
        if entry.name != "config.pbtxt" or config is None:
            (target / entry.name).symlink_to(entry.resolve())
    if config is not None:
        (target / "config.pbtxt").write_text(render(config))
    return root


def served_config(url: str, name: str, timeout: float = 10.0) -> dict[str, Any]:
    """The completed config the server runs, in Triton's JSON form."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or HOST, parts.port, timeout=timeout)
    try:
        conn.request("GET", f"/v2/models/{name}/config")
        response = conn.getresponse()
        body = response.read()
    finally:
        conn.close()
    if response.status != 200:
        raise LoadgenError(f"GET /v2/models/{name}/config: HTTP {response.status}")
    doc: dict[str, Any] = json.loads(body)
    return doc


@dataclass
class ServerMeasure:
    """``measure(candidate)`` for the search: start, load at each level, stop."""

    model_dir: Path
    config: ModelConfig | None
    workdir: Path
    levels: Sequence[int]
    duration: float = 3.0
    warmup: float = 1.0
    binary: bool = False
    input_path: Path | None = None
    #: rows in each request of random inputs; an input file's own rows replace it
    rows_per_request: int = 1
    server_cpus: Sequence[int] | None = None
    #: the wrk executable to drive the load with; None: the aiohttp client, in this process
    wrk: str | None = None
    #: the cores wrk is pinned to (``taskset -c``); None: wherever this process may run
    client_cpus: Sequence[int] | None = None
    ready_timeout: float = READY_TIMEOUT_S
    #: called with (candidate, what is happening) as a trial goes
    on_step: Callable[[Candidate, str], None] | None = None
    _runner: asyncio.Runner = field(default_factory=event_loop_runner)
    _request: PreparedRequest | None = None
    _wrk_args: list[str] = field(default_factory=list)
    _count: int = 0

    def __post_init__(self) -> None:
        if self.input_path is not None:
            self.rows_per_request = input_file_rows(self.input_path)

    @property
    def name(self) -> str:
        return self.model_dir.name

    def close(self) -> None:
        self._runner.close()

    def _step(self, candidate: Candidate, what: str) -> None:
        if self.on_step is not None:
            self.on_step(candidate, what)

    def __call__(self, candidate: Candidate) -> Measurement:
        return replace(self._measure(candidate), rows_per_request=self.rows_per_request)

    def _measure(self, candidate: Candidate) -> Measurement:
        self._count += 1
        base = self.config if self.config is not None else ModelConfig(name=self.name)
        repo = write_repository(self.workdir / f"candidate-{self._count}", self.model_dir,
                                None if candidate.as_is else apply(base, candidate))
        port = free_port(HOST)
        argv = [sys.executable, "-m", "modelfn.cli.main", "serve", str(repo), "--host", HOST,
                "--port", str(port), "--model", self.name, "--log-level", "warning"]
        url = f"http://{HOST}:{port}"
        self._step(candidate, "starting")
        # die_with_parent: a SIGKILLed tune runs no cleanup; this (main) thread lives as long
        # as the server should
        with Process(argv, name=f"modelfn serve ({candidate.describe()})",
                     cpus=self.server_cpus, die_with_parent=True) as server:
            try:
                ready = server.wait_ready(http_probe(f"{url}/v2/health/ready"),
                                          self.ready_timeout)
            except ProcessFailed as exc:
                # name the user's folder for their own config, the model for tune's own
                # (its temporary copy is gone after the run)
                shown = str(self.model_dir) if candidate.as_is else self.name
                return Measurement(candidate, error=_last_line(exc).replace(
                    str(repo / self.name), shown))
            try:
                if candidate.as_is:
                    candidate = replace(from_config_json(served_config(url, self.name)),
                                        label=candidate.label, as_is=True)
                request = self._prepared(url)
                # one request first: one the server refuses (a wrong shape in --input)
                # would otherwise be measured as a load that served nothing
                V2Client(url).infer_body(self.name, request.body, request.headers)
            except (ModelfnError, OSError, ValueError) as exc:  # LoadgenError, a server's
                return Measurement(candidate, ready_s=ready, error=str(exc))
            if 0 < candidate.max_batch_size < request.rows:
                return Measurement(candidate, ready_s=ready, error=(
                    f"max_batch_size {candidate.max_batch_size} refuses every request: each "
                    f"carries {request.rows} rows"))
            points: list[Point] = []
            foreign = ForeignCpu(server.pid)
            for level in self.levels:
                self._step(candidate, f"c={level}")
                warmup, duration = self.window(level, points[-1] if points else None)
                try:
                    points.append(self._load(url, request, level, warmup, duration))
                except (OSError, RuntimeError, ValueError, subprocess.TimeoutExpired) as exc:
                    return Measurement(candidate, tuple(points), ready, peak_rss(server.pid),
                                       error=f"the load at c={level} failed: {exc}",
                                       foreign_cores=foreign.cores())
                if not server.running:
                    break
            rss = peak_rss(server.pid)
            others = foreign.cores()
            if not server.running:
                return Measurement(candidate, tuple(points), ready, rss,
                                   error=f"the server exited with code {server.returncode}",
                                   foreign_cores=others)
            self._step(candidate, "stopping")
        return Measurement(candidate, tuple(points), ready, rss, foreign_cores=others)

    def window(self, level: int, previous: Point | None) -> tuple[float, float]:
        """(warm-up, window) seconds at ``level``: at least the configured ones, and long
        enough for a slow model, where a request at c=32 can take seconds: the warm-up
        holds WARMUP_LATENCIES and the window WINDOW_LATENCIES of the latency expected
        from the previous level's rows/s (each of ``level`` clients waits its turn)."""
        if previous is None or previous.rows_per_s <= 0:
            return self.warmup, self.duration
        latency = level / previous.rows_per_s
        return (max(self.warmup, WARMUP_LATENCIES * latency),
                max(self.duration, WINDOW_LATENCIES * latency))

    def _load(self, url: str, request: PreparedRequest, level: int, warmup: float,
              duration: float) -> Point:
        """One level's point, from wrk or from the aiohttp client; wrk raises when it fails
        (the aiohttp client counts every failure as an error instead). The rows/s are
        counted over the server's whole batches: a slow model answers in bursts."""
        stats = stats_url(url, self.name)
        if self.wrk is not None:
            cpus = ",".join(map(str, self.client_cpus)) if self.client_cpus else None
            r = measure(self.wrk, url, self.name, self._wrk_args, concurrency=level,
                        duration=duration, warmup=warmup, cpus=cpus,
                        rows_per_request=request.rows, stats_url=stats)
            return Point(level, r["rows_per_s"], r["p50_ms"], r["p99_ms"], r["errors"],
                         r["avg_batch_size"], busy=r["busy"])
        loaded = self._runner.run(run_load(url, self.name, request, concurrency=level,
                                           duration=duration, warmup=warmup,
                                           stats_url=stats))
        return Point(level, loaded.rows_per_s, loaded.p50_ms, loaded.p99_ms, loaded.errors,
                     loaded.avg_batch_size, busy=loaded.busy)

    def _prepared(self, url: str) -> PreparedRequest:
        """The request every candidate gets, built once from the first server's metadata."""
        if self._request is None:
            path = self.input_path
            metadata = None
            if path is None or path.suffix == ".npy":
                metadata = self._runner.run(fetch_metadata(url, self.name))
            inputs = (load_inputs(path, metadata) if path
                      else random_inputs(metadata or {}, rows=self.rows_per_request))
            self._request = prepare_request(inputs, binary=self.binary)
            if self.wrk is not None:  # the body file wrk's script sends
                self._wrk_args = write_body(self._request, self.workdir / "request.body")
        return self._request


def _last_line(exc: ProcessFailed) -> str:
    """The useful end of a failed server's output: its last error line, or the problem."""
    lines = [line for line in exc.tail.splitlines() if line.strip()]
    return f"{exc.problem}: {lines[-1].strip()}" if lines else exc.problem
