"""The gateway batching for a Lambda route, against the same route forwarded request by request.

    python bench/gateway_batching.py [--cap 4] [--concurrency 32] [--duration 10] [--warmup 3]
                                     [--repeat 2] [--bodies json,binary]
                                     [--gateway-cpus 0] [--client-cpus 1]

One digits function (examples/models/digits) on the local Lambda platform, with reserved
concurrency ``cap``: at most ``cap`` execution environments, one invocation at a time each.
The platform (moto's control plane, the function URL front) runs in this process; the
environments are ``awslambdaric`` processes. Two gateways, each its own process under
``taskset -c GATEWAY_CPUS``, over the same function URL:

- ``batched``: the routing table says ``concurrency`` 1, as ``modelfn deploy --target lambda``
  writes it; the gateway batches, at most ``cap`` batches in flight (``--batch-concurrency``);
- ``forwarded``: the same route with ``concurrency`` 1000, which the gateway forwards as it
  came; the platform runs ``cap`` invocations at once and queues the rest.

Load: ``modelfn bench`` (the repo's closed-loop load generator: aiohttp, bodies serialised
once) under ``taskset -c CLIENT_CPUS``, ``concurrency`` workers, one-row requests built from
the metadata, JSON or binary both ways. The two modes alternate (A B A B) and medians are
reported, with requests per invocation (the platform's count), rows per batch (the gateway's
/metrics) and the gateway's CPU (share of one core, from /proc).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from modelfn.localstack.lambda_platform import LocalLambda
from modelfn.model_store.routes import ModelRoutes, RouteSource, VersionRoute
from modelfn.process.supervisor import Process, free_port, http_probe

ROOT = Path(__file__).resolve().parents[1]
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/digits:1"
MODES = ("forwarded", "batched")


def digits_function(aws: LocalLambda, repo: Path, cap: int) -> tuple[str, str]:
    """A public digits function reserving ``cap`` concurrent executions: name, URL."""
    lam, name = aws.client("lambda"), f"bench-{uuid.uuid4().hex[:8]}"
    role = aws.client("iam").create_role(RoleName=name, AssumeRolePolicyDocument="{}")
    lam.create_function(FunctionName=name, Role=role["Role"]["Arn"], PackageType="Image",
                        Code={"ImageUri": IMAGE}, Timeout=60, MemorySize=2048,
                        Environment={"Variables": {"MODELFN_REPOSITORY": str(repo),
                                                   "MODELFN_LOG_LEVEL": "warning"}})
    lam.get_waiter("function_active_v2").wait(FunctionName=name)
    lam.put_function_concurrency(FunctionName=name, ReservedConcurrentExecutions=cap)
    url = lam.create_function_url_config(FunctionName=name, AuthType="NONE")["FunctionUrl"]
    lam.add_permission(FunctionName=name, StatementId="url", Principal="*",
                       Action="lambda:InvokeFunctionUrl", FunctionUrlAuthType="NONE")
    lam.add_permission(FunctionName=name, StatementId="invoke", Principal="*",
                       Action="lambda:InvokeFunction", InvokedViaFunctionUrl=True)
    return name, str(url)


def gateway(routes_dir: Path, url: str, concurrency: int, cap: int, cpus: str) -> tuple[Process,
                                                                                     str]:
    RouteSource(directory=routes_dir).write(ModelRoutes(
        model="digits", target="lambda", split={1: 100},
        versions={1: VersionRoute(url, max_batch_size=64, concurrency=concurrency)}))
    port = free_port()
    process = Process(["taskset", "-c", cpus, sys.executable, "-m", "modelfn.cli.main",
                       "gateway", "--routes-dir", str(routes_dir), "--host", "127.0.0.1", "--port",
                       str(port), "--batch-concurrency", str(cap), "--log-level", "warning"],
                      name=f"gateway:{port}").start()
    process.wait_ready(http_probe(f"http://127.0.0.1:{port}/v2/health/ready"), timeout=60)
    return process, f"http://127.0.0.1:{port}"


def bench_command(url: str, args: argparse.Namespace, binary: bool, out: Path,
                  duration: float) -> list[str]:
    return ["taskset", "-c", args.client_cpus, sys.executable, "-m", "modelfn.cli.main",
            "bench", url, "-m", "digits", "--version", "1", "-c", str(args.concurrency),
            "--duration", str(duration), "--warmup", str(args.warmup), "--json", str(out),
            *(["--binary"] if binary else [])]


def gateway_counts(url: str) -> tuple[float, float, float]:
    """(requests answered 200, batch rows sum, batch count) from the gateway's /metrics."""
    values = {"requests": 0.0, "rows": 0.0, "batches": 0.0}
    names = {'modelfn_gateway_requests_total{model="digits",version="1",code="200"}': "requests",
             'modelfn_gateway_batch_size_sum{model="digits",version="1"}': "rows",
             'modelfn_gateway_batch_size_count{model="digits",version="1"}': "batches"}
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        key, _, value = line.rpartition(" ")
        if key in names:
            values[names[key]] = float(value)
    return values["requests"], values["rows"], values["batches"]


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(aws: LocalLambda, function: str, gw: tuple[Process, str], args: argparse.Namespace,
            binary: bool, out: Path, duration: float) -> dict[str, Any]:
    process, url = gw
    before_invocations, before = aws.counts(function).invocations, gateway_counts(url)
    argv = bench_command(url, args, binary, out, duration)
    started, cpu = time.monotonic(), cpu_seconds(process.pid)
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"modelfn bench failed: {done.stderr[-2000:]}")
    gateway_cpu = (cpu_seconds(process.pid) - cpu) / (time.monotonic() - started)
    invocations = aws.counts(function).invocations - before_invocations
    after = gateway_counts(url)
    (result,) = json.loads(out.read_text())
    requests = after[0] - before[0]  # warm-up included, as the invocation count is
    result["requests_per_invocation"] = requests / invocations if invocations else None
    batches = after[2] - before[2]
    result["rows_per_batch"] = (after[1] - before[1]) / batches if batches else None
    result["gateway_cpu"] = gateway_cpu  # share of one core, warm-up included
    return dict(result)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cap", type=int, default=4, help="environments; batches in flight")
    parser.add_argument("--concurrency", type=int, default=32, help="closed-loop workers")
    parser.add_argument("--duration", type=float, default=10.0, help="measured window, s")
    parser.add_argument("--warmup", type=float, default=3.0, help="warm-up per window, s")
    parser.add_argument("--repeat", type=int, default=2, help="runs per mode, alternated")
    parser.add_argument("--bodies", default="json,binary", help="json, binary or both")
    parser.add_argument("--gateway-cpus", default="0", help="taskset -c list for the gateways")
    parser.add_argument("--client-cpus", default="1", help="taskset -c list for modelfn bench")
    args = parser.parse_args()
    bodies = [b.strip() for b in args.bodies.split(",") if b.strip()]
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="modelfn-gwbatch-") as tmp, \
            LocalLambda(idle_s=600) as aws:
        work = Path(tmp)
        shutil.copytree(ROOT / "examples" / "models" / "digits", work / "models" / "digits")
        function, url = digits_function(aws, work / "models", args.cap)
        gateways = {mode: gateway(work / mode, url, 1 if mode == "batched" else 1000, args.cap,
                                  args.gateway_cpus) for mode in MODES}
        try:
            for mode, gw in gateways.items():  # cold starts and first use, unmeasured
                measure(aws, function, gw, args, False, work / f"prime-{mode}.json", 2.0)
            for repetition in range(args.repeat):
                for body in bodies:
                    for mode, gw in gateways.items():
                        out = work / f"{mode}-{body}-{repetition}.json"
                        runs.setdefault((mode, body), []).append(
                            measure(aws, function, gw, args, body == "binary", out,
                                    args.duration))
                        time.sleep(0.5)
        finally:
            for process, _ in gateways.values():
                process.stop()
    load_after = os.getloadavg()
    print(f"digits, one row per request, cap {args.cap}, c={args.concurrency}, "
          f"{args.duration:g} s windows after {args.warmup:g} s warm-up, {args.repeat} runs "
          f"per cell (A B A B), medians; load average {load_before[0]:.2f} before, "
          f"{load_after[0]:.2f} after\n")
    print("| body | mode | req/s | p50 ms | p99 ms | requests per invocation | "
          "rows per batch | gateway CPU | errors |")
    print("|---|---|---|---|---|---|---|---|---|")

    def med(rows: list[dict[str, Any]], key: str) -> float | None:
        values = [r[key] for r in rows if r[key] is not None]
        return float(statistics.median(values)) if values else None

    def fmt(value: float | None, digits: int = 2) -> str:
        return "–" if value is None else f"{value:,.{digits}f}"

    for body in bodies:
        for mode in MODES:
            rows = runs[(mode, body)]
            print(f"| {body} | {mode} | {fmt(med(rows, 'req_per_s'), 1)} | "
                  f"{fmt(med(rows, 'p50_ms'))} | {fmt(med(rows, 'p99_ms'))} | "
                  f"{fmt(med(rows, 'requests_per_invocation'))} | "
                  f"{fmt(med(rows, 'rows_per_batch'))} | "
                  f"{100 * (med(rows, 'gateway_cpu') or 0):.0f}% | "
                  f"{sum(r['errors'] for r in rows)} |")
    print()
    for body in bodies:
        forwarded = med(runs[("forwarded", body)], "req_per_s") or 0.0
        batched = med(runs[("batched", body)], "req_per_s") or 0.0
        each = ", ".join(f"{mode} {r['req_per_s']:,.0f}" for repetition in range(args.repeat)
                         for mode in MODES for r in [runs[(mode, body)][repetition]])
        ratio = f"{batched / forwarded:.2f}×" if forwarded else "–"
        print(f"- {body}: batched / forwarded = {ratio} req/s (runs in order: {each})")
    for (mode, body), rows in runs.items():
        for r in rows:
            if r.get("first_error"):
                print(f"- {mode} {body}: {r['errors']} errors; first: {r['first_error']}")


if __name__ == "__main__":
    main()
