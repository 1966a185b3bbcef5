"""What a live request pays the first time its batch size runs, after the server is ready.

Starts ``modelfn serve`` on a repository, reads the cold-start phases from its ``ready:`` log
line, then sends each batch size in turn, one request at a time so that each request is
one batch of exactly that size: a first request, then ``--steady`` more. The server's own
statistics (``/v2/models/M/stats``, ``compute_infer`` of that batch size) time each one, so
HTTP and encoding are left out. The server's CPU time and minor page faults during each
request (from ``/proc``, request handling included) are recorded beside it: CPU time does
not count the time other processes took the core, and the faults show memory touched for
the first time (a request's own body is some of it). The penalty of a size is its first
request's time over the median of the following ones, minus one, for compute time and for
CPU time. Sizes go in a shuffled order (a new order per trial: ``--seed``) and each trial is
a fresh server.

    python bench/warmup_penalty.py --repo bench/models --model cnn \\
        --sizes 1,2,3,5,8,12,17,24,31,33,40,47,56,63,64 --trials 3
    python bench/warmup_penalty.py --repo examples/models --model digits --sizes all

``--serve-cmd`` replaces the server command (``{repo}`` and ``{port}`` are filled in), to
measure another checkout; ``--cpus 0`` pins the server with taskset.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shlex
import signal
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
from harness import HOST, HarnessError, _request, pinned  # noqa: E402

from modelfn.client.bodies import prepare_request, random_inputs  # noqa: E402
from modelfn.client.cpu import CLK_TCK  # noqa: E402
from modelfn.process.supervisor import Process, ProcessFailed, free_port  # noqa: E402

READY = re.compile(r"ready: .*\(cold start (.*)\)")
DEFAULT_SERVE = f"{shlex.quote(sys.executable)} -m modelfn.cli.main serve {{repo}} " \
                f"--host {HOST} --port {{port}}"


@dataclass
class SizeResult:
    size: int
    first_ms: float  # compute_infer of the first request at this size
    steady_ms: list[float]  # ... of the following ones
    first_cpu_ms: float  # the server's CPU time during the request
    steady_cpu_ms: list[float]
    first_faults: int
    steady_faults: list[int]

    @property
    def penalty(self) -> float:
        return self.first_ms / statistics.median(self.steady_ms) - 1

    @property
    def cpu_penalty(self) -> float | None:
        """None below ten clock ticks a request, too coarse to tell 10% apart."""
        steady = statistics.median(self.steady_cpu_ms)
        return self.first_cpu_ms / steady - 1 if steady >= 10_000 / CLK_TCK else None


@dataclass
class Trial:
    launch_to_ready_s: float
    phases: dict[str, float]
    sizes: list[SizeResult] = field(default_factory=list)


def _proc(pid: int) -> tuple[int, float]:
    """Minor page faults and CPU milliseconds of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[7]), (int(fields[11]) + int(fields[12])) * 1000 / CLK_TCK


def _get_json(port: int, path: str) -> Any:
    status, body = _request(port, "GET", path, None, {}, 30.0)
    if status != 200:
        raise HarnessError(f"GET {path}: HTTP {status}: {body[:200]!r}")
    return json.loads(body)


def _compute_ns(port: int, model: str, size: int) -> int:
    (stats,) = _get_json(port, f"/v2/models/{model}/stats")["model_stats"]
    for batch in stats["batch_stats"]:
        if batch["batch_size"] == size:
            return int(batch["compute_infer"]["ns"])
    return 0


def _requests(metadata: dict[str, Any], sizes: list[int]) -> dict[int, Any]:
    one = random_inputs(metadata)
    return {n: prepare_request({k: np.repeat(v, n, axis=0) for k, v in one.items()},
                               binary=True) for n in sizes}


def _wait_ready_line(process: Process, log_path: Path, timeout: float) -> dict[str, float]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        match = READY.search(log_path.read_text(errors="replace"))
        if match:
            return {k: float(v.rstrip("s")) for k, v in
                    (part.split("=") for part in match.group(1).split())}
        if not process.running:
            raise HarnessError(f"server exited: {process.tail(5)}")
        time.sleep(0.02)
    raise HarnessError(f"no ready line within {timeout:g} s: {process.tail(5)}")


def run_trial(args: argparse.Namespace, sizes: list[int], seed: int, log_path: Path) -> Trial:
    port = free_port()
    argv = shlex.split(args.serve_cmd.format(repo=shlex.quote(str(args.repo)), port=port))
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_bytes(b"")
    process = Process(pinned(argv, args.cpus), name="modelfn serve", env=dict(os.environ),
                      log_path=log_path)
    launched = time.perf_counter()
    process.start()
    try:
        process.wait_ready(
            lambda: _request(port, "GET", "/v2/health/ready", None, {}, 5.0)[0] == 200,
            args.timeout)
        trial = Trial(time.perf_counter() - launched,
                      _wait_ready_line(process, log_path, args.timeout))
        requests = _requests(_get_json(port, f"/v2/models/{args.model}"), sizes)
        order = list(sizes)
        random.Random(seed).shuffle(order)
        path = f"/v2/models/{args.model}/infer"
        for n in order:
            request = requests[n]
            times, cpu, faults = [], [], []
            for _ in range(1 + args.steady):
                before_ns = _compute_ns(port, args.model, n)
                before_faults, before_cpu = _proc(process.pid)
                status, body = _request(port, "POST", path, request.body,
                                        dict(request.headers), 600.0)
                after_faults, after_cpu = _proc(process.pid)
                if status != 200:
                    raise HarnessError(f"batch {n}: HTTP {status}: {body[:200]!r}")
                faults.append(after_faults - before_faults)
                cpu.append(after_cpu - before_cpu)
                times.append((_compute_ns(port, args.model, n) - before_ns) / 1e6)
            trial.sizes.append(SizeResult(n, times[0], times[1:], cpu[0], cpu[1:], faults[0],
                                          faults[1:]))
        return trial
    except ProcessFailed as exc:
        raise HarnessError(f"{exc.message}: {process.tail(5)}") from exc
    finally:
        process.stop(grace=10)


def _summary(values: list[float | None]) -> str:
    known = [v for v in values if v is not None]
    if not known:
        return "-"
    return (f"{statistics.median(known) * 100:+.0f}% "
            f"({min(known) * 100:+.0f}…{max(known) * 100:+.0f}%)")


def report(trials: list[Trial]) -> str:
    phases = sorted({k for t in trials for k in t.phases})
    lines = ["| trial | launch → ready s | " + " | ".join(phases) + " |",
             "|---|---|" + "---|" * len(phases)]
    for i, t in enumerate(trials, 1):
        lines.append(f"| {i} | {t.launch_to_ready_s:.2f} | "
                     + " | ".join(f"{t.phases.get(k, 0):.2f}" for k in phases) + " |")
    lines += ["", "| batch | steady ms | first ms | penalty (median, range) | "
                  "CPU penalty (median, range) | faults first / steady |",
              "|---|---|---|---|---|---|"]
    sizes = sorted({s.size for t in trials for s in t.sizes})
    for n in sizes:
        rows = [s for t in trials for s in t.sizes if s.size == n]
        steady = statistics.median(statistics.median(r.steady_ms) for r in rows)
        first = statistics.median(r.first_ms for r in rows)
        lines.append(
            f"| {n} | {steady:.2f} | {first:.2f} | {_summary([r.penalty for r in rows])} | "
            f"{_summary([r.cpu_penalty for r in rows])} | "
            f"{statistics.median(r.first_faults for r in rows):.0f} / "
            f"{statistics.median(f for r in rows for f in r.steady_faults):.0f} |")
    return "\n".join(lines)


def parse_sizes(value: str) -> list[int] | None:
    if value == "all":
        return None
    return sorted({int(v) for v in value.split(",") if v.strip()})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, default=HERE / "models")
    parser.add_argument("--model", required=True)
    parser.add_argument("--sizes", default="all",
                        help="comma-separated batch sizes, or 'all' (1..max_batch_size)")
    parser.add_argument("--steady", type=int, default=3, help="requests after the first")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0, help="of the first trial's order")
    parser.add_argument("--cpus", default=None, help="taskset CPU list for the server")
    parser.add_argument("--serve-cmd", default=DEFAULT_SERVE)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--json", type=Path, default=None, help="also write every measurement")
    parser.add_argument("--log", type=Path, default=HERE / ".work" / "logs" / "warmup.log")
    args = parser.parse_args()
    sizes = parse_sizes(args.sizes)
    if sizes is None:
        config = json.loads(_config_of(args))
        sizes = list(range(1, int(config["max_batch_size"]) + 1))
    # a SIGTERM unwinds like Ctrl-C, so that the server is stopped too
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    trials = []
    for seed in range(args.seed, args.seed + args.trials):
        trials.append(run_trial(args, sizes, seed, args.log))
        print(f"trial {len(trials)}: ready in {trials[-1].launch_to_ready_s:.2f} s "
              f"{trials[-1].phases}", file=sys.stderr)
    print(report(trials))
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(t) for t in trials], indent=1) + "\n")


def _config_of(args: argparse.Namespace) -> str:
    """The served config, from a short-lived server (``--sizes all`` needs max_batch_size)."""
    port = free_port()
    argv = shlex.split(args.serve_cmd.format(repo=shlex.quote(str(args.repo)), port=port))
    process = Process(argv, name="modelfn serve").start()
    try:
        process.wait_ready(
            lambda: _request(port, "GET", "/v2/health/ready", None, {}, 5.0)[0] == 200,
            args.timeout)
        return json.dumps(_get_json(port, f"/v2/models/{args.model}/config"))
    finally:
        process.stop(grace=10)


if __name__ == "__main__":
    main()
