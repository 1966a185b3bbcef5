"""Isolation: the p99 of digits (ONNX) at a fixed moderate load, alone and then beside a
CPU-heavy Python model served by the same ``modelfn serve`` under concurrent load.

    python bench/python_isolation.py [--layouts split,one-core] [--rounds 3] [--seconds 10]
                                     [--rate-connections 8] [--delay-ms 4] [--spin-ms 3]

The repository holds ``digits`` (``examples/models/digits``, one ORT thread) and ``spin``
(Python backend: a pure-Python loop of about ``--spin-ms`` ms per request, calibrated on
this machine before the run; one instance, dynamic batching). digits' load is wrk with
``--rate-connections`` connections, each waiting ``--delay-ms`` after every answer (wrk's
``delay()``), so its rate stays the same whether the server is busy or not; spin's load is
a closed loop of 4 connections, enough to keep its worker always busy. Every round measures
digits alone, then digits while spin's load runs; medians over the rounds. The server's
statistics give digits' mean time inside the server (queue + compute + the rest), apart
from what the clients' own scheduling adds.

Layouts (two cores):

- ``split``: the server's process (event loop, ORT's thread) on core 0; spin's Python
  worker moved to core 1 once it runs (``taskset -a -p``); both wrk clients on core 1.
- ``one-core``: the server and its Python worker on core 0; both wrk clients on core 1.
- ``one-core-nice``: as ``one-core``, with every thread of spin's worker at nice 19
  (``renice``), what a model's config could ask for its Python workers.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import time
from typing import TYPE_CHECKING, Any

import numpy as np
from harness import Server, _session_pids, pinned
from python_backend import modelfn_spec, save_model
from workloads import ROOT, WORK

from modelfn.client.bodies import prepare_request
from modelfn.client.wrk import find_wrk, parse_output, write_body

if TYPE_CHECKING:
    from pathlib import Path

HERE = WORK / "python_isolation"
LUA = ROOT / "client" / "wrk_v2_infer.lua"

#: a pure-Python loop: holds its worker's GIL and core for ``loops`` iterations a request
SPIN = """
import numpy as np
import triton_python_backend_utils as pb_utils

LOOPS = {loops}


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            total = 0
            for i in range(LOOPS):
                total += i * i % 7
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("Y", x + np.float32(total % 2))]))
        return responses
"""

SPIN_CONFIG = """
name: "spin"
backend: "python"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [{ kind: KIND_CPU }]
dynamic_batching { }
"""


def calibrate(ms: float) -> int:
    """Loop iterations that take ``ms`` of CPU in this interpreter (best of 5)."""
    loops = 100_000
    best = float("inf")
    for _ in range(5):
        started = time.process_time()
        total = 0
        for i in range(loops):
            total += i * i % 7
        best = min(best, time.process_time() - started)
    return int(loops * ms / 1e3 / best)


def make_repo(spin_ms: float) -> tuple[Path, int]:
    repo = HERE / "repo"
    shutil.rmtree(repo, ignore_errors=True)
    (repo / "digits" / "1").mkdir(parents=True)
    shutil.copyfile(ROOT / "examples/models/digits/1/model.onnx",
                    repo / "digits" / "1" / "model.onnx")
    config = (ROOT / "examples/models/digits/config.pbtxt").read_text().rstrip() + "\n"
    config += 'parameters { key: "intra_op_thread_count" value: { string_value: "1" } }\n'
    (repo / "digits" / "config.pbtxt").write_text(config)
    loops = calibrate(spin_ms)
    save_model(repo, "spin", SPIN.format(loops=loops), SPIN_CONFIG)
    return repo, loops


def paced_lua(delay_ms: float) -> Path:
    """The V2 infer script with wrk's ``delay()``: each connection waits after each answer."""
    path = HERE / f"paced-{delay_ms:g}.lua"
    path.write_text(f'dofile("{LUA}")\n\nfunction delay()\n   return {delay_ms:g}\nend\n')
    return path


def worker_pids(server: Server) -> list[int]:
    found = []
    for pid in _session_pids(server.pid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"modelfn.runtime.backends.python.worker" in argv:
            found.append(pid)
    return found


def stats(url: str, model: str) -> tuple[int, int, int, int]:
    """(successes, their ns, queue ns, compute_infer ns) from the statistics endpoint."""
    import urllib.request

    with urllib.request.urlopen(f"{url}/v2/models/{model}/stats", timeout=5) as answer:
        doc = json.loads(answer.read())
    s = doc["model_stats"][0]["inference_stats"]
    return (int(s["success"]["count"]), int(s["success"]["ns"]), int(s["queue"]["ns"]),
            int(s["compute_infer"]["ns"]))


def wrk_argv(wrk: str, url: str, model: str, script: Path, args: list[str], c: int,
             seconds: float) -> list[str]:
    return pinned([wrk, "-t1", f"-c{c}", f"-d{seconds:g}s", "-s", str(script),
                   f"{url}/v2/models/{model}/infer", "--", *args], "1")


def digits_window(wrk: str, url: str, script: Path, args: list[str], c: int,
                  seconds: float, server: Server) -> dict[str, Any]:
    """One measured wrk run on digits (after a 2 s warm-up run) with the server's view."""
    subprocess.run(wrk_argv(wrk, url, "digits", script, args, c, 2), capture_output=True,
                   check=True)
    before, cpu = stats(url, "digits"), server.cpu_seconds()
    out = subprocess.run(wrk_argv(wrk, url, "digits", script, args, c, seconds),
                         capture_output=True, text=True, check=True).stdout
    after, cpu = stats(url, "digits"), server.cpu_seconds() - cpu
    raw = parse_output(out)
    n = after[0] - before[0]
    return {"req_per_s": raw["requests"] / (raw["duration_us"] / 1e6),
            "errors": raw["non_200"] + raw["timeouts"] + raw["read_errors"],
            "p50_ms": raw["p50_us"] / 1e3, "p99_ms": raw["p99_us"] / 1e3,
            "max_ms": raw["max_us"] / 1e3,
            "server_ms": (after[1] - before[1]) / n / 1e6,
            "queue_ms": (after[2] - before[2]) / n / 1e6,
            "compute_ms": (after[3] - before[3]) / n / 1e6,
            "server_cpu_s": cpu, "load": os.getloadavg()[0]}


def run_layout(layout: str, args: argparse.Namespace, wrk: str, repo: Path) -> list[dict]:
    digits_args = write_body(prepare_request(
        {"input": np.round(np.random.default_rng(0).random((1, 64)), 2).astype(np.float32)},
        binary=True), HERE / "digits.bin")
    spin_args = write_body(prepare_request({"X": np.ones((1, 1), np.float32)}, binary=True),
                           HERE / "spin.bin")
    script = paced_lua(args.delay_ms)
    records = []
    spec = modelfn_spec(repo)
    with Server(spec, "0", WORK / "logs" / f"python_isolation-{layout}.log") as server:
        first = prepare_request({"X": np.ones((1, 1), np.float32)}, binary=False)
        server.wait_cold_start("/v2/models/spin/infer", first.body, dict(first.headers))
        workers = worker_pids(server)
        if layout == "split":
            for pid in workers:
                subprocess.run(["taskset", "-a", "-p", "-c", "1", str(pid)], check=True,
                               capture_output=True)
        if layout == "one-core-nice":
            for pid in workers:  # nice is per thread on Linux: every task of the worker
                tids = os.listdir(f"/proc/{pid}/task")
                subprocess.run(["renice", "-n", "19", "-p", *tids], check=True,
                               capture_output=True)
        print(f"# {layout}: server pid {server.pid} on core 0, spin's worker(s) {workers} on "
              f"core {1 if layout == 'split' else 0}, clients on core 1", flush=True)
        for n in range(args.rounds):
            for beside in (False, True):
                spin = None
                if beside:
                    spin = subprocess.Popen(
                        wrk_argv(wrk, spec.url, "spin", LUA, spin_args, 4,
                                 args.seconds + 6), stdout=subprocess.PIPE,
                        stderr=subprocess.DEVNULL, text=True)
                    time.sleep(1.0)
                record = digits_window(wrk, spec.url, script, digits_args,
                                       args.rate_connections, args.seconds, server)
                if spin is not None:
                    spin_out = parse_output(spin.communicate()[0])
                    record["spin_req_per_s"] = spin_out["requests"] / (
                        spin_out["duration_us"] / 1e6)
                record.update(layout=layout, round=n + 1, beside=beside)
                records.append(record)
                print(json.dumps(record), flush=True)
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layouts", default="split,one-core")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rate-connections", type=int, default=8)
    parser.add_argument("--delay-ms", type=float, default=4.0)
    parser.add_argument("--spin-ms", type=float, default=3.0)
    args = parser.parse_args()
    wrk = find_wrk()
    if wrk is None:
        raise SystemExit("wrk is not on PATH (Debian: apt install wrk)")
    HERE.mkdir(parents=True, exist_ok=True)
    repo, loops = make_repo(args.spin_ms)
    print(f"# spin: {loops:,} loop iterations a request (~{args.spin_ms:g} ms)", flush=True)
    records = []
    for layout in args.layouts.split(","):
        records += run_layout(layout, args, wrk, repo)
    (HERE / "results.json").write_text(json.dumps(records, indent=1))
    print("\n| layout | digits | req/s | p50 ms | p99 ms | p99 / alone | server mean ms "
          "(queue / compute) | spin req/s | errors |")
    print("|---|---|---|---|---|---|---|---|---|")
    for layout in args.layouts.split(","):
        alone_p99 = None
        for beside in (False, True):
            rs = [r for r in records if r["layout"] == layout and r["beside"] == beside]

            def med(key: str, rs: list[dict] = rs) -> float:
                return statistics.median(r[key] for r in rs)

            alone_p99 = alone_p99 or med("p99_ms")
            spin = f"{med('spin_req_per_s'):,.0f}" if beside else "—"
            print(f"| {layout} | {'beside spin' if beside else 'alone'} | "
                  f"{med('req_per_s'):,.0f} | {med('p50_ms'):.3f} | {med('p99_ms'):.3f} | "
                  f"**{med('p99_ms') / alone_p99:.2f}×** | {med('server_ms'):.3f} "
                  f"({med('queue_ms'):.3f} / {med('compute_ms'):.3f}) | {spin} | "
                  f"{sum(r['errors'] for r in rs)} |")


if __name__ == "__main__":
    main()
