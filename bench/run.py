"""Run the modelfn benchmark and write its report: one command, all baselines, one run.

    python bench/run.py [--quick] [--workloads digits,cnn] [--config pinned,shared] [--peers]

For each configuration and workload it measures raw onnxruntime (the physical limit) before
and again after the servers (this machine's speed drifts within minutes), then,
repeating the targets in turn (A B A B), starts each server as its own process, times its cold
start (launch to first successful inference), and drives it with a closed-loop client at each
concurrency, with V2 JSON and with the binary tensor extension: wrk (native,
``modelfn.client.wrk``) where it is installed or installable, else the aiohttp generator
(``modelfn.cli.bench``, in its own process); ``--client wrk,aiohttp`` measures each cell with
both. Targets are the naive server, modelfn and the ceiling (a bare HTTP server with a canned
answer, ``ceiling_server.py``); ``modelfn-poll`` is modelfn with ``--busy-poll-us``
(``--busy-poll-us``, default 100).
It records the CPU used by other processes and by the client during each window.

- ``pinned``: server on core 0 (``taskset -c 0``), ORT 1 thread; client on core 1.
- ``shared``: both unpinned, ORT 2 threads.

modelfn is started as ``python -m modelfn.cli.main serve REPO --host 127.0.0.1 --port P``
(``--modelfn-cmd`` changes that). See ``bench/README.md`` for the method.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import peers
import wrk_client
from cells import Cell, measure_aiohttp, measure_wrk
from harness import ColdStart, HarnessError, Server, ServerSpec, pinned, wait_for_quiet
from refs import export_ref
from report import NOISY_CORES, render
from workloads import (
    BENCH,
    CONFIGS,
    PY,
    ROOT,
    WORK,
    Config,
    Workload,
    first_request,
    flushes_denormals,
    make_repo,
    prepare_workloads,
    signature,
)

from modelfn.client.bodies import prepare_request, random_inputs
from modelfn.client.endpoint import infer_url
from modelfn.client.wrk import write_body
from modelfn.process.supervisor import free_port

DEFAULT_MODELFN_CMD = "{python} -m modelfn.cli.main serve {repo} --host 127.0.0.1 --port {port}"


@dataclass
class RunData:
    """Everything measured, in the order measured; rendered by ``report.render``."""

    command: str
    settings: dict[str, Any]
    configs: dict[str, str] = field(default_factory=dict)
    raw: list[dict[str, Any]] = field(default_factory=list)
    starts: list[dict[str, Any]] = field(default_factory=list)
    cells: list[dict[str, Any]] = field(default_factory=list)
    unavailable: dict[str, str] = field(default_factory=dict)
    interrupted: bool = False


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="digits, pinned, c=1,32, 5 s windows")
    p.add_argument("--workloads", help="comma list of digits,cnn (default: both; quick: digits)")
    p.add_argument("--config", help="comma list of pinned,shared (default: both; quick: pinned)")
    p.add_argument(
        "--targets", default="naive,modelfn,ceiling",
        help="comma list of naive,modelfn,modelfn-poll,ceiling",
    )
    p.add_argument(
        "--busy-poll-us", type=int, default=100,
        help="the modelfn-poll target's --busy-poll-us (default 100)",
    )
    p.add_argument(
        "--client",
        default="auto",
        help="comma list of wrk,aiohttp (default auto: wrk, installed with apt-get if missing; "
        "aiohttp when it cannot be)",
    )
    p.add_argument("--concurrency", help="comma list (default 1,8,32; quick 1,32)")
    p.add_argument("--bodies", default="json,binary", help="json, binary or both")
    p.add_argument("--duration", type=float, help="measured window per cell, s (10; quick 5)")
    p.add_argument("--warmup", type=float, help="warm-up per cell, s (2; quick 1)")
    p.add_argument("--repeat", type=int, help="times each target runs, interleaved (2; quick 1)")
    p.add_argument("--retries", type=int, help="re-measure a noisy cell up to N times (1; quick 0)")
    p.add_argument("--raw-duration", type=float, help="seconds per raw ORT batch size (2; 0.5)")
    p.add_argument(
        "--spinning",
        choices=("default", "on", "off"),
        default="default",
        help="ORT intra-op spinning for the servers (default: each server's own default)",
    )
    p.add_argument("--peers", action="store_true", help="also PyTriton and MLServer (venvs)")
    p.add_argument(
        "--compare-ref",
        action="append",
        default=[],
        metavar="REF",
        help="also modelfn as of this git commit or branch (target modelfn@REF), to measure a "
        "change against its base in the same run; may be repeated",
    )
    p.add_argument(
        "--modelfn-cmd",
        default=DEFAULT_MODELFN_CMD,
        help="command template; fields {python} {repo} {model} {port} {threads} {bench}",
    )
    p.add_argument("--out", type=Path, default=WORK / "report.md",
                   help="the report (default bench/.work/report.md; bench/RESULTS.md keeps "
                        "hand-written sections, so copy its tables there rather than write "
                        "over it)")
    args = p.parse_args()
    quick = args.quick
    args.workloads = (args.workloads or ("digits" if quick else "digits,cnn")).split(",")
    args.config = (args.config or ("pinned" if quick else "pinned,shared")).split(",")
    args.targets = args.targets.split(",")
    args.concurrency = [
        int(c) for c in (args.concurrency or ("1,32" if quick else "1,8,32")).split(",")
    ]
    args.bodies = args.bodies.split(",")
    args.client = args.client.split(",")
    args.duration = args.duration or (5.0 if quick else 10.0)
    args.warmup = args.warmup if args.warmup is not None else (1.0 if quick else 2.0)
    args.repeat = args.repeat or (1 if quick else 2)
    args.raw_duration = args.raw_duration or (0.5 if quick else 2.0)
    args.retries = args.retries if args.retries is not None else (0 if quick else 1)
    for name, allowed in (
        ("workloads", ("digits", "cnn")),
        ("config", tuple(CONFIGS)),
        ("targets", ("naive", "modelfn", "modelfn-poll", "ceiling")),
        ("client", ("auto", "wrk", "aiohttp")),
        ("bodies", ("json", "binary")),
    ):
        bad = set(getattr(args, name)) - set(allowed)
        if bad:
            p.error(f"--{name}: unknown {', '.join(sorted(bad))}; choose from {', '.join(allowed)}")
    return args


def choose_clients(requested: list[str], data: RunData) -> tuple[list[str], str | None]:
    """The clients to measure with, and wrk's path when wrk is one of them."""
    if "auto" not in requested and "wrk" not in requested:
        return requested, None
    try:
        wrk = wrk_client.ensure_wrk()
    except wrk_client.WrkUnavailable as exc:
        if "wrk" in requested:
            raise SystemExit(f"bench/run.py: {exc}") from None
        print(f"{exc}\nmeasuring with the aiohttp client instead", flush=True)
        data.unavailable["wrk"] = str(exc)
        return ["aiohttp"], None
    return [("wrk" if c == "auto" else c) for c in dict.fromkeys(requested)], wrk


def server_spec(
    target: str, args: argparse.Namespace, repo: Path, model: str, config: Config
) -> ServerSpec:
    port = free_port()
    if target == "ceiling":
        argv = [PY, str(BENCH / "ceiling_server.py"), str(repo / model / "1" / "model.onnx")]
        argv += ["--model", model, "--host", "127.0.0.1", "--port", str(port)]
        return ServerSpec("ceiling", argv, port)
    if target == "naive":
        argv = [PY, str(BENCH / "naive_server.py"), str(repo), "--model", model]
        argv += ["--host", "127.0.0.1", "--port", str(port), "--threads", str(config.threads)]
        if args.spinning == "off":
            argv.append("--no-spinning")
        return ServerSpec("naive", argv, port)
    fields = {
        "python": PY,
        "repo": str(repo),
        "model": model,
        "port": str(port),
        "threads": str(config.threads),
        "bench": str(BENCH),
    }
    argv = [token.format(**fields) for token in shlex.split(args.modelfn_cmd)]
    if target == "modelfn-poll":
        return ServerSpec(target, [*argv, "--busy-poll-us", str(args.busy_poll_us)], port)
    if target.startswith("modelfn@"):
        tree = export_ref(ROOT, WORK, target.split("@", 1)[1])
        return ServerSpec(target, argv, port, env={"PYTHONPATH": str(tree)})
    return ServerSpec("modelfn", argv, port)


def run_raw(data: RunData, args: argparse.Namespace, workload: Workload, config: Config,
            phase: str) -> None:
    """Raw onnxruntime on the server's cores, ``phase`` "before" or "after" the servers."""
    for spinning in ("off", "on"):
        out = WORK / "raw.json"
        argv = [PY, str(BENCH / "raw_ort.py"), str(workload.source / "1" / "model.onnx")]
        argv += ["--threads", str(config.threads), "--spinning", spinning]
        argv += ["--duration", str(args.raw_duration), "--json", str(out)]
        if flushes_denormals(workload.source):
            argv.append("--flush-denormal-weights")  # the weights modelfn runs
        print(f"[{config.name}/{workload.name}] raw onnxruntime {phase} the servers, "
              f"spinning {spinning}", flush=True)
        proc = subprocess.run(pinned(argv, config.server_cpus), capture_output=True, text=True)
        if proc.returncode != 0:
            data.unavailable[f"raw/{workload.name}"] = proc.stderr.strip()[-300:]
            continue
        result = json.loads(out.read_text())
        data.raw.append({"config": config.name, "workload": workload.name, "phase": phase,
                         **result})
        print(f"    best {result['best_rows_per_s']:,.0f} rows/s at batch {result['best_batch']}")


def run_cells(
    data: RunData,
    args: argparse.Namespace,
    server: Server,
    workload: Workload,
    config: Config,
    rep: int,
) -> None:
    warmup = args.warmup * workload.warmup_scale
    for body in args.bodies:
        if body == "binary" and not server.spec.binary:
            continue
        for concurrency in args.concurrency:
            for client in args.clients:
                cell_args = (args, server, workload, config, body, concurrency, rep, warmup)
                # A window that other processes disturbed is noise: run it again, keep the
                # quietest.
                attempts = [measure_cell(*cell_args, client)]
                while (attempts[-1]["foreign_cores"] > NOISY_CORES
                       and len(attempts) <= args.retries):
                    print("    (noisy window, measuring again)", flush=True)
                    attempts.append(measure_cell(*cell_args, client))
                cell = min(attempts, key=lambda a: ("result" not in a, a["foreign_cores"]))
                cell["attempts"] = len(attempts)
                data.cells.append(cell)


def measure_cell(
    args: argparse.Namespace,
    server: Server,
    workload: Workload,
    config: Config,
    body: str,
    concurrency: int,
    rep: int,
    warmup: float,
    client: str,
) -> dict[str, Any]:
    spec = server.spec
    quiet = wait_for_quiet(server, max_wait=3.0 if args.quick else 10.0)
    cell: dict[str, Any] = {
        "config": config.name,
        "workload": workload.name,
        "target": spec.target,
        "body": body,
        "concurrency": concurrency,
        "client": client,
        "rep": rep,
        "foreign_cores": 0.0,  # measured over the window, below
        "foreign_before": quiet,
    }
    load = Cell(workload.name, body, concurrency, args.duration, warmup, config.client_cpus)
    try:
        if client == "wrk":
            assert args.wrk is not None
            r = measure_wrk(args.wrk, server, load, wrk_body(workload, body), cell)
        else:
            r = measure_aiohttp(server, load, WORK / "cell.json", cell)
        cell["result"] = r
    except (RuntimeError, ValueError, subprocess.TimeoutExpired) as exc:
        cell["error"] = str(exc).strip()[-300:]
        print(f"    {spec.target} {body} c={concurrency} {client}: failed: {cell['error']}",
              flush=True)
        return cell
    cpu = r.get("client_cpu")
    print(
        f"    {spec.target:8} {body:6} c={concurrency:<3} {client:7} {r['req_per_s']:9,.1f} req/s"
        f"  p50 {r['p50_ms'] or 0:7.3f} ms  p99 {r['p99_ms'] or 0:7.2f} ms"
        f"  batch {r['avg_batch_size'] or float('nan'):5.2f}  errors {r['errors']}"
        f"  server {r.get('server_cpu_us') or float('nan'):5.1f} µs/req"
        f"  client {cpu * 100 if cpu is not None else float('nan'):3.0f}%"
        f"  foreign {cell['foreign_cores'] * 100:3.0f}%",
        flush=True,
    )
    return cell


_BODIES: dict[tuple[str, str], list[str]] = {}


def wrk_body(workload: Workload, body: str) -> list[str]:
    """The Lua script's arguments for this workload's request, written once per run."""
    key = (workload.name, body)
    if key not in _BODIES:
        request = prepare_request(
            random_inputs({"inputs": signature(workload.source / "1" / "model.onnx")}),
            binary=body == "binary",
        )
        _BODIES[key] = write_body(request, WORK / "bodies" / f"{workload.name}.{body}")
    return _BODIES[key]


def run_target(
    data: RunData,
    args: argparse.Namespace,
    spec: ServerSpec,
    workload: Workload,
    config: Config,
    rep: int,
) -> None:
    label = f"[{config.name}/{workload.name}] {spec.target} (rep {rep + 1})"
    print(f"{label}: starting", flush=True)
    path = infer_url("", workload.name)
    body, headers = first_request(workload.source / "1" / "model.onnx")
    log = WORK / "logs" / f"{spec.target}-{config.name}-{workload.name}-{rep}.log"
    start: dict[str, Any] = {
        "config": config.name,
        "workload": workload.name,
        "target": spec.target,
        "rep": rep,
    }
    with Server(spec, config.server_cpus, log) as server:
        try:
            cold: ColdStart = server.wait_cold_start(path, body, headers)
        except HarnessError as exc:
            start["error"] = str(exc)[-300:]
            data.starts.append(start)
            data.unavailable[f"{spec.target}/{workload.name}/{config.name}"] = start["error"]
            print(f"{label}: unavailable: {start['error']}", flush=True)
            return
        start.update(asdict(cold))
        data.starts.append(start)
        print(
            f"{label}: ready {cold.ready_s:.2f} s, first inference {cold.first_inference_s:.2f} s"
        )
        run_cells(data, args, server, workload, config, rep)


def machine_info() -> dict[str, str]:
    import platform
    from importlib.metadata import PackageNotFoundError, version

    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    info = {
        "cpu": cpu,
        "cores": str(os.cpu_count()),
        "kernel": platform.release(),
        "python": platform.python_version(),
    }
    for package in ("modelfn", "onnxruntime", "numpy", "fastapi", "uvicorn", "aiohttp", "orjson"):
        try:
            info[package] = version(package)
        except PackageNotFoundError:
            info[package] = "not installed"
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    info["commit"] = (commit or "unknown") + (" (with uncommitted changes)" if dirty else "")
    return info


def command_line() -> str:
    """The command as typed, with this checkout's location left out."""
    words = ["python", "bench/run.py", *sys.argv[1:]]
    return " ".join(shlex.quote(w.replace(f"{ROOT}/", "").replace(str(ROOT), ".")) for w in words)


def main() -> None:
    args = parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    settings = {
        "started": started,
        "duration": args.duration,
        "warmup": args.warmup,
        "repeat": args.repeat,
        "concurrency": args.concurrency,
        "bodies": args.bodies,
        "spinning": args.spinning,
        "raw_duration": args.raw_duration,
        "retries": args.retries,
        "load_start": [round(v, 2) for v in os.getloadavg()],
        "machine": machine_info(),
    }
    data = RunData(command_line(), settings)
    args.clients, args.wrk = choose_clients(args.client, data)
    settings["clients"] = args.clients
    workloads = prepare_workloads(args.workloads)
    peer_list = [peers.prepare(name, WORK) for name in peers.PEERS] if args.peers else []
    for peer in peer_list:
        if peer.bin_dir is None:
            data.unavailable[peer.name] = peer.reason
    all_cpus = os.sched_getaffinity(0)
    t0 = time.perf_counter()
    try:
        for config in (CONFIGS[name] for name in args.config):
            data.configs[config.name] = config.description
            # The harness itself (polling, bookkeeping) stays off the server's core.
            os.sched_setaffinity(0, {int(config.client_cpus)} if config.client_cpus else all_cpus)
            for workload in workloads.values():
                run_raw(data, args, workload, config, "before")
                repo = make_repo(workload, config, args.spinning)
                for rep in range(args.repeat):
                    targets = [*args.targets, *(f"modelfn@{ref}" for ref in args.compare_ref)]
                    specs = [server_spec(t, args, repo, workload.name, config) for t in targets]
                    model_path = repo / workload.name / "1" / "model.onnx"
                    for peer in peer_list:
                        if peer.bin_dir is not None:
                            port = free_port()
                            specs.append(
                                peers.server_spec(
                                    peer,
                                    model_path,
                                    workload.name,
                                    signature(model_path),
                                    port,
                                    config.threads,
                                    WORK,
                                )
                            )
                    for spec in specs:
                        run_target(data, args, spec, workload, config, rep)
                run_raw(data, args, workload, config, "after")
    except KeyboardInterrupt:
        data.interrupted = True
        print("interrupted: writing what was measured", flush=True)
    finally:
        os.sched_setaffinity(0, all_cpus)
        data.settings["elapsed_s"] = round(time.perf_counter() - t0)
        data.settings["load_end"] = [round(v, 2) for v in os.getloadavg()]
        (WORK / "results.json").write_text(json.dumps(asdict(data), indent=2) + "\n")
        args.out.write_text(render(data))
        print(
            f"wrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}"
            f" in {data.settings['elapsed_s']} s"
        )


if __name__ == "__main__":
    main()
