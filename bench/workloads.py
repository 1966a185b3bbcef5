"""The benchmark's workloads and configurations: the models it serves (made on first use),
the CPU placements it measures them under, and a one-model repository per pair."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from modelfn.client.bodies import prepare_request, random_inputs
from modelfn.runtime.datatypes import from_numpy

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
WORK = BENCH / ".work"
PY = sys.executable


@dataclass(frozen=True, slots=True)
class Config:
    name: str
    server_cpus: str | None
    client_cpus: str | None
    threads: int
    description: str


CONFIGS = {
    "pinned": Config("pinned", "0", "1", 1, "server on core 0 with ORT 1 thread, client on core 1"),
    "shared": Config("shared", None, None, 2, "server and client unpinned, ORT 2 threads"),
}


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    source: Path  # the model's repository entry: config.pbtxt and 1/model.onnx
    warmup_scale: float  # the CNN needs longer to reach a steady state at high concurrency


def prepare_workloads(names: list[str]) -> dict[str, Workload]:
    workloads = {}
    if "digits" in names:
        source = ROOT / "examples" / "models" / "digits"
        if not (source / "1" / "model.onnx").exists():
            subprocess.run([PY, str(ROOT / "examples" / "make_digits.py")], check=True)
        workloads["digits"] = Workload("digits", source, 1.0)
    if "cnn" in names:
        source = BENCH / "models" / "cnn"
        if not (source / "1" / "model.onnx").exists():
            subprocess.run([PY, str(BENCH / "make_cnn.py")], check=True)
        workloads["cnn"] = Workload("cnn", source, 2.0)
    return workloads


def make_repo(workload: Workload, config: Config, spinning: str) -> Path:
    """A one-model repository whose config fixes the ORT thread count for this configuration."""
    repo = WORK / "repos" / f"{config.name}-{spinning}" / workload.name
    model_dir = repo / workload.name
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    target = model_dir / "1" / "model.onnx"
    target.unlink(missing_ok=True)
    try:
        os.link(workload.source / "1" / "model.onnx", target)
    except OSError:
        shutil.copyfile(workload.source / "1" / "model.onnx", target)
    params = [("intra_op_thread_count", str(config.threads))]
    if spinning != "default":
        params.append(("allow_spinning", "true" if spinning == "on" else "false"))
    text = (workload.source / "config.pbtxt").read_text().rstrip() + "\n"
    for key, value in params:
        text += f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}\n'
    (model_dir / "config.pbtxt").write_text(text)
    return repo


def signature(model_path: Path) -> list[dict[str, Any]]:
    """V2 metadata for the model's inputs (name, datatype, shape with -1 for dynamic)."""
    graph = onnx.load(str(model_path), load_external_data=False).graph
    inputs = []
    for value in graph.input:
        tensor = value.type.tensor_type
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type))
        shape = [d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim]
        inputs.append({"name": value.name, "datatype": from_numpy(dtype).v2, "shape": shape})
    return inputs


def first_request(model_path: Path) -> tuple[bytes, dict[str, str]]:
    """The load generator's default request (random inputs from the signature), as JSON."""
    request = prepare_request(random_inputs({"inputs": signature(model_path)}))
    return request.body, dict(request.headers)


def flushes_denormals(model_dir: Path) -> bool:
    """Whether the model's config has modelfn zero its denormal weights."""
    from modelfn.runtime.config_file import load_config

    config = load_config(model_dir)
    value = (config.parameters.get("flush_denormal_weights", "0") if config else "0")
    return value.strip().lower() in ("1", "true", "yes")
