"""Real server processes for end-to-end tests: `modelfn serve` on a free loopback port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from typing import TYPE_CHECKING

import httpx

if TYPE_CHECKING:
    from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(proc: subprocess.Popen[str], url: str, timeout: float = 30) -> None:
    """Poll ``url``'s V2 readiness until 200; fail with the process's output if it exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited: {proc.stdout.read() if proc.stdout else ''}")
        try:
            if httpx.get(f"{url}/v2/health/ready").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"{url} did not become ready in {timeout} s")


class Server:
    """`modelfn serve` in its own process on a free loopback port."""

    def __init__(self, repo: Path | None, *args: str, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "modelfn.cli.main", "serve",
             *([str(repo)] if repo is not None else []),
             "--host", "127.0.0.1", "--port", str(self.port), *args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**(env or os.environ), "PYTHONUNBUFFERED": "1"},
        )

    def wait_ready(self, timeout: float = 30) -> None:
        wait_ready(self.proc, f"http://{self.url}", timeout)

    def stop(self) -> str:
        self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=30)
        return out
