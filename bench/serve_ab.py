"""A B runs of ``modelfn serve`` on digits: modelfn at git refs, with or without the example
config's ``flush_denormal_weights``, interleaved, pinned, one wrk cell each.

    python bench/serve_ab.py ff6f788:trained HEAD:trained HEAD [--body json] [--rounds 3]
                             [--seconds 5] [--concurrency 32] [--rows 1] [--query Q]

Each VARIANT is ``REF`` (a git ref, or ``.`` for the working tree) with ``:trained`` to run
the model's weights as trained (the example config without ``flush_denormal_weights``, as a
ref before that parameter needs). Every round runs each variant once, in order: the server
on core 0 (``taskset``), ORT one thread, wrk on core 1 after a 1 s warm-up. Printed per
run: requests/s, and the server's CPU per answered request from ``/proc/PID/stat``, the
figure a busy machine disturbs least. ``bench/run.py`` is the full method; this is the
quick pairwise check that its ``--compare-ref`` cannot do across a config change.

``--rows N``: every request carries N rows (``max_batch_size`` is raised to N where the
config's is less), for the large bodies of clients that send batches: 2048 rows of digits
are a 512 KiB binary body. Printed then: rows/s too.

``--query Q``: the infer URL carries ``?Q``, which sends each request down the ASGI app's
path rather than the HTTP edge's shortcut.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from harness import pinned
from refs import export_ref

from modelfn.client.bodies import prepare_request
from modelfn.client.cpu import process_cpu_seconds
from modelfn.client.wrk import find_wrk, parse_output, write_body
from modelfn.process.supervisor import free_port

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "bench" / ".work"
LUA = ROOT / "client" / "wrk_v2_infer.lua"
FLUSH = "flush_denormal_weights"


def repository(trained: bool, rows: int = 1) -> Path:
    """digits with one ORT thread, flushing as the example config does or not at all, its
    ``max_batch_size`` at least ``rows``."""
    repo = WORK / "ab" / ("trained" if trained else "example")
    model = repo / "digits"
    shutil.rmtree(repo, ignore_errors=True)
    (model / "1").mkdir(parents=True)
    shutil.copyfile(ROOT / "examples/models/digits/1/model.onnx", model / "1" / "model.onnx")
    lines = (ROOT / "examples/models/digits/config.pbtxt").read_text().splitlines()
    if trained:
        lines = [ln for ln in lines if FLUSH not in ln and not ln.startswith("#")]
    lines = [f"max_batch_size: {rows}" if ln.startswith("max_batch_size:")
             and int(ln.split(":")[1]) < rows else ln for ln in lines]
    lines.append('parameters { key: "intra_op_thread_count" value: { string_value: "1" } }')
    (model / "config.pbtxt").write_text("\n".join(lines) + "\n")
    return repo


def run(ref: str, repo: Path, script_args: list[str], concurrency: int, seconds: int,
        wrk: str, query: str = "") -> tuple[float, float]:
    """(requests/s, server µs per request) of one cell."""
    env = dict(os.environ)
    if ref != ".":
        env["PYTHONPATH"] = str(export_ref(ROOT, WORK, ref))
    port = free_port()
    server = subprocess.Popen(
        pinned([sys.executable, "-m", "modelfn.cli.main", "serve", str(repo), "--port",
                str(port), "--log-level", "warning"], "0"),
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/v2/models/digits/infer" + (f"?{query}" if query else "")
    try:
        deadline = time.monotonic() + 30
        while subprocess.run(["curl", "-sf", "-o", "/dev/null", f"http://127.0.0.1:{port}"
                              "/v2/health/ready"]).returncode != 0:
            if time.monotonic() > deadline or server.poll() is not None:
                raise SystemExit(f"{ref}: the server did not become ready")
            time.sleep(0.1)

        def wrk_run(secs: int) -> str:
            argv = [wrk, "-t1", f"-c{concurrency}", f"-d{secs}s", "-s", str(LUA), url, "--",
                    *script_args]
            return subprocess.run(pinned(argv, "1"), capture_output=True, text=True,
                                  check=True).stdout

        wrk_run(1)
        before = process_cpu_seconds(server.pid)
        result = parse_output(wrk_run(seconds))
        cpu = process_cpu_seconds(server.pid) - before
    finally:
        server.terminate()
        server.wait()
    answered = result["requests"] - result.get("non_200", 0)
    return answered / seconds, cpu / answered * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("variants", nargs="+", metavar="REF[:trained]")
    parser.add_argument("--body", choices=("json", "binary"), default="json")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rows", type=int, default=1, help="rows in each request")
    parser.add_argument("--query", default="", help="a query string for the infer URL")
    args = parser.parse_args()
    wrk = find_wrk()
    if wrk is None:
        raise SystemExit("wrk is not on PATH (Debian: apt install wrk)")
    rng = np.random.default_rng(0)
    rows = np.round(rng.random((args.rows, 64)), 2).astype(np.float32)
    script_args = write_body(prepare_request({"input": rows}, binary=args.body == "binary"),
                             WORK / "ab" / f"body.{args.body}")
    repos = {trained: repository(trained, args.rows) for trained in (False, True)}
    for n in range(args.rounds):
        for variant in args.variants:
            ref, _, how = variant.partition(":")
            rate, cpu = run(ref, repos[how == "trained"], script_args, args.concurrency,
                            args.seconds, wrk, args.query)
            per_row = f"  {rate * args.rows:>12,.0f} rows/s" if args.rows > 1 else ""
            print(f"round {n + 1}  {variant:<20} {args.body:<6} c={args.concurrency}  "
                  f"{rate:>10,.1f} req/s  {cpu:6.1f} µs/req{per_row}", flush=True)


if __name__ == "__main__":
    main()
