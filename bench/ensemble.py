"""An image ensemble served by ``modelfn serve`` against its own three steps run back to back
in one process with no server (the pipeline's own limit), pinned.

    python bench/ensemble.py [--rounds 2] [--seconds 15] [--warmup 5] [--concurrency 32]

The ensemble ``classify`` takes an encoded JPEG (``IMAGE``, TYPE_STRING [1], sent with the
binary tensor extension) through three models, each on its own batcher:

1. ``preprocess`` (Python backend): decode with Pillow, resize to 224×224, scale to [0, 1],
   normalize with ImageNet's mean and std, CHW: the CNN's input;
2. ``cnn`` (``bench/make_cnn.py``, ONNX, one ORT thread);
3. ``postprocess`` (Python backend): softmax and the top 5 classes and scores.

The server runs under ``taskset -c 0`` (its Python workers inherit it), wrk on core 1. The
pipeline runs ``image_steps.py`` (the very functions the two Python models call) and a
``cnn`` session with one ORT thread in one process under ``taskset -c 0``, a batch of B
images at a time (decode each, one ``session.run``, top-k of each row), for B in 1, 8, 16
and 32; its best rows/s is read before and after the server, and the ensemble's rows/s is
compared with their mean. The CNN served alone with the float tensor (binary body) is
measured in the same server as a reference. Printed: a Markdown table and the body bytes
per request of the JPEG against the float tensor (binary and JSON).

``--pipeline B[,B...]``: only the in-process pipeline, on the calling process's cores.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

import numpy as np
from cells import Cell, measure_wrk
from harness import Server, pinned, wait_for_quiet
from python_backend import median, modelfn_spec, save_model
from workloads import BENCH, PY, WORK, prepare_workloads

from modelfn.client.bodies import prepare_request
from modelfn.client.scrape import batch_size, scrape_batch_counters
from modelfn.client.wrk import find_wrk, write_body

if TYPE_CHECKING:
    from pathlib import Path

HERE = WORK / "ensemble"
REPO = HERE / "repo"

#: the steps both Python models and the in-process pipeline call
IMAGE_STEPS = """
import io

import numpy as np
from PIL import Image

MEAN = np.array([0.485, 0.456, 0.406], np.float32).reshape(3, 1, 1)
STD = np.array([0.229, 0.224, 0.225], np.float32).reshape(3, 1, 1)
SCALE = (1 / 255 / STD).astype(np.float32)


def preprocess(encoded):
    \"\"\"Encoded image bytes -> FP32 [3, 224, 224], normalized as ImageNet's CNNs want.\"\"\"
    image = Image.open(io.BytesIO(encoded)).convert("RGB").resize((224, 224),
                                                                  Image.BILINEAR)
    pixels = np.asarray(image, np.float32).transpose(2, 0, 1)
    return (pixels * SCALE - MEAN / STD).astype(np.float32)


def top_k(logits, k=5):
    \"\"\"Logits [N, C] -> (indices INT64 [N, k], softmax scores FP32 [N, k]), best first.\"\"\"
    best = np.argsort(-logits, axis=1)[:, :k]
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    probabilities = shifted / shifted.sum(axis=1, keepdims=True)
    return best.astype(np.int64), np.take_along_axis(probabilities, best, 1).astype(np.float32)
"""

PREPROCESS = """
import numpy as np
import triton_python_backend_utils as pb_utils
from image_steps import preprocess


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            images = pb_utils.get_input_tensor_by_name(request, "IMAGE").as_numpy()
            pixels = np.stack([preprocess(bytes(b)) for b in images.reshape(-1)])
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("PIXELS", pixels)]))
        return responses
"""

POSTPROCESS = """
import triton_python_backend_utils as pb_utils
from image_steps import top_k


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            logits = pb_utils.get_input_tensor_by_name(request, "LOGITS").as_numpy()
            index, score = top_k(logits)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("INDEX", index), pb_utils.Tensor("SCORE", score)]))
        return responses
"""

PYTHON_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 64
input [ {{ name: "{input}" data_type: {in_type} dims: {in_dims} }} ]
output [ {outputs} ]
instance_group [{{ kind: KIND_CPU }}]
dynamic_batching {{ }}
"""

ENSEMBLE = """
name: "classify"
platform: "ensemble"
max_batch_size: 64
input [ { name: "IMAGE" data_type: TYPE_STRING dims: [ 1 ] } ]
output [
  { name: "INDEX" data_type: TYPE_INT64 dims: [ 5 ] },
  { name: "SCORE" data_type: TYPE_FP32 dims: [ 5 ] }
]
ensemble_scheduling {
  step [
    { model_name: "preprocess" model_version: -1
      input_map { key: "IMAGE" value: "IMAGE" }
      output_map { key: "PIXELS" value: "pixels" } },
    { model_name: "cnn" model_version: -1
      input_map { key: "input" value: "pixels" }
      output_map { key: "logits" value: "logits" } },
    { model_name: "postprocess" model_version: -1
      input_map { key: "LOGITS" value: "logits" }
      output_map { key: "INDEX" value: "INDEX" }
      output_map { key: "SCORE" value: "SCORE" } }
  ]
}
"""

INDEX_SCORE = ('{ name: "INDEX" data_type: TYPE_INT64 dims: [ 5 ] }, '
               '{ name: "SCORE" data_type: TYPE_FP32 dims: [ 5 ] }')


def jpeg(width: int = 640, height: int = 480, quality: int = 75) -> bytes:
    """A photo-like test image: smooth gradients, shapes and some grain, as a JPEG."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    base = np.stack([x / width * 255, y / height * 255, (x + y) / (width + height) * 255], -1)
    grain = rng.normal(0, 8, base.shape)
    image = Image.fromarray(np.clip(base + grain, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(image)
    for _ in range(40):
        x0, y0 = int(rng.integers(0, width)), int(rng.integers(0, height))
        box = (x0, y0, x0 + int(rng.integers(10, 160)), y0 + int(rng.integers(10, 120)))
        draw.ellipse(box, fill=tuple(int(v) for v in rng.integers(0, 256, 3)))
    out = io.BytesIO()
    image.save(out, "JPEG", quality=quality)
    return out.getvalue()


def make_repo() -> Path:
    cnn = prepare_workloads(["cnn"])["cnn"].source
    steps = REPO / "classify" / "1"
    steps.mkdir(parents=True, exist_ok=True)
    for name, source, config in (
        ("preprocess", PREPROCESS, PYTHON_CONFIG.format(
            name="preprocess", input="IMAGE", in_type="TYPE_STRING", in_dims="[ 1 ]",
            outputs='{ name: "PIXELS" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] }')),
        ("postprocess", POSTPROCESS, PYTHON_CONFIG.format(
            name="postprocess", input="LOGITS", in_type="TYPE_FP32", in_dims="[ 1000 ]",
            outputs=INDEX_SCORE)),
    ):
        save_model(REPO, name, source, config)
        (REPO / name / "1" / "image_steps.py").write_text(IMAGE_STEPS.lstrip())
    (REPO / "classify" / "config.pbtxt").write_text(ENSEMBLE.lstrip())
    (REPO / "cnn" / "1").mkdir(parents=True, exist_ok=True)
    target = REPO / "cnn" / "1" / "model.onnx"
    if not target.exists():
        os.link(cnn / "1" / "model.onnx", target)
    config = (cnn / "config.pbtxt").read_text().rstrip() + "\n"
    config += 'parameters { key: "intra_op_thread_count" value: { string_value: "1" } }\n'
    (REPO / "cnn" / "config.pbtxt").write_text(config)
    return REPO


def pipeline(batches: list[int], seconds: float) -> dict[int, tuple[float, float]]:
    """The three steps back to back in this process: (rows/s, CPU ms a row) per batch size."""
    import onnxruntime as ort

    sys.path.insert(0, str(REPO / "preprocess" / "1"))
    from image_steps import preprocess, top_k  # type: ignore[import-not-found]

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(REPO / "cnn" / "1" / "model.onnx"), options,
                                   providers=["CPUExecutionProvider"])
    encoded = jpeg()
    rates = {}
    for batch in batches:
        images = [encoded] * batch

        def once(images: list[bytes] = images) -> None:
            pixels = np.stack([preprocess(b) for b in images])
            [logits] = session.run(None, {"input": pixels})
            top_k(logits)

        once()
        once()
        rows, started, cpu = 0, time.perf_counter(), time.process_time()
        while time.perf_counter() - started < seconds:
            once()
            rows += batch
        rates[batch] = (rows / (time.perf_counter() - started),
                        (time.process_time() - cpu) / rows * 1e3)
    return rates


def pipeline_pinned(batches: list[int], seconds: float) -> dict[int, tuple[float, float]]:
    argv = [PY, str(BENCH / "ensemble.py"), "--pipeline", ",".join(map(str, batches)),
            "--seconds", str(seconds)]
    out = subprocess.run(pinned(argv, "0"), capture_output=True, text=True, check=True)
    return {int(k): tuple(v) for k, v in json.loads(out.stdout.strip().splitlines()[-1]).items()}


def request_bytes(encoded: bytes) -> dict[str, int]:
    """Body bytes of one request: the JPEG (binary extension) against the float tensor."""
    image = np.array([[encoded]], dtype=np.object_)
    pixels = np.random.default_rng(0).random((1, 3, 224, 224)).astype(np.float32)
    return {
        "jpeg, binary": len(prepare_request({"IMAGE": image}, binary=True).body),
        "float tensor, binary": len(prepare_request({"input": pixels}, binary=True).body),
        "float tensor, JSON": len(prepare_request({"input": pixels}, binary=False).body),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--batches", default="1,8,16,32")
    parser.add_argument("--pipeline", help="only the in-process pipeline at these batches")
    args = parser.parse_args()
    if args.pipeline:
        rates = pipeline([int(b) for b in args.pipeline.split(",")], args.seconds)
        print(json.dumps(rates))
        return
    wrk = find_wrk()
    if wrk is None:
        raise SystemExit("wrk is not on PATH (Debian: apt install wrk)")
    repo = make_repo()
    encoded = jpeg()
    sizes = request_bytes(encoded)
    image = np.array([[encoded]], dtype=np.object_)
    jpeg_args = write_body(prepare_request({"IMAGE": image}, binary=True), HERE / "jpeg.bin")
    pixels = np.random.default_rng(0).random((1, 3, 224, 224)).astype(np.float32)
    float_args = write_body(prepare_request({"input": pixels}, binary=True), HERE / "float.bin")
    first_request = prepare_request({"IMAGE": image}, binary=True)
    batches = [int(b) for b in args.batches.split(",")]
    readings: list[dict[int, tuple[float, float]]] = []
    records: list[dict[str, Any]] = []
    for _ in range(args.rounds):
        readings.append(pipeline_pinned(batches, 5.0))
        print(f"# pipeline rows/s by batch: {readings[-1]}", flush=True)
        spec = modelfn_spec(repo)
        with Server(spec, "0", WORK / "logs" / "ensemble-modelfn.log") as server:
            server.wait_cold_start("/v2/models/classify/infer", first_request.body,
                                   dict(first_request.headers), timeout=180)
            for model, script in (("classify", jpeg_args), ("cnn", float_args)):
                cell = Cell(model, "binary", args.concurrency, args.seconds, args.warmup, "1")
                record: dict[str, Any] = {"model": model, "quiet": wait_for_quiet(server)}
                before = scrape_batch_counters(f"{spec.url}/metrics", "cnn")
                record.update(measure_wrk(wrk, server, cell, script, record))
                record["cnn_batch"] = batch_size(
                    before, scrape_batch_counters(f"{spec.url}/metrics", "cnn"))
                records.append(record)
                print(json.dumps(record), flush=True)
    readings.append(pipeline_pinned(batches, 5.0))
    print(f"# pipeline rows/s by batch: {readings[-1]}", flush=True)
    (HERE / "results.json").write_text(json.dumps({"pipeline": readings, "cells": records,
                                                   "bytes": sizes}, indent=1))
    best = max(batches, key=lambda b: sum(r[b][0] for r in readings))
    limit = sum(r[best][0] for r in readings) / len(readings)
    limit_cpu = sum(r[best][1] for r in readings) / len(readings)
    print("\n| what | rows/s | of the pipeline's rows/s | CPU ms a row | pipeline's CPU a row "
          "/ this | p50 / p99 ms | avg batch (cnn) |")
    print("|---|---|---|---|---|---|---|")
    print(f"| pipeline in one process, batch {best} (mean of {len(readings)} readings: "
          f"{' / '.join(f'{r[best][0]:.1f}' for r in readings)} rows/s) | {limit:.1f} | 1.00 | "
          f"{limit_cpu:.1f} | 1.00 | | |")
    for model in ("classify", "cnn"):
        mine = [r for r in records if r["model"] == model]
        rate, cpu = median(mine, "rows_per_s"), median(mine, "server_cpu_us") / 1e3
        what = ("the ensemble, JPEG in" if model == "classify"
                else "for reference: the CNN alone, float tensor in")
        ratios = (f"**{rate / limit:.2f}** | {cpu:.1f} | **{limit_cpu / cpu:.2f}**"
                  if model == "classify" else f"— | {cpu:.1f} | —")
        print(f"| {what}, c={args.concurrency} | {rate:.1f} | {ratios} | "
              f"{median(mine, 'p50_ms'):.0f} / {median(mine, 'p99_ms'):.0f} | "
              f"{median(mine, 'cnn_batch'):.1f} |")
    print("\n| request body | bytes |\n|---|---|")
    for what, size in sizes.items():
        print(f"| {what} | {size:,} |")


if __name__ == "__main__":
    main()
