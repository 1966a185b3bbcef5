"""What the gateway costs in front of a warm function (digits).

    python bench/gateway_overhead.py [--duration 8] [--repetitions 2] [--cores 0,1,1]

A warm function (``modelfn serve``, one process) and the gateway (``modelfn gateway``, one
process, reading a routing-table directory that points at the function) and the load
generator (``modelfn bench``, its own process) run pinned to the cores ``--cores`` names;
on a two-core machine two of the three share one. The same load runs against the function directly
and through the gateway, interleaved (A B A B): p50 added at c=1, and req/s at c=32
through the gateway as a share of direct. Medians over the repetitions. The machine may be
shared: only ratios within one run mean anything.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from local_platform import load, report  # the same client run and report

from modelfn.process.supervisor import Process, free_port, http_probe

ROOT = Path(__file__).resolve().parents[1]
MODELFN = [sys.executable, "-m", "modelfn.cli.main"]


def started(argv: list[str], name: str, ready_url: str) -> Process:
    process = Process(argv, name=name).start()
    process.wait_ready(http_probe(ready_url), timeout=120)
    return process


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--repetitions", type=int, default=2)
    parser.add_argument("--cores", default="0,1,1",
                        help="cores of the function, the gateway and the client")
    args = parser.parse_args()
    function_core, gateway_core, client_core = args.cores.split(",")
    runs: dict[str, list[dict[str, Any]]] = {"direct": [], "gateway": []}
    with tempfile.TemporaryDirectory(prefix="modelfn-gateway-bench-") as tmp:
        work = Path(tmp)
        fn_port, gw_port = free_port(), free_port()
        function = started(["taskset", "-c", function_core, *MODELFN, "serve",
                            str(ROOT / "examples" / "models"), "--host", "127.0.0.1",
                            "--port", str(fn_port)], "function",
                           f"http://127.0.0.1:{fn_port}/v2/health/ready")
        routes = work / "routes"
        routes.mkdir()
        direct = f"http://127.0.0.1:{fn_port}"
        (routes / "digits.json").write_text(json.dumps({
            "format": 1, "model": "digits", "target": "knative", "url": direct,
            "split": {"1": 100}, "versions": {"1": {"url": direct, "auth": "none",
                                                      "max_batch_size": 64,
                                                      "concurrency": 128}}}))
        gateway = started(["taskset", "-c", gateway_core, *MODELFN, "gateway", "--routes-dir",
                           str(routes), "--port", str(gw_port), "--log-level", "warning"],
                          "gateway", f"http://127.0.0.1:{gw_port}/v2/health/live")
        try:
            for repetition in range(args.repetitions):
                for target, url in (("direct", direct),
                                    ("gateway", f"http://127.0.0.1:{gw_port}")):
                    out = work / f"{target}-{repetition}.json"
                    runs[target] += load(url, "1,32", args.duration, out, cpus=client_core)
        finally:
            gateway.stop()
            function.stop()
    print(f"placement: function on core {function_core}, gateway on core {gateway_core}, "
          f"client on core {client_core}")
    report(runs, "REST", via="gateway")

if __name__ == "__main__":
    main()
