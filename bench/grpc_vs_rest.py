"""KServe V2 over gRPC against REST with the binary extension, on one ``modelfn serve``.

    python bench/grpc_vs_rest.py [--duration 8] [--repetitions 2] [--workloads digits,cnn]

One server, ``modelfn serve REPO --grpc-port`` under ``taskset -c 0`` with ORT on one thread,
serves both protocols; the load generators run one at a time under ``taskset -c 1``:
``modelfn bench --binary`` for REST and ``bench/grpc_load.py`` (``grpc.aio``, pre-serialised
requests) for gRPC, interleaved (REST, gRPC, REST, gRPC), medians over the repetitions.

- digits at c=1 and c=32: what each protocol costs per request.
- cnn at c=32: how close gRPC gets to raw in-process onnxruntime (``bench/raw_ort.py``,
  pinned the same way, its best rows/s over batch sizes 1 to 32).
- digits also against ``bench/grpc_bare.py`` ("bare"): grpcio's asyncio server answering
  canned bytes on the same core, the most any Python gRPC server with grpcio can do here.

Each cell also records the CPU the server and the client used over the client's run, in
cores (1.0 is one core busy), and the CPU other processes used: a client near 1.0 core
is the bottleneck, not the server. The machine may be shared: only ratios within one run
mean anything. (The file is not ``bench/grpc.py``: run as a script, that name would shadow
the ``grpc`` package for everything it imports.)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from harness import busy_cpu_seconds, wait_for_quiet
from run import CONFIGS, make_repo, prepare_workloads

from modelfn.process.supervisor import Process, free_port, http_probe

BENCH = Path(__file__).resolve().parent
WORK = BENCH / ".work" / "grpc"
PY = sys.executable
SERVER_CORE, CLIENT_CORE = "0", "1"
CELLS = {"digits": (1, 32), "cnn": (32,)}


def cpu_of(pid: int) -> float:
    """CPU seconds of ``pid`` and its threads so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def load(protocol: str, server: Process, address: str, model: str,
         concurrency: int, duration: float, warmup: float) -> dict[str, Any]:
    """One cell: ``protocol`` is rest, grpc, or bare (grpc_bare.py, the request grpc sent)."""
    out = WORK / f"{protocol}.json"
    out.unlink(missing_ok=True)
    body = WORK / f"{model}-request.bin"
    if protocol == "rest":
        argv = [PY, "-m", "modelfn.cli.main", "bench", address, "-m", model, "--binary",
                "-c", str(concurrency), "--duration", str(duration), "--warmup", str(warmup),
                "--json", str(out)]
    else:
        argv = [PY, str(BENCH / "grpc_load.py"), address, "-m", model,
                "-c", str(concurrency), "--duration", str(duration), "--warmup", str(warmup),
                "--json", str(out)]
        argv += ["--body", str(body)] if protocol == "bare" else ["--save-body", str(body)]
    foreign_before = wait_for_quiet(None, max_wait=10.0)
    cpu, kids, busy, t0 = cpu_of(server.pid), children_cpu(), busy_cpu_seconds(), time.time()
    done = subprocess.run(["taskset", "-c", CLIENT_CORE, *argv], capture_output=True,
                          text=True, check=False)
    wall = time.time() - t0
    if done.returncode != 0:
        raise SystemExit(f"{protocol} load failed: {done.stderr[-2000:]}")
    row: dict[str, Any] = json.loads(out.read_text())[0]
    server_cores = (cpu_of(server.pid) - cpu) / wall
    client_cores = (children_cpu() - kids) / wall
    row.update(protocol=protocol, server_cores=server_cores, client_cores=client_cores,
               foreign_cores=max(0.0, (busy_cpu_seconds() - busy) / wall
                                 - server_cores - client_cores),
               foreign_before=foreign_before)
    print(f"  {protocol:5} c={concurrency:<3} {row['req_per_s']:9,.1f} req/s  p50 "
          f"{row['p50_ms'] or 0:7.2f} ms  p99 {row['p99_ms'] or 0:7.2f} ms  batch "
          f"{row['avg_batch_size'] or float('nan'):5.2f}  errors {row['errors']}  server "
          f"{server_cores:.2f} client {client_cores:.2f} foreign {row['foreign_cores']:.2f} "
          "cores", flush=True)
    return row


def raw_ort(model: Path) -> dict[str, Any]:
    out = WORK / "raw.json"
    argv = ["taskset", "-c", SERVER_CORE, PY, str(BENCH / "raw_ort.py"), str(model),
            "--threads", "1", "--batches", "1,8,16,32", "--duration", "3", "--json", str(out)]
    subprocess.run(argv, check=True, capture_output=True)
    result: dict[str, Any] = json.loads(out.read_text())
    print(f"  raw onnxruntime: best {result['best_rows_per_s']:,.1f} rows/s at batch "
          f"{result['best_batch']}", flush=True)
    return result


def median(rows: list[dict[str, Any]], key: str) -> float:
    values = [r[key] for r in rows if r[key] is not None]
    return float(statistics.median(values)) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--repetitions", type=int, default=2)
    parser.add_argument("--workloads", default="digits,cnn")
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    os.sched_setaffinity(0, {int(CLIENT_CORE)})  # the harness stays off the server's core
    workloads = prepare_workloads(args.workloads.split(","))
    table: list[str] = []
    for name, workload in workloads.items():
        repo = make_repo(workload, CONFIGS["pinned"], "default")
        rest_port, grpc_port = free_port(), free_port()
        warmup = 2.0 * workload.warmup_scale
        raw = raw_ort(workload.source / "1" / "model.onnx") if name == "cnn" else None
        server = Process(["taskset", "-c", SERVER_CORE, PY, "-m", "modelfn.cli.main", "serve",
                          str(repo), "--host", "127.0.0.1", "--port", str(rest_port),
                          "--grpc-port", str(grpc_port), "--log-level", "warning"],
                         name="modelfn serve").start()
        bare_port = free_port()
        bare = Process(["taskset", "-c", SERVER_CORE, PY, str(BENCH / "grpc_bare.py"),
                        str(bare_port)], name="grpc bare").start() if name == "digits" else None
        targets = {"rest": (server, f"http://127.0.0.1:{rest_port}"),
                   "grpc": (server, f"127.0.0.1:{grpc_port}")}
        if bare is not None:
            targets["bare"] = (bare, f"127.0.0.1:{bare_port}")
        rows: list[dict[str, Any]] = []
        try:
            server.wait_ready(http_probe(f"http://127.0.0.1:{rest_port}/v2/health/ready"), 120)
            print(f"[{name}] REST on {rest_port}, gRPC on {grpc_port}", flush=True)
            for rep in range(args.repetitions):
                for concurrency in CELLS[name]:
                    for protocol, (process, address) in targets.items():
                        row = load(protocol, process, address, name, concurrency,
                                   args.duration, warmup)
                        rows.append({**row, "rep": rep})
        finally:
            server.stop(grace=10)
            if bare is not None:
                bare.stop(grace=5)
        (WORK / f"{name}.json").write_text(json.dumps({"rows": rows, "raw": raw}, indent=2))
        for concurrency in CELLS[name]:
            cells = {p: [r for r in rows if r["protocol"] == p
                         and r["concurrency"] == concurrency] for p in targets}
            rest, grpc = (median(cells[p], "req_per_s") for p in ("rest", "grpc"))
            raw_share = (f"{grpc / raw['best_rows_per_s']:.2f}× of {raw['best_rows_per_s']:,.1f}"
                         if raw else "–")
            for protocol, c in cells.items():
                foreign = max(r["foreign_cores"] for r in c)
                table.append(
                    f"| {name} | {concurrency} | {protocol} | {median(c, 'req_per_s'):,.1f} | "
                    f"{median(c, 'p50_ms'):.2f} / {median(c, 'p99_ms'):.2f} | "
                    f"{median(c, 'avg_batch_size'):.2f} | {median(c, 'server_cores'):.2f} / "
                    f"{median(c, 'client_cores'):.2f} | {foreign:.2f} | "
                    + (f"{grpc / rest:.2f}× REST; {raw_share}" if protocol == "grpc" else "")
                    + " |")
    print("\n| workload | c | target | req/s | p50 / p99 ms | batch | server / client cores "
          "| most foreign cores | gRPC vs |")
    print("|" + "---|" * 9)
    print("\n".join(table))


if __name__ == "__main__":
    main()
