"""modelfn's main job end to end on this machine, with the embedded local defaults.

1. ``modelfn init``: scaffold a repository from the example ONNX model (config auto-completed);
2. ``modelfn push``: publish it as immutable version 1 in a local model store;
3. ``modelfn serve --store``: warm-start a function from the store (fetch, verify, load, warm up);
4. send V2 requests (JSON with httpx, binary tensors with tritonclient) and check the answers;
5. ``modelfn bench``: a short closed-loop load, showing batches forming under concurrency;
6. restart: the pinned version comes from the local cache, nothing is fetched again.

Run it with ``scripts/demo``. Everything lives in a temporary directory and every process
listens on 127.0.0.1 only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import numpy as np
import tritonclient.http as triton

from modelfn.process.supervisor import Process, ProcessFailed, free_port, http_probe

EXAMPLES = Path(__file__).resolve().parent
MODELFN = [sys.executable, "-m", "modelfn.cli.main"]


def step(text: str) -> None:
    print(f"\n== {text}", flush=True)


def run(*args: str, env: dict[str, str]) -> None:
    print("$ modelfn " + " ".join(args), flush=True)
    subprocess.run([*MODELFN, *args], env=env, check=True)


def serve(store: Path, port: int, env: dict[str, str]) -> Process:
    args = ["serve", "--store", str(store), "--model", "digits:1", "--host", "127.0.0.1",
            "--port", str(port)]
    print("$ modelfn " + " ".join(args), flush=True)
    proc = Process([*MODELFN, *args], name="modelfn serve", env=env).start()
    try:
        proc.wait_ready(http_probe(f"http://127.0.0.1:{port}/v2/health/ready"), timeout=60)
    except ProcessFailed as exc:
        proc.stop()
        raise SystemExit(exc.message) from exc
    return proc


def stop(proc: Process) -> str:
    proc.stop(grace=30)
    return proc.tail()


def check_answers(port: int) -> None:
    request = json.loads((EXAMPLES / "requests" / "digits.json").read_text())
    expected = json.loads((EXAMPLES / "requests" / "digits_expected.json").read_text())["label"]
    response = httpx.post(f"http://127.0.0.1:{port}/v2/models/digits/infer", json=request)
    response.raise_for_status()
    body = response.json()
    labels = next(o for o in body["outputs"] if o["name"] == "label")["data"]
    print(f"JSON   V2 infer -> labels {labels} (expected {expected})")
    assert labels == expected, "wrong labels from the JSON request"

    client = triton.InferenceServerClient(f"127.0.0.1:{port}")
    rows = np.array(request["inputs"][0]["data"], dtype=np.float32).reshape(4, 64)
    tensor = triton.InferInput("input", [4, 64], "FP32")
    tensor.set_data_from_numpy(rows, binary_data=True)
    result = client.infer("digits", [tensor], outputs=[
        triton.InferRequestedOutput("label", binary_data=True),
        triton.InferRequestedOutput("probabilities", binary_data=True),
    ])
    binary_labels = result.as_numpy("label").ravel().tolist()
    top = result.as_numpy("probabilities").max(axis=1).round(3).tolist()
    print(f"binary V2 infer (tritonclient) -> labels {binary_labels}, confidence {top}")
    assert binary_labels == expected, "wrong labels from the binary request"
    client.close()


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="modelfn-demo-") as tmp:
        root = Path(tmp)
        env = {**os.environ, "MODELFN_CACHE": str(root / "cache"), "PYTHONUNBUFFERED": "1"}
        store = root / "store"

        step("1. scaffold a model repository from an ONNX file (config auto-completed)")
        run("init", str(EXAMPLES / "models" / "digits" / "1" / "model.onnx"), "--name", "digits",
            "--repo", str(root / "models"), env=env)

        step("2. push it to the model store as immutable version 1")
        run("push", str(root / "models" / "digits"), "--store", str(store), env=env)
        run("versions", str(store), env=env)

        step("3. warm-start a function from the store")
        port = free_port()
        proc = serve(store, port, env)
        try:
            step("4. V2 requests, JSON and binary tensors")
            check_answers(port)
            step("5. a short load: batches form under concurrency")
            run("bench", f"http://127.0.0.1:{port}", "--model", "digits", "-c", "1,16",
                "--duration", "2", "--warmup", "0.5", env=env)
        finally:
            log = stop(proc)
        print(next(line for line in log.splitlines() if "ready:" in line))

        step("6. restart: the pinned version is served from the local cache")
        proc = serve(store, port, env)
        try:
            check_answers(port)
        finally:
            log = stop(proc)
        ready = next(line for line in log.splitlines() if "ready:" in line)
        print(ready)
        print("\nmodelfn demo: all answers correct")


if __name__ == "__main__":
    main()
