"""Real server processes for end-to-end tests: `modelfn serve` on a free loopback port,
under modelfn's process supervisor."""

from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING

import httpx

from modelfn.client.cpu import process_cpu_seconds as cpu_seconds
from modelfn.process.supervisor import Process, free_port, http_probe

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

__all__ = ["Server", "assert_polls_then_sleeps", "free_port", "serving"]


def assert_polls_then_sleeps(pid: int, request: Callable[[], None], window_s: float) -> None:
    """A server started with a busy-poll window of ``window_s`` (at least 0.3 s, to be seen
    from outside) keeps its CPU busy just after ``request`` and idles before and after."""
    time.sleep(window_s + 0.2)  # any earlier request's window has closed
    start = cpu_seconds(pid)
    time.sleep(0.5)
    idle_before = cpu_seconds(pid) - start
    request()
    answered = cpu_seconds(pid)
    time.sleep(0.2)  # inside the window: the loop turns on the server's core
    polled = cpu_seconds(pid) - answered
    time.sleep(window_s)  # the window has closed
    after = cpu_seconds(pid)
    time.sleep(0.5)
    idle_after = cpu_seconds(pid) - after
    assert polled > 0.05, f"{polled:.2f} s of CPU in 0.2 s just after a request: no polling"
    assert idle_before < 0.05 and idle_after < 0.05, (
        f"an idle server used {idle_before:.2f} s, then {idle_after:.2f} s of CPU in 0.5 s")


class Server:
    """`modelfn serve` in its own process on a free loopback port."""

    def __init__(self, repo: Path | None, *args: str, env: dict[str, str] | None = None,
                 grpc: bool = False) -> None:
        """``grpc``: serve KServe V2 gRPC too (``--grpc-port``), at ``grpc_url``."""
        self.port = free_port()
        self.url = f"127.0.0.1:{self.port}"
        self.grpc_port = free_port() if grpc else None
        self.grpc_url = f"127.0.0.1:{self.grpc_port}"
        grpc_args = ["--grpc-port", str(self.grpc_port)] if grpc else []
        self.proc = Process(
            [sys.executable, "-m", "modelfn.cli.main", "serve",
             *([str(repo)] if repo is not None else []),
             "--host", "127.0.0.1", "--port", str(self.port), *grpc_args, *args],
            name="modelfn serve", env=env or dict(os.environ), tail_lines=2000,
        ).start()

    def wait_ready(self, timeout: float = 30) -> None:
        self.proc.wait_ready(http_probe(f"http://{self.url}/v2/health/ready"), timeout)

    def wait_exit(self, timeout: float = 60) -> str:
        """Wait for a server that stops by itself (a failed start); returns its output."""
        self.proc.wait(timeout)
        return self.proc.tail()

    def stop(self) -> str:
        """SIGTERM (it drains), then its whole output."""
        self.proc.stop(grace=30)
        return self.proc.tail()


@contextmanager
def serving(repo: Path | None, *args: str, env: dict[str, str] | None = None
            ) -> Iterator[Server]:
    """A ready `modelfn serve` for the block; stopped after it, and it must drain cleanly."""
    server = Server(repo, *args, env=env)
    try:
        server.wait_ready()
        yield server
    finally:
        log = server.stop()
        assert server.proc.returncode == 0, log


def edge_metric(server: Server, name: str) -> int:
    """One of the HTTP edge's counters (``modelfn_http_<name>_total``) on ``server``."""
    text = httpx.get(f"http://{server.url}/metrics").text
    line = next(ln for ln in text.splitlines() if ln.startswith(f"modelfn_http_{name}_total "))
    return int(line.split()[1])
