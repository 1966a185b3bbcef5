"""Process plumbing for ``bench/run.py``: pinned servers, cold start, foreign CPU.

Everything listens on and talks to 127.0.0.1 only. Servers run under modelfn's process
supervisor, in their own process group, so stopping one also stops anything it spawned.
"""

from __future__ import annotations

import http.client
import os
import resource
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from modelfn.client.cpu import busy_cpu_seconds, process_cpu_seconds
from modelfn.process.supervisor import Process, ProcessFailed

HOST = "127.0.0.1"


def pinned(argv: list[str], cpus: str | None) -> list[str]:
    """``argv`` under ``taskset -c cpus`` (unchanged when ``cpus`` is None)."""
    return ["taskset", "-c", cpus, *argv] if cpus is not None else argv


@dataclass(frozen=True, slots=True)
class ServerSpec:
    """How to start one target server and where it answers."""

    target: str
    argv: list[str]
    port: int
    binary: bool = True  # supports Triton's binary tensor extension
    metrics_url: str | None = None  # None: URL/metrics
    env: dict[str, str] = field(default_factory=dict)
    ready_path: str = "/v2/health/ready"

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"


@dataclass(frozen=True, slots=True)
class ColdStart:
    ready_s: float  # launch to the first 200 on the readiness path
    first_inference_s: float  # launch to the first successful inference


class HarnessError(RuntimeError):
    """The server under measurement did not start, answer or stay up."""


def _request(
    port: int, method: str, path: str, body: bytes | None, headers: dict[str, str], timeout: float
) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


class Server:
    """A target server process: start it, time its cold start, stop it (always)."""

    def __init__(self, spec: ServerSpec, cpus: str | None, log_path: Path) -> None:
        self.spec = spec
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_bytes(b"")
        self.process = Process(pinned(spec.argv, cpus), name=spec.target,
                               env={**os.environ, **spec.env}, log_path=log_path)

    def __enter__(self) -> Server:
        self.process.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_tail(self, lines: int = 5) -> str:
        return " | ".join(self.process.tail(lines).splitlines())

    def wait_cold_start(
        self, infer_path: str, body: bytes, headers: dict[str, str], timeout: float = 120.0
    ) -> ColdStart:
        """Poll readiness, then inference, every few ms; times are from the process launch."""
        last = "no answer"

        def infers() -> bool:
            nonlocal last
            status, payload = _request(self.spec.port, "POST", infer_path, body, headers, 60.0)
            last = f"HTTP {status}: {payload[:200]!r}"
            return status == 200

        try:
            ready_s = self.process.wait_ready(
                lambda: _request(self.spec.port, "GET", self.spec.ready_path, None, {}, 5.0)[0]
                == 200,
                timeout,
            )
            first_s = self.process.wait_ready(infers, timeout - ready_s)
        except ProcessFailed as exc:
            raise HarnessError(f"{exc.message}: {last}") from exc
        return ColdStart(ready_s, first_s)

    def stop(self) -> None:
        self.process.stop(grace=10)

    def cpu_seconds(self) -> float:
        """CPU used so far by the server and every live process in its session."""
        assert self.process is not None
        total = 0.0
        for pid in _session_pids(self.process.pid):
            total += process_cpu_seconds(pid)
        return total


def _session_pids(sid: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[3]) == sid:  # field 6: session id
            pids.append(int(entry.name))
    return pids


def own_cpu_seconds() -> float:
    """CPU of this process plus its waited-for children (the load generator runs)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


@dataclass(slots=True)
class CpuWindow:
    """Foreign CPU (in cores) over a window: all busy CPU minus ours and the server's."""

    server: Server | None
    start: float = 0.0
    busy: float = 0.0
    ours: float = 0.0
    server_cpu: float = 0.0
    closed: tuple[float, float, float, float] | None = None

    def __enter__(self) -> CpuWindow:
        self.closed = None
        self.start = time.perf_counter()
        self.busy = busy_cpu_seconds()
        self.ours = own_cpu_seconds()
        self.server_cpu = self.server.cpu_seconds() if self.server else 0.0
        return self

    def __exit__(self, *exc: object) -> None:
        self.closed = self._readings()  # read after the with: the window, not what followed

    def _readings(self) -> tuple[float, float, float, float]:
        """(wall, busy, ours, server) now."""
        return (time.perf_counter(), busy_cpu_seconds(), own_cpu_seconds(),
                self.server.cpu_seconds() if self.server else 0.0)

    def _end(self) -> tuple[float, float, float, float]:
        return self.closed if self.closed is not None else self._readings()

    def server_seconds(self) -> float:
        """CPU the server used in the window (up to now while it is open)."""
        return self._end()[3] - self.server_cpu

    def foreign_cores(self) -> float:
        wall, busy, ours, server = self._end()
        elapsed = wall - self.start
        foreign = (busy - self.busy) - (ours - self.ours) - (server - self.server_cpu)
        return max(0.0, foreign) / elapsed if elapsed > 0 else 0.0


def wait_for_quiet(
    server: Server | None, limit_cores: float = 0.15, max_wait: float = 10.0
) -> float:
    """Wait (up to ``max_wait`` s) until other processes use under ``limit_cores``; return it."""
    deadline = time.perf_counter() + max_wait
    while True:
        with CpuWindow(server) as window:
            time.sleep(0.5)
        foreign = window.foreign_cores()
        if foreign < limit_cores or time.perf_counter() >= deadline:
            return foreign


def run_client(
    argv: list[str], cpus: str | None, timeout: float
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        pinned(argv, cpus),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
