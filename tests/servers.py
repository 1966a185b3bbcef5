"""Real server processes for end-to-end tests: `modelfn serve` on a free loopback port,
under modelfn's process supervisor."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from modelfn.process.supervisor import Process, free_port, http_probe

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["Server", "free_port"]


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
