"""Triton's Python-backend example ``add_sub`` served by ``modelfn serve`` and by PyTriton
(Triton's own server, its Python backend, an ``@batch`` infer function) in the same run.

    python bench/python_backend.py [--rounds 2] [--seconds 6] [--warmup 2]
                                   [--concurrency 1,32] [--bodies json,binary]

modelfn serves a repository written under ``bench/.work/python_backend/``: ``add_sub`` as
python_backend's example has it (``model.py`` with ``TritonPythonModel``, one execute per
batch of requests, each answered with its sum and difference), its config with
``max_batch_size: 64`` and ``dynamic_batching {}``. PyTriton binds the same computation
(FP32 [4] in, OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1) with ``max_batch_size
64`` and Triton's dynamic batcher, in the PyTriton venv of ``bench/peers.py``.

Each server runs under ``taskset -c 0`` (its worker or stub processes inherit it), wrk on
core 1. Every round starts each server in turn (modelfn, then PyTriton), measures every
cell (body × concurrency) with wrk, and stops it; the medians of the rounds are printed, as
a Markdown table, with the ratio modelfn / PyTriton per cell.
"""

from __future__ import annotations

import argparse
import json
import statistics
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
from cells import Cell, measure_wrk
from harness import Server, ServerSpec, wait_for_quiet
from peers import _python_libdir, prepare
from workloads import PY, WORK

from modelfn.client.bodies import prepare_request
from modelfn.client.wrk import find_wrk, write_body
from modelfn.process.supervisor import free_port

HERE = WORK / "python_backend"

#: python_backend's examples/add_sub/model.py: output dtypes from the config, one
#: response per request
ADD_SUB_MODEL = """
import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.model_config = model_config = json.loads(args["model_config"])
        output0_config = pb_utils.get_output_config_by_name(model_config, "OUTPUT0")
        output1_config = pb_utils.get_output_config_by_name(model_config, "OUTPUT1")
        self.output0_dtype = pb_utils.triton_string_to_numpy(output0_config["data_type"])
        self.output1_dtype = pb_utils.triton_string_to_numpy(output1_config["data_type"])

    def execute(self, requests):
        responses = []
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            in_1 = pb_utils.get_input_tensor_by_name(request, "INPUT1")
            out_0, out_1 = (in_0.as_numpy() + in_1.as_numpy(),
                            in_0.as_numpy() - in_1.as_numpy())
            out_tensor_0 = pb_utils.Tensor("OUTPUT0", out_0.astype(self.output0_dtype))
            out_tensor_1 = pb_utils.Tensor("OUTPUT1", out_1.astype(self.output1_dtype))
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[out_tensor_0, out_tensor_1]))
        return responses

    def finalize(self):
        print("Cleaning up...")
"""

ADD_SUB_CONFIG = """
name: "add_sub"
backend: "python"
max_batch_size: 64
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
instance_group [{ kind: KIND_CPU }]
dynamic_batching { }
"""

PYTRITON_ADD_SUB = """
import sys

import numpy as np
from pytriton.decorators import batch
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig

http_port, grpc_port, metrics_port = (int(a) for a in sys.argv[1:4])


@batch
def infer(INPUT0, INPUT1):
    return {"OUTPUT0": INPUT0 + INPUT1, "OUTPUT1": INPUT0 - INPUT1}


config = TritonConfig(http_address="127.0.0.1", http_port=http_port,
                      grpc_address="127.0.0.1", grpc_port=grpc_port, metrics_port=metrics_port)
with Triton(config=config) as triton:
    triton.bind(
        model_name="add_sub",
        infer_func=infer,
        inputs=[Tensor(name="INPUT0", dtype=np.float32, shape=(4,)),
                Tensor(name="INPUT1", dtype=np.float32, shape=(4,))],
        outputs=[Tensor(name="OUTPUT0", dtype=np.float32, shape=(4,)),
                 Tensor(name="OUTPUT1", dtype=np.float32, shape=(4,))],
        config=ModelConfig(max_batch_size=64, batcher=DynamicBatcher()),
        strict=False,
    )
    triton.serve()
"""


def save_model(repo: Path, name: str, model: str, config: str) -> Path:
    """``repo/name/config.pbtxt`` and ``repo/name/1/model.py``."""
    (repo / name / "1").mkdir(parents=True, exist_ok=True)
    (repo / name / "1" / "model.py").write_text(textwrap.dedent(model).lstrip())
    (repo / name / "config.pbtxt").write_text(textwrap.dedent(config).lstrip())
    return repo


def modelfn_spec(repo: Path, *extra: str) -> ServerSpec:
    port = free_port()
    argv = [PY, "-m", "modelfn.cli.main", "serve", str(repo), "--host", "127.0.0.1",
            "--port", str(port), "--log-level", "warning", *extra]
    return ServerSpec("modelfn", argv, port)


def pytriton_spec() -> ServerSpec:
    peer = prepare("pytriton", WORK)
    if peer.bin_dir is None:
        raise SystemExit(f"PyTriton is unavailable: {peer.reason}")
    script = HERE / "pytriton_add_sub.py"
    script.write_text(PYTRITON_ADD_SUB.lstrip())
    python = peer.bin_dir / "python"
    port, metrics = free_port(), free_port()
    argv = [str(python), str(script), str(port), str(free_port()), str(metrics)]
    return ServerSpec("pytriton", argv, port, True, f"http://127.0.0.1:{metrics}/metrics",
                      {"LD_LIBRARY_PATH": _python_libdir(python)})


def bodies(kinds: list[str]) -> dict[str, list[str]]:
    """wrk's script arguments per body kind: one add_sub request of one row."""
    rng = np.random.default_rng(0)
    inputs = {n: rng.random((1, 4)).astype(np.float32) for n in ("INPUT0", "INPUT1")}
    return {kind: write_body(prepare_request(inputs, binary=kind == "binary"),
                             HERE / f"add_sub.{kind}") for kind in kinds}


def measure_server(spec: ServerSpec, wrk: str, cells: list[Cell],
                   scripts: dict[str, list[str]], first: tuple[bytes, dict[str, str]],
                   server_cpus: str = "0") -> list[dict[str, Any]]:
    """Start ``spec`` pinned, measure every cell, stop it; one record per cell."""
    records = []
    log = WORK / "logs" / f"python_backend-{spec.target}.log"
    with Server(spec, server_cpus, log) as server:
        cold = server.wait_cold_start(f"/v2/models/{cells[0].model}/infer", *first,
                                      timeout=180)
        print(f"# {spec.target}: ready in {cold.ready_s:.2f} s, first answer "
              f"{cold.first_inference_s:.2f} s", flush=True)
        for cell in cells:
            record: dict[str, Any] = {"target": spec.target, "body": cell.body,
                                      "c": cell.concurrency}
            record["quiet"] = wait_for_quiet(server)
            record.update(measure_wrk(wrk, server, cell, scripts[cell.body], record))
            records.append(record)
            print(json.dumps(record), flush=True)
    return records


def median(records: list[dict[str, Any]], key: str) -> float:
    values = [r[key] for r in records if r.get(key) is not None]
    return statistics.median(values) if values else float("nan")


def table(records: list[dict[str, Any]], base: str, other: str) -> str:
    lines = [f"| body | c | {base} req/s | {other} req/s | {base}/{other} | "
             f"{base} p50 / p99 ms | {other} p50 / p99 ms | {base} / {other} server µs/req "
             "| avg batch | foreign cores |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    keys = sorted({(r["body"], r["c"]) for r in records})
    for body, c in keys:
        mine = [r for r in records if (r["body"], r["c"], r["target"]) == (body, c, base)]
        theirs = [r for r in records if (r["body"], r["c"], r["target"]) == (body, c, other)]
        a, b = median(mine, "req_per_s"), median(theirs, "req_per_s")
        lines.append(
            f"| {body} | {c} | {a:,.0f} | {b:,.0f} | **{a / b:.2f}×** | "
            f"{median(mine, 'p50_ms'):.3f} / {median(mine, 'p99_ms'):.3f} | "
            f"{median(theirs, 'p50_ms'):.3f} / {median(theirs, 'p99_ms'):.3f} | "
            f"{median(mine, 'server_cpu_us'):.0f} / {median(theirs, 'server_cpu_us'):.0f} | "
            f"{median(mine, 'avg_batch_size'):.1f} / {median(theirs, 'avg_batch_size'):.1f} | "
            f"{max(r['foreign_cores'] for r in mine + theirs):.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--concurrency", default="1,32")
    parser.add_argument("--bodies", default="json,binary")
    args = parser.parse_args()
    wrk = find_wrk()
    if wrk is None:
        raise SystemExit("wrk is not on PATH (Debian: apt install wrk)")
    kinds = args.bodies.split(",")
    scripts = bodies(sorted({*kinds, "json"}))  # the JSON body also times the cold start
    repo = save_model(HERE / "repo", "add_sub", ADD_SUB_MODEL, ADD_SUB_CONFIG)
    cells = [Cell("add_sub", kind, int(c), args.seconds, args.warmup, "1")
             for kind in kinds for c in args.concurrency.split(",")]
    first = (Path(scripts["json"][0]).read_bytes(), {"Content-Type": "application/json"})
    records: list[dict[str, Any]] = []
    for _ in range(args.rounds):
        records += measure_server(modelfn_spec(repo), wrk, cells, scripts, first)
        records += measure_server(pytriton_spec(), wrk, cells, scripts, first)
    (HERE / "results.json").write_text(json.dumps(records, indent=1))
    print(table(records, "modelfn", "pytriton"))


if __name__ == "__main__":
    main()
