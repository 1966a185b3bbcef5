"""How much one large JSON body delays everyone else, and what it costs in memory.

Starts `modelfn serve` on a model with a variable-length FP32 input and a fixed one,
keeps a second client sending small requests, and sends (1) a legitimate JSON body of
numbers and (2) a body of millions of empty lists. Reports the slowest small request
while each big one was in flight, and the server's peak RSS (server and helper process).

    python bench/json_stall.py [--mib 12] [--repeat 2]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np
from onnx import TensorProto, helper, save_model

from modelfn.process.supervisor import Process, free_port, http_probe

SMALL = {"inputs": [{"name": "x", "shape": [1, 16], "datatype": "FP32", "data": [0.5] * 16}]}


def identity(path: Path, dims: list[int | str], config: str) -> None:
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "id",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    (path / "1").mkdir(parents=True)
    save_model(model, str(path / "1" / "model.onnx"))
    (path / "config.pbtxt").write_text(config)


def rss_mib(pid: int) -> float:
    """Resident memory of ``pid`` and its children, from /proc."""
    total = 0
    pids = [pid]
    children = Path(f"/proc/{pid}/task/{pid}/children")
    if children.exists():
        pids += [int(p) for p in children.read_text().split()]
    for p in pids:
        for line in Path(f"/proc/{p}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total / 1024


def measure(url: str, pid: int, path: str, body: bytes) -> dict[str, float]:
    done: list[tuple[float, float]] = []
    stop = threading.Event()
    peak = [0.0]

    def small() -> None:
        with httpx.Client(timeout=120) as client:
            while not stop.is_set():
                sent = time.monotonic()
                client.post(f"{url}/v2/models/fixed/infer", json=SMALL)
                done.append((sent, time.monotonic()))

    def memory() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], rss_mib(pid))
            time.sleep(0.01)

    threads = [threading.Thread(target=small), threading.Thread(target=memory)]
    for t in threads:
        t.start()
    time.sleep(0.3)
    base = rss_mib(pid)
    start = time.monotonic()
    status = httpx.post(f"{url}{path}", content=body, timeout=120).status_code
    end = time.monotonic()
    time.sleep(0.2)
    stop.set()
    for t in threads:
        t.join()
    overlapping = [b - a for a, b in done if b > start and a < end]
    return {"status": status, "seconds": end - start, "others": len(overlapping),
            "worst_ms": 1000 * max(overlapping, default=0.0), "rss_base_mib": base,
            "rss_peak_mib": peak[0]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=float, default=12.0)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "models"
        identity(root / "wide", [-1], 'name: "wide"\nmax_batch_size: 0\n')
        identity(root / "fixed", ["N", 16], 'name: "fixed"\nmax_batch_size: 8\n')
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        with Process([sys.executable, "-m", "modelfn.cli.main", "serve", str(root), "--port",
                      str(port)], name="modelfn serve") as server:
            server.wait_ready(http_probe(f"{url}/v2/health/ready"), 60)
            count = int(args.mib * 2**20 / 10)
            values = ",".join(f"{v:.7f}" for v in np.random.default_rng(0).random(count))
            legit = (f'{{"inputs":[{{"name":"x","shape":[{count}],"datatype":"FP32",'
                     f'"data":[{values}]}}]}}').encode()
            lists = int(args.mib * 2**20 / 3)
            attack = (b'{"inputs":[{"name":"x","shape":[1,16],"datatype":"FP32","data":['
                      + b"[]," * lists + b"[]]}]}")
            print("| body | size | status | time | small requests meanwhile | slowest | "
                  "RSS before | RSS peak |")
            print("|---|---|---|---|---|---|---|---|")
            for name, path, body in [("JSON numbers (variable dims)", "/v2/models/wide/infer",
                                      legit),
                                     ("empty lists (fixed dims)", "/v2/models/fixed/infer",
                                      attack),
                                     ("empty lists (variable dims)", "/v2/models/wide/infer",
                                      attack)]:
                for run in range(args.repeat):
                    r = measure(url, server.pid, path, body)
                    print(f"| {name}, run {run + 1} | {len(body) / 2**20:.1f} MiB | "
                          f"{r['status']:.0f} | {r['seconds']:.2f} s | {r['others']:.0f} | "
                          f"{r['worst_ms']:.1f} ms | {r['rss_base_mib']:.0f} MiB | "
                          f"{r['rss_peak_mib']:.0f} MiB |")


if __name__ == "__main__":
    main()
