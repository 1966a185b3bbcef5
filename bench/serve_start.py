"""Process start to ready of ``modelfn serve`` (REST), for two checkouts interleaved.

    python bench/serve_start.py [--runs 7] [--base DIR] [--this DIR] [--grpc]

Launches ``python -m modelfn.cli.main serve examples/models`` under ``taskset -c 0`` and
times launch to the first 200 from ``/v2/health/ready``, alternating this checkout with
``--base`` (a directory that holds a ``modelfn/`` package tree, put first on PYTHONPATH),
and prints the medians. ``--this`` puts this checkout's tree on PYTHONPATH the same way
(so both import through the same finder, not one through the editable install's).
``--grpc`` also times this checkout with ``--grpc-port``. The machine may be shared: only
the difference within one run means anything.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

from modelfn.process.supervisor import Process, free_port, http_probe

ROOT = Path(__file__).resolve().parents[1]


def start_to_ready(pythonpath: str | None, grpc: bool) -> float:
    port = free_port()
    argv = ["taskset", "-c", "0", sys.executable, "-m", "modelfn.cli.main", "serve",
            str(ROOT / "examples" / "models"), "--host", "127.0.0.1", "--port", str(port),
            "--log-level", "warning"]
    if grpc:
        argv += ["--grpc-port", str(free_port())]
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    process = Process(argv, name="modelfn serve", env=env).start()
    try:
        return process.wait_ready(http_probe(f"http://127.0.0.1:{port}/v2/health/ready",
                                             timeout=2.0), 60)
    finally:
        process.stop(grace=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--base", help="a directory holding the modelfn/ tree to compare with")
    parser.add_argument("--this", help="a directory holding this checkout's modelfn/ tree")
    parser.add_argument("--grpc", action="store_true")
    args = parser.parse_args()
    variants: dict[str, tuple[str | None, bool]] = {"this (REST)": (args.this, False)}
    if args.base:
        variants["base (REST)"] = (args.base, False)
    if args.grpc:
        variants["this (REST + gRPC)"] = (args.this, True)
    times: dict[str, list[float]] = {name: [] for name in variants}
    start_to_ready(None, False)  # the first start pays for cold file caches
    for _ in range(args.runs):
        for name, (path, grpc) in variants.items():
            times[name].append(start_to_ready(path, grpc))
    for name, values in times.items():
        shown = ", ".join(f"{v:.3f}" for v in values)
        print(f"{name}: median {statistics.median(values):.3f} s ({shown})")


if __name__ == "__main__":
    main()
