"""Optional peer servers for ``bench/run.py --peers``: Triton (via PyTriton) and MLServer.

Each peer gets its own virtual environment under ``bench/.work/venvs/`` (created and installed
on first use, then reused). Anything that goes wrong while installing makes the peer
*unavailable* with a reason in the report; it never fails the run.

- ``pytriton``: ``nvidia-pytriton`` runs Triton's own server with a Python-backend model whose
  infer function calls onnxruntime; Triton's dynamic batcher forms the batches.
- ``mlserver``: a custom ``MLModel`` runtime that calls onnxruntime, with MLServer's adaptive
  batching (``max_batch_size``, ``max_batch_time``). MLServer has no binary tensor extension.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness import ServerSpec

from modelfn.process.supervisor import free_port

if TYPE_CHECKING:
    from pathlib import Path

PACKAGES = {
    "pytriton": ["nvidia-pytriton", "onnxruntime", "numpy"],
    "mlserver": ["mlserver", "onnxruntime", "numpy", "uvloop<0.22"],
}
PEERS = tuple(PACKAGES)
INSTALL_TIMEOUT_S = 1200

PYTRITON_SERVER = """\
import sys

import numpy as np
import onnxruntime as ort
from pytriton.decorators import batch
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig

model_path, name, http_port, grpc_port, metrics_port, threads = sys.argv[1:7]
options = ort.SessionOptions()
options.intra_op_num_threads = int(threads)
session = ort.InferenceSession(model_path, options, providers=["CPUExecutionProvider"])
NP = {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(int32)": np.int32}


def spec(arg):
    dims = tuple(d if isinstance(d, int) else -1 for d in arg.shape[1:]) or (1,)
    return Tensor(name=arg.name, dtype=NP[arg.type], shape=dims)


@batch
def infer(**inputs):
    outputs = session.run(None, inputs)
    names = [o.name for o in session.get_outputs()]
    return {n: (v.reshape(-1, 1) if v.ndim == 1 else v) for n, v in zip(names, outputs)}


config = TritonConfig(
    http_address="127.0.0.1", http_port=int(http_port), grpc_address="127.0.0.1",
    grpc_port=int(grpc_port), metrics_port=int(metrics_port),
)
with Triton(config=config) as triton:
    triton.bind(
        model_name=name,
        infer_func=infer,
        inputs=[spec(i) for i in session.get_inputs()],
        outputs=[spec(o) for o in session.get_outputs()],
        config=ModelConfig(max_batch_size=64, batcher=DynamicBatcher()),
        strict=False,
    )
    triton.serve()
"""

MLSERVER_RUNTIME = """\
import numpy as np
import onnxruntime as ort
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse


class OnnxModel(MLModel):
    async def load(self) -> bool:
        params = self.settings.parameters
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(params.extra["threads"])
        self.session = ort.InferenceSession(
            params.uri, options, providers=["CPUExecutionProvider"]
        )
        self.names = [o.name for o in self.session.get_outputs()]
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        feeds = {i.name: NumpyCodec.decode_input(i) for i in payload.inputs}
        outputs = self.session.run(None, feeds)
        return InferenceResponse(
            model_name=self.name,
            outputs=[NumpyCodec.encode_output(n, v) for n, v in zip(self.names, outputs)],
        )
"""


@dataclass(frozen=True, slots=True)
class Peer:
    name: str
    bin_dir: Path | None  # the venv's bin/ when available
    reason: str = ""  # why it is unavailable


def prepare(name: str, work: Path) -> Peer:
    """Create (or reuse) the peer's venv and install it; never raises for install problems."""
    venv = work / "venvs" / name
    marker = venv / ".installed"
    bin_dir = venv / "bin"
    if marker.exists():
        return Peer(name, bin_dir)
    log = work / "logs" / f"install-{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        with log.open("w") as out:
            subprocess.run(
                [sys.executable, "-m", "venv", str(venv)], check=True, stdout=out, stderr=out
            )
            subprocess.run(
                [str(bin_dir / "python"), "-m", "pip", "install", "--quiet", *PACKAGES[name]],
                check=True,
                stdout=out,
                stderr=out,
                timeout=INSTALL_TIMEOUT_S,
            )
    except (OSError, subprocess.SubprocessError) as exc:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
        return Peer(name, None, f"install failed ({type(exc).__name__}): {' '.join(tail)[:200]}")
    marker.write_text(" ".join(PACKAGES[name]) + "\n")
    return Peer(name, bin_dir)


def _python_libdir(python: Path) -> str:
    out = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_config_var('LIBDIR'))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def server_spec(
    peer: Peer,
    model_path: Path,
    model: str,
    inputs: list[dict[str, Any]],
    port: int,
    threads: int,
    work: Path,
) -> ServerSpec:
    """How to start ``peer`` serving ``model``; ``inputs`` is its V2 input metadata."""
    assert peer.bin_dir is not None
    python = peer.bin_dir / "python"
    metrics_port = free_port()
    if peer.name == "pytriton":
        script = work / "peers" / "pytriton_server.py"
        script.parent.mkdir(parents=True, exist_ok=True)
        script.write_text(PYTRITON_SERVER)
        argv = [str(python), str(script), str(model_path), model, str(port)]
        argv += [str(free_port()), str(metrics_port), str(threads)]
        # Triton's Python backend stub links against the interpreter's shared library.
        env = {"LD_LIBRARY_PATH": _python_libdir(python)}
        return ServerSpec(
            "pytriton", argv, port, True, f"http://127.0.0.1:{metrics_port}/metrics", env
        )
    root = work / "peers" / "mlserver" / f"{model}-{threads}"
    (root / model).mkdir(parents=True, exist_ok=True)
    (root / "onnx_runtime.py").write_text(MLSERVER_RUNTIME)
    settings = {
        "host": "127.0.0.1",
        "http_port": port,
        "grpc_port": free_port(),
        "metrics_port": metrics_port,
        "parallel_workers": 0,
    }
    (root / "settings.json").write_text(json.dumps(settings))
    model_settings = {
        "name": model,
        "implementation": "onnx_runtime.OnnxModel",
        "max_batch_size": 64,
        "max_batch_time": 0.002,
        "inputs": inputs,  # MLServer serves these as the model's V2 metadata
        "parameters": {"uri": str(model_path), "extra": {"threads": threads}},
    }
    (root / model / "model-settings.json").write_text(json.dumps(model_settings))
    argv = [str(peer.bin_dir / "mlserver"), "start", str(root)]
    return ServerSpec(
        "mlserver",
        argv,
        port,
        False,
        f"http://127.0.0.1:{metrics_port}/metrics",
        {"PYTHONPATH": str(root)},
    )
