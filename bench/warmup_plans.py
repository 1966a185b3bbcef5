"""What a warmup plan leaves for the first live runs, in-process with modelfn's ORT session.

Each trial is a fresh process (an arena and a heap that have served nothing): it loads the
model with modelfn's backend and session options, runs the plan's batch sizes, then runs
``--size`` rows ``--runs`` times. For every run it prints the CPU time, the minor page faults
and the system time (mostly those faults); a run's penalty is its CPU time over the median
of the last runs, minus one. CPU time, unlike wall time, leaves out the time other processes
took the core, which on a shared machine is most of the noise.

    python bench/warmup_plans.py bench/models/cnn --plans 1,1+64,1+64+64 --size 64 --trials 6

A plan is ``+``-separated batch sizes or ranges (``1+64``: one row, then 64; ``1..64``:
every size). Size 1 is always run first, once more than the plan says, as modelfn's warmup
does to time one row.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path


def _trial(model_dir: Path, plan: list[int], size: int, runs: int,
           threads: str) -> dict[str, object]:
    import numpy as np

    from modelfn.runtime.autocomplete import autocomplete
    from modelfn.runtime.backends.onnxruntime import OnnxRuntimeBackend
    from modelfn.runtime.repository import plan_model
    from modelfn.runtime.warmup import default_batch

    model = plan_model(model_dir)
    base = dataclasses.replace(model.base, parameters={**model.base.parameters,
                                                       "intra_op_thread_count": threads})
    version_dir = next(iter(model.versions.values()))
    backend = OnnxRuntimeBackend(base, version_dir / "model.onnx")
    backend.load()
    config = autocomplete(model.config, name=base.name, signature=backend.signature(),
                          platform=base.platform, default_max_batch_size=8,
                          gpu_available=False)
    backend.config = config

    def run(rows: int) -> list[float]:
        batch = {k: np.full_like(v, 0.5) if v.dtype.kind == "f" else v
                 for k, v in default_batch(config, rows, backend.text_strings).items()}
        before, cpu = resource.getrusage(resource.RUSAGE_SELF), time.process_time()
        backend.run(0, batch)
        cpu, after = time.process_time() - cpu, resource.getrusage(resource.RUSAGE_SELF)
        return [cpu, after.ru_minflt - before.ru_minflt, after.ru_stime - before.ru_stime]

    warm = [run(rows) for rows in [1, *plan]]
    return {"warm": warm, "runs": [run(size) for _ in range(runs)]}


def _sizes(part: str) -> list[int]:
    low, _, high = part.partition("..")
    return list(range(int(low), int(high or low) + 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--plans", default="1,1+64,1+64+64")
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--runs", type=int, default=5, help="at --size, 3 or more")
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--threads", default="1", help="ORT intra-op threads")
    parser.add_argument("--cpus", default=None, help="taskset CPU list for the trials")
    parser.add_argument("--trial", default=None, help=argparse.SUPPRESS)  # one trial, JSON out
    args = parser.parse_args()
    if args.runs < 3:
        parser.error("--runs must be 3 or more: the runs after the second are the steady state")
    if args.trial is not None:
        plan = [size for part in args.trial.split("+") for size in _sizes(part)]
        print(json.dumps(_trial(args.model_dir, plan, args.size, args.runs, args.threads)))
        return
    plans = args.plans.split(",")
    results: dict[str, list[dict[str, list[list[float]]]]] = {p: [] for p in plans}
    for _ in range(args.trials):
        for plan in plans:  # interleaved, so slow spells of the machine hit every plan
            argv = [sys.executable, __file__, str(args.model_dir), "--trial", plan,
                    "--size", str(args.size), "--runs", str(args.runs),
                    "--threads", args.threads]
            if args.cpus is not None:
                argv = ["taskset", "-c", args.cpus, *argv]
            out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
            results[plan].append(json.loads(out))
    print("| plan | warmup CPU s | run | faults | system s | CPU penalty (median, range) |\n"
          "|---|---|---|---|---|---|")
    for plan, trials in results.items():
        warm = statistics.median(sum(r[0] for r in t["warm"]) for t in trials)
        for index in range(min(2, args.runs)):
            penalties = [t["runs"][index][0] / statistics.median(r[0] for r in t["runs"][2:])
                         - 1 for t in trials]
            faults = statistics.median(t["runs"][index][1] for t in trials)
            system = statistics.median(t["runs"][index][2] for t in trials)
            first = (plan, f"{warm:.2f}") if index == 0 else ("", "")
            print(f"| {first[0]} | {first[1]} | {index + 1} | {faults:.0f} | {system:.3f} | "
                  f"{statistics.median(penalties) * 100:+.1f}% ({min(penalties) * 100:+.1f}"
                  f"…{max(penalties) * 100:+.1f}%) |")


if __name__ == "__main__":
    main()
