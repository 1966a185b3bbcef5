"""What the gateway's gRPC pass-through costs in front of a warm gRPC function (digits).

    python bench/gateway_grpc.py [--duration 8] [--repetitions 2] [--cores 0,1,1]

A warm function (``modelfn serve --grpc-port``), the gateway (``modelfn gateway
--grpc-port``, reading a routing table whose version speaks gRPC) and the gRPC load
generator (``bench/grpc_load.py``, its own process) run pinned to the cores ``--cores``
names. The same load runs against the function's gRPC port and the gateway's,
interleaved (A B A B): p50 added at c=1, and req/s at c=32 through the gateway as a share
of direct. Medians over the repetitions; only ratios within one run mean anything.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from modelfn.process.supervisor import Process, free_port, http_probe

ROOT = Path(__file__).resolve().parents[1]
MODELFN = [sys.executable, "-m", "modelfn.cli.main"]


def started(argv: list[str], name: str, ready_url: str) -> Process:
    process = Process(argv, name=name).start()
    process.wait_ready(http_probe(ready_url), timeout=120)
    return process


def load(address: str, duration: float, out: Path, core: str) -> list[dict[str, Any]]:
    subprocess.run(["taskset", "-c", core, sys.executable, str(ROOT / "bench" / "grpc_load.py"),
                    address, "--model", "digits", "-c", "1,32", "--duration", str(duration),
                    "--json", str(out)], check=True, capture_output=True, timeout=600)
    rows: list[dict[str, Any]] = json.loads(out.read_text())
    return rows


def median(rows: list[dict[str, Any]], concurrency: int, key: str) -> float:
    return statistics.median(r[key] for r in rows if r["concurrency"] == concurrency)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--repetitions", type=int, default=2)
    parser.add_argument("--cores", default="0,1,1",
                        help="cores of the function, the gateway and the client")
    args = parser.parse_args()
    function_core, gateway_core, client_core = args.cores.split(",")
    runs: dict[str, list[dict[str, Any]]] = {"direct": [], "gateway": []}
    with tempfile.TemporaryDirectory(prefix="modelfn-gateway-grpc-") as tmp:
        work = Path(tmp)
        rest, grpc_port, gw_port, gw_grpc = free_port(), free_port(), free_port(), free_port()
        function = started(["taskset", "-c", function_core, *MODELFN, "serve",
                            str(ROOT / "examples" / "models"), "--host", "127.0.0.1",
                            "--port", str(rest), "--grpc-port", str(grpc_port),
                            "--log-level", "warning"], "function",
                           f"http://127.0.0.1:{rest}/v2/health/ready")
        routes = work / "routes"
        routes.mkdir()
        url = f"http://127.0.0.1:{grpc_port}"
        (routes / "digits.json").write_text(json.dumps({
            "format": 1, "model": "digits", "target": "knative", "url": url,
            "split": {"1": 100}, "versions": {"1": {"url": url, "max_batch_size": 64,
                                                      "concurrency": 128,
                                                      "protocol": "grpc"}}}))
        gateway = started(["taskset", "-c", gateway_core, *MODELFN, "gateway", "--routes-dir",
                           str(routes), "--port", str(gw_port), "--grpc-port", str(gw_grpc),
                           "--log-level", "warning"],
                          "gateway", f"http://127.0.0.1:{gw_port}/v2/health/live")
        try:
            for repetition in range(args.repetitions):
                for target, address in (("direct", f"127.0.0.1:{grpc_port}"),
                                        ("gateway", f"127.0.0.1:{gw_grpc}")):
                    out = work / f"{target}-{repetition}.json"
                    runs[target] += load(address, args.duration, out, client_core)
        finally:
            gateway.stop()
            function.stop()
    d1, g1 = (median(runs[t], 1, "p50_ms") for t in ("direct", "gateway"))
    d32, g32 = (median(runs[t], 32, "req_per_s") for t in ("direct", "gateway"))
    p99 = {t: median(runs[t], 32, "p99_ms") for t in runs}
    print(f"placement: function on core {function_core}, gateway on core {gateway_core}, "
          f"client on core {client_core}")
    print(f"c=1 p50: direct {d1:.3f} ms, gateway {g1:.3f} ms, added {g1 - d1:.3f} ms")
    print(f"c=32 req/s: direct {d32:,.0f}, gateway {g32:,.0f} = {100 * g32 / d32:.0f}% of "
          f"direct (p99 {p99['direct']:.2f} -> {p99['gateway']:.2f} ms)")
    for target, rows in runs.items():
        each = ", ".join(
            f"c={r['concurrency']}: {r['req_per_s']:,.0f} req/s p50 {r['p50_ms']:.3f} ms"
            for r in rows)
        print(f"  {target} runs (in order): {each}")
    print(f"errors: {sum(r.get('errors', 0) for rows in runs.values() for r in rows)}")


if __name__ == "__main__":
    main()
