"""`modelfn serve --grpc-port`: what it needs, and what REST alone does not pay for."""

from __future__ import annotations

import subprocess
import sys
from typing import TYPE_CHECKING

from click.testing import CliRunner
from onnx_models import save, simple_graph

from modelfn.cli.main import cli

if TYPE_CHECKING:
    from pathlib import Path

    import pytest


def test_rest_alone_imports_no_grpc() -> None:
    """Everything `modelfn serve` imports to serve REST, and nothing of grpcio or protobuf's
    gRPC stubs: REST cold starts must not pay for gRPC."""
    code = (
        "import sys\n"
        "import modelfn.cli.serve, modelfn.handlers.http, modelfn.protocol.rest\n"
        "import modelfn.runtime.repository, modelfn.protocol.grpc\n"
        "print(sorted(m for m in sys.modules if m == 'grpc' or m.startswith(('grpc.', "
        "'modelfn.protocol.grpc.'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


def test_grpc_port_without_grpcio_names_the_extra(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    save(tmp_path / "m", simple_graph())
    monkeypatch.setitem(sys.modules, "grpc", None)  # as if grpcio were not installed
    result = CliRunner().invoke(cli, ["serve", str(tmp_path), "--grpc-port", "8001"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "Error: modelfn serve --grpc-port needs grpc: install the grpc extra, "
        "pip install 'modelfn[grpc]'"]


def test_grpc_port_must_differ_from_the_rest_port(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["serve", str(tmp_path), "--port", "8000",
                                      "--grpc-port", "8000"])
    assert result.exit_code == 2
    assert "REST already listens on 8000" in result.output
