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
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from gateway_overhead import MODELFN, started  # the same processes as the REST cells
from local_platform import report

from modelfn.process.supervisor import free_port

ROOT = Path(__file__).resolve().parents[1]


def load(address: str, duration: float, out: Path, core: str) -> list[dict[str, Any]]:
    subprocess.run(["taskset", "-c", core, sys.executable, str(ROOT / "bench" / "grpc_load.py"),
                    address, "--model", "digits", "-c", "1,32", "--duration", str(duration),
                    "--json", str(out)], check=True, capture_output=True, timeout=600)
    rows: list[dict[str, Any]] = json.loads(out.read_text())
    return rows


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
    print(f"placement: function on core {function_core}, gateway on core {gateway_core}, "
          f"client on core {client_core}")
    report(runs, "gRPC", via="gateway")

if __name__ == "__main__":
    main()
