"""Functions (`modelfn serve` of one digits version) and `modelfn gateway`, as real processes."""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from modelfn.model_store.routes import ModelRoutes, VersionRoute
from modelfn.process.supervisor import Process, free_port, http_probe

DIGITS = Path(__file__).resolve().parents[1] / "examples" / "models" / "digits"


def digits_repository(root: Path, version: int) -> Path:
    """A repository serving the example digits model as ``version``."""
    model = root / f"v{version}" / "digits"
    (model / str(version)).mkdir(parents=True)
    shutil.copy(DIGITS / "config.pbtxt", model / "config.pbtxt")
    shutil.copy(DIGITS / "1" / "model.onnx", model / str(version) / "model.onnx")
    return model.parent


@dataclass
class Function:
    """One function: `modelfn serve` of one digits version on a loopback port."""

    repository: Path
    port: int
    process: Process | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Function:
        self.process = Process(
            [sys.executable, "-m", "modelfn.cli.main", "serve", str(self.repository),
             "--host", "127.0.0.1", "--port", str(self.port)], name=f"function:{self.port}",
        ).start()
        return self

    def wait_ready(self) -> None:
        assert self.process is not None
        self.process.wait_ready(http_probe(f"{self.url}/v2/health/ready"), timeout=60)

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()


@dataclass
class GatewayProcess:
    process: Process
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


def start_gateway(routes_dir: Path, *args: str) -> GatewayProcess:
    port = free_port()
    process = Process(
        [sys.executable, "-m", "modelfn.gateway", "--routes-dir", str(routes_dir), "--host",
         "127.0.0.1", "--port", str(port), "--reload", "0.2", *args], name="gateway",
    ).start()
    process.wait_ready(http_probe(f"http://127.0.0.1:{port}/v2/health/ready"), timeout=30)
    return GatewayProcess(process, port)


def digits_routes(functions: dict[int, Function], split: dict[int, int]) -> ModelRoutes:
    return ModelRoutes(
        model="digits", target="local",
        versions={v: VersionRoute(f.url, max_batch_size=8, concurrency=16)
                  for v, f in functions.items()},
        split=split,
    )
