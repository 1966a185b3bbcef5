"""The local serving plane's figures: scale from zero, and what its ingress costs.

    python bench/local_platform.py [--trials 5] [--duration 8] [--grpc] [--skip-zero]

1. Scale from zero to the first response, digits, process mode: a revision at zero
   instances gets one request; the client's latency and the plane's recorded hold.
2. Ingress overhead on a warm revision (one instance, min-scale 1): the same closed-loop
   load generator (``modelfn bench``, in its own process) against the instance's own port
   and against the route URL, interleaved (A B A B), medians: p50 added at c=1 and req/s
   at c=32 as a share of direct.
3. With ``--grpc``, the same for gRPC: a revision serving V2 gRPC on its ``h2c`` port,
   ``bench/grpc_load.py`` against the instance's port and the route URL (h2c spliced to
   the URL's relay, which routes each call).

The plane runs in this process (its own thread); the client is a separate process.
The machine is shared: only ratios within one run mean anything, and they are noisy.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from modelfn.localstack.plane import RevisionSpec, RevisionState, RouteSpec, TrafficTarget
from modelfn.localstack.serving import LocalServingPlane

ROOT = Path(__file__).resolve().parents[1]
NS, NAME = "bench", "digits-00001"


def wait(predicate: Any, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"gave up waiting for {what}")
        time.sleep(0.02)


def scale_from_zero(repo: Path, trials: int, logs: Path) -> dict[str, Any]:
    body = json.loads((ROOT / "examples" / "requests" / "digits.json").read_text())
    latencies = []
    with LocalServingPlane(idle_s=0.3, log_dir=logs) as plane:
        plane.ensure_revision(RevisionSpec(NS, "digits", NAME, "digits", {
            "MODELFN_REPOSITORY": str(repo), "MODELFN_LOG_LEVEL": "warning"}))
        url = plane.set_route(RouteSpec(NS, "digits", (TrafficTarget(NAME, 100),))).url
        with httpx.Client(timeout=60) as client:
            for _ in range(trials):
                wait(lambda: plane.revision_status(NS, NAME).instances == 0, "scale to zero")
                time.sleep(0.5)
                started = time.perf_counter()
                response = client.post(f"{url}/v2/models/digits/infer", json=body)
                latencies.append(time.perf_counter() - started)
                assert response.status_code == 200, response.text
        holds = plane.hold_times(NS, NAME)
        (revision,) = plane.status()["revisions"]
    # the first instance proved the revision at creation; the others were cold starts
    return {"client_s": latencies, "hold_s": holds, "ready_s": revision["ready_s"][1:]}


def load(url: str, concurrency: str, duration: float, out: Path, cpus: str | None = None
         ) -> list[dict[str, Any]]:
    """``modelfn bench`` in its own process (pinned to ``cpus`` when given): its rows."""
    argv = [sys.executable, "-m", "modelfn.cli.main", "bench", url, "-m", "digits",
            "-c", concurrency, "--duration", str(duration), "--warmup", "1",
            "--json", str(out)]
    if cpus is not None:
        argv = ["taskset", "-c", cpus, *argv]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"modelfn bench failed: {done.stderr[-2000:]}")
    return list(json.loads(out.read_text()))


def ingress(repo: Path, duration: float, logs: Path, work: Path) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {"direct": [], "ingress": []}
    with LocalServingPlane(log_dir=logs) as plane:
        plane.ensure_revision(RevisionSpec(NS, "digits", NAME, "digits", {
            "MODELFN_REPOSITORY": str(repo), "MODELFN_LOG_LEVEL": "warning"}, min_scale=1))
        route = plane.set_route(RouteSpec(NS, "digits", (TrafficTarget(NAME, 100),)))
        wait(lambda: plane.revision_status(NS, NAME).state is RevisionState.READY, "ready")
        (revision,) = plane.status()["revisions"]
        (instance,) = revision["instance_list"]
        direct = f"http://127.0.0.1:{instance['port']}"
        for repetition in range(2):
            for target, url in (("direct", direct), ("ingress", route.url)):
                out = work / f"{target}-{repetition}.json"
                runs[target] += load(url, "1,32", duration, out)
    return runs


def ingress_grpc(repo: Path, duration: float, logs: Path, work: Path
                 ) -> dict[str, list[dict[str, Any]]]:
    from gateway_grpc import load as grpc_load

    runs: dict[str, list[dict[str, Any]]] = {"direct": [], "ingress": []}
    with LocalServingPlane(log_dir=logs) as plane:
        plane.ensure_revision(RevisionSpec(NS, "digits", NAME, "digits", {
            "MODELFN_REPOSITORY": str(repo), "MODELFN_LOG_LEVEL": "warning",
            "MODELFN_PROTOCOL": "grpc"}, min_scale=1, readiness_path=None))
        route = plane.set_route(RouteSpec(NS, "digits", (TrafficTarget(NAME, 100),)))
        wait(lambda: plane.revision_status(NS, NAME).state is RevisionState.READY, "ready")
        (revision,) = plane.status()["revisions"]
        (instance,) = revision["instance_list"]
        direct = f"127.0.0.1:{instance['port']}"
        for repetition in range(2):
            for target, address in (("direct", direct),
                                    ("ingress", route.url.split("://", 1)[1])):
                out = work / f"grpc-{target}-{repetition}.json"
                runs[target] += grpc_load(address, duration, out, "0,1")
    return runs


def report(runs: dict[str, list[dict[str, Any]]], what: str, via: str = "ingress") -> None:
    """c=1 p50 added and c=32 req/s as a share of direct, ``runs`` keyed direct and ``via``."""
    d1, i1 = (median(runs[t], 1, "p50_ms") for t in ("direct", via))
    d32, i32 = (median(runs[t], 32, "req_per_s") for t in ("direct", via))
    p99 = {t: median(runs[t], 32, "p99_ms") for t in ("direct", via)}
    print(f"{what} c=1 p50: direct {d1:.3f} ms, {via} {i1:.3f} ms, added {i1 - d1:.3f} ms")
    print(f"{what} c=32 req/s: direct {d32:,.0f}, {via} {i32:,.0f} = "
          f"{100 * i32 / d32:.0f}% of direct (p99 {p99['direct']:.2f} -> {p99[via]:.2f} ms)")
    for target, rows in runs.items():
        each = ", ".join(
            f"c={r['concurrency']}: {r['req_per_s']:,.0f} req/s p50 {r['p50_ms']:.3f} ms"
            for r in rows)
        print(f"  {target} runs (in order): {each}")
    print(f"errors: {sum(r.get('errors', 0) for rows in runs.values() for r in rows)}")


def median(rows: list[dict[str, Any]], concurrency: int, key: str) -> float:
    return float(statistics.median(r[key] for r in rows if r["concurrency"] == concurrency))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--grpc", action="store_true", help="also the ingress's gRPC cost")
    parser.add_argument("--skip-zero", action="store_true",
                        help="skip the scale-from-zero trials")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="modelfn-platform-") as tmp:
        work = Path(tmp)
        repo = work / "models"
        shutil.copytree(ROOT / "examples" / "models" / "digits", repo / "digits")
        logs = work / "logs"
        logs.mkdir()
        zero = None if args.skip_zero else scale_from_zero(repo, args.trials, logs)
        runs = ingress(repo, args.duration, logs, work)
        grpc_runs = ingress_grpc(repo, args.duration, logs, work) if args.grpc else None
    if zero is not None:
        cold = zero["client_s"]
        print(f"scale from zero -> first response (client), {len(cold)} trials: median "
              f"{statistics.median(cold):.3f} s, range {min(cold):.3f}-{max(cold):.3f} s")
        print(f"  hold recorded by the plane: median {statistics.median(zero['hold_s']):.3f} "
              f"s; of which the instance's own start to ready: median "
              f"{statistics.median(zero['ready_s']):.3f} s")
    report(runs, "REST")
    if grpc_runs is not None:
        report(grpc_runs, "gRPC")

if __name__ == "__main__":
    main()
