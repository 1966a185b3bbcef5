"""``modelfn tune`` against the default config and raw onnxruntime, in one run per cell.

For each workload (digits, cnn) and configuration (pinned: the server on one core and the
client on the other; shared: both on every core), in one run:

1. raw in-process onnxruntime (``bench/raw_ort.py``, spinning off and on) on the server's
   cores, each batch size, read before tune and again after step 3: the batch size whose
   readings average the most rows/s is the limit (as in ``bench/run.py``);
2. ``modelfn tune`` (binary tensors) on a repository scaffolded by ``modelfn init``, so the
   "current" config is init's default (max_batch_size 4, one instance, threads = cores);
   it writes the winner with ``--write``;
3. three rounds of raw (at step 1's best batch size and spinning), the default and the
   tuned config, in turn, with longer windows, so the comparison is not the search's
   best-of-many draw; ×raw and ×default are the medians of each round's own ratios, as the
   machine drifts ~10% within minutes.

Both tune and step 3 drive the load with wrk where it is on PATH (pinned to the client's
core in ``pinned``), else with the aiohttp client, which cannot keep up with digits at c=32.

    python bench/tune_figures.py [--workloads digits,cnn] [--modes pinned,shared]
                                 [--time-budget 4m] [--window 5] [--out bench/.work/tune]
                                 [--optimize-for C] [--rows-per-request N [--max-batch M]]

``--rows-per-request N``: every request carries N rows (tune's ``-b N``), and raw also reads
batches of N, 2N, 4N and 8N. init's default, ``max_batch_size`` 4, refuses requests of more
than 4 rows, so the default compared with is then init's config with ``max_batch_size`` N,
the least change that serves them.

Prints markdown rows for bench/RESULTS.md and writes ``figures.json`` in ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from report import mean_best, raw_series

from modelfn.client.wrk import find_wrk
from modelfn.process.supervisor import Process
from modelfn.runtime.config_file import parse_config
from modelfn.tune.candidates import Candidate
from modelfn.tune.measure import ServerMeasure, cpu_split

if TYPE_CHECKING:
    from collections.abc import Callable

ROOT = Path(__file__).resolve().parents[1]
MODELS = {
    "digits": ROOT / "examples" / "models" / "digits" / "1" / "model.onnx",
    "cnn": ROOT / "bench" / "models" / "cnn" / "1" / "model.onnx",
}
LEVELS = (1, 8, 32)


def load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def raw_batches(rows: int) -> str | None:
    """raw_ort.py's batch sizes for requests of ``rows`` rows: its own, and rows x 1..8."""
    if rows == 1:
        return None
    sizes = {1, 2, 4, 8, 16, 32, 64} | {rows * 2**k for k in range(4)}
    return ",".join(map(str, sorted(sizes)))


def raw_run(model: Path, cpus: list[int] | None, threads: int, spinning: str, path: Path,
            batches: str | None = None) -> dict[str, Any]:
    """One ``raw_ort.py`` run on ``cpus``: its result (rows/s per batch size)."""
    argv = [sys.executable, str(ROOT / "bench" / "raw_ort.py"), str(model), "--threads",
            str(threads), "--spinning", spinning, "--duration", "2", "--json", str(path),
            *(["--batches", batches] if batches else [])]
    if cpus is not None:
        argv = ["taskset", "-c", ",".join(map(str, cpus)), *argv]
    subprocess.run(argv, check=True, capture_output=True)
    result: dict[str, Any] = json.loads(path.read_text())
    return result


def raw_readings(model: Path, cpus: list[int] | None, threads: int, out: Path, phase: str,
                 rows: int = 1) -> list[dict[str, Any]]:
    """Raw onnxruntime's rows/s at each batch size, spinning off and on."""
    return [raw_run(model, cpus, threads, spinning, out / f"raw-{phase}-{spinning}.json",
                    raw_batches(rows))
            for spinning in ("off", "on")]


def raw_best(readings: list[dict[str, Any]]) -> dict[str, Any]:
    """The batch size and spinning whose readings average the most rows/s."""
    best: dict[str, Any] = {}
    for (_, _, spinning), by_batch in raw_series(readings).items():
        batch, mean = mean_best(by_batch)
        if mean > best.get("rows_per_s", 0):
            best = {"rows_per_s": mean, "batch": batch, "spinning": "on" if spinning else "off",
                    "readings": by_batch[batch]}
    return best


def scaffold(model: Path, name: str, repo: Path, rows: int = 1) -> Path:
    """``modelfn init``'s repository; with ``max_batch_size`` raised to ``rows`` when its
    default refuses requests of that many rows."""
    subprocess.run([sys.executable, "-m", "modelfn.cli.main", "init", str(model), "--name",
                    name, "--repo", str(repo)], check=True, capture_output=True)
    config = repo / name / "config.pbtxt"
    text = config.read_text()
    default = parse_config(text).max_batch_size
    if 0 < default < rows:
        config.write_text(text.replace(f"max_batch_size: {default}", f"max_batch_size: {rows}"))
    return repo / name


def confirm(default: Path, tuned: Path, server_cpus: list[int] | None,
            client_cpus: list[int] | None, window: float, work: Path,
            raw: Callable[[int], float], rounds: int = 3, rows: int = 1
            ) -> dict[str, list[dict[str, Any]]]:
    """Raw at its best batch size, default and tuned, interleaved ``rounds`` times: every
    round's measurement, each with ``raw_rows_per_s``, raw's reading of that round (this
    machine drifts ~10% within minutes: a round's servers are set against its own raw)."""
    runs: dict[str, list[dict[str, Any]]] = {"default": [], "tuned": []}
    wrk = find_wrk()
    measures = {
        role: ServerMeasure(path, None, work / role, LEVELS, duration=window, warmup=1.0,
                            binary=True, rows_per_request=rows, server_cpus=server_cpus,
                            wrk=wrk, client_cpus=client_cpus)
        for role, path in (("default", default), ("tuned", tuned))
    }
    try:
        for index in range(rounds):
            raw_now = raw(index)
            for role, measure in measures.items():
                m = measure(Candidate(label=role, as_is=True))
                if m.error:
                    raise SystemExit(f"{role}: {m.error}")
                runs[role].append({
                    "config": m.candidate.describe(), "ready_s": m.ready_s,
                    "raw_rows_per_s": raw_now,
                    "rss_mib": (m.rss_bytes or 0) / 2**20, "load": load(),
                    "points": {p.concurrency: {"rows_per_s": p.rows_per_s, "p50_ms": p.p50_ms,
                                               "p99_ms": p.p99_ms, "batch": p.avg_batch,
                                               "busy": p.busy}
                               for p in m.points}})
    finally:
        for measure in measures.values():
            measure.close()
    return runs


def median(runs: list[dict[str, Any]], level: int, key: str) -> float:
    return statistics.median(r["points"][level][key] or 0.0 for r in runs)


def cell(workload: str, mode: str, budget: str, window: float, out: Path,
         optimize_for: int | None = None, rows: int = 1, max_batch: int | None = None
         ) -> dict[str, Any]:
    work = out / f"{workload}-{mode}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    cpus = 1 if mode == "pinned" else None
    server_cpus, client_cpus = cpu_split(cpus)
    threads = 1 if mode == "pinned" else len(os.sched_getaffinity(0))
    started = time.monotonic()
    load_before = load()
    raw_before = raw_readings(MODELS[workload], server_cpus, threads, work, "before", rows)
    default = scaffold(MODELS[workload], workload, work / "default", rows)
    tuned = scaffold(MODELS[workload], workload, work / "tuned")
    argv = [sys.executable, "-m", "modelfn.cli.main", "tune", str(tuned), "--binary",
            "-c", ",".join(map(str, LEVELS)), "--time-budget", budget, "--write",
            "--report", str(work / "report"), *(["--cpus", "1"] if cpus else []),
            *(["--optimize-for", str(optimize_for)] if optimize_for else []),
            *(["-b", str(rows)] if rows > 1 else []),
            *(["--max-batch", str(max_batch)] if max_batch else [])]
    tune_started = time.monotonic()
    # under the supervisor: a Ctrl-C here stops tune with SIGTERM, which it handles like
    # its own Ctrl-C and stops its candidate's server (a SIGKILL would orphan that server)
    tuner = Process(argv, name="modelfn tune", log_path=work / "tune.out")
    with tuner:
        code = tuner.wait()
    if code != 0:
        raise SystemExit(f"modelfn tune failed:\n{tuner.tail()}")
    tune_s = time.monotonic() - tune_started
    before = raw_best(raw_before)

    def raw_round(index: int) -> float:
        run = raw_run(MODELS[workload], server_cpus, threads, before["spinning"],
                      work / f"raw-round-{index}.json", batches=str(before["batch"]))
        return float(run["batches"][0]["rows_per_s"])

    mine = os.sched_getaffinity(0)
    if client_cpus is not None:
        os.sched_setaffinity(0, client_cpus)
    try:
        runs = confirm(default, tuned, server_cpus, client_cpus, window, work, raw_round,
                       rows=rows)
    finally:
        os.sched_setaffinity(0, mine)
    raw = raw_best(raw_before
                   + raw_readings(MODELS[workload], server_cpus, threads, work, "after", rows))
    return {"workload": workload, "mode": mode, "rows_per_request": rows, "raw": raw,
            "runs": runs, "tune_s": tune_s,
            "tuned_config": (tuned / "config.pbtxt").read_text().split("\nname:")[0],
            "load_before": load_before, "load_after": load(),
            "seconds": time.monotonic() - started}


def paired(runs: list[dict[str, Any]], level: int, against: list[float]) -> float:
    """The median over rounds of a round's rows/s at ``level`` over ``against``'s reading
    of the same round."""
    return statistics.median((r["points"][level]["rows_per_s"] or 0.0) / base
                             for r, base in zip(runs, against, strict=True))


def rows(result: dict[str, Any]) -> list[str]:
    """Markdown rows: medians over the rounds; x default and x raw are the medians of each
    round's ratio to the default and to raw read in the same round."""
    lines = []
    default = result["runs"]["default"]
    rows = result.get("rows_per_request", 1)
    workload = result["workload"] + ("" if rows == 1 else f", {rows} rows a request")
    for role in ("default", "tuned"):
        runs = result["runs"][role]
        ready = statistics.median(r["ready_s"] for r in runs)
        raw_each = [r["raw_rows_per_s"] for r in runs]
        for level in LEVELS:
            base_each = [r["points"][level]["rows_per_s"] or 0.0 for r in default]
            lines.append(
                f"| {workload} | {result['mode']} | {role}: {runs[0]['config']} | "
                f"{level} | {median(runs, level, 'rows_per_s'):,.1f} | "
                f"{median(runs, level, 'p50_ms'):.2f} | "
                f"{median(runs, level, 'p99_ms'):.2f} | {median(runs, level, 'batch'):.2f} | "
                f"{median(runs, level, 'busy') * 100:.1f}% | "
                f"{paired(runs, level, base_each):.2f}x | {paired(runs, level, raw_each):.2f}x"
                f" | {ready:.2f} |")
    return lines


def main() -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)  # stoppable when started with &
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default="digits,cnn")
    parser.add_argument("--modes", default="pinned,shared")
    parser.add_argument("--time-budget", default="4m", help="modelfn tune --time-budget")
    parser.add_argument("--window", type=float, default=5.0, help="confirm window, seconds")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / ".work" / "tune")
    parser.add_argument("--optimize-for", type=int, default=None,
                        help="modelfn tune --optimize-for (default: every level)")
    parser.add_argument("--rows-per-request", type=int, default=1,
                        help="rows in each request (modelfn tune -b)")
    parser.add_argument("--max-batch", type=int, default=None, help="modelfn tune --max-batch")
    args = parser.parse_args()
    results = []
    for workload in args.workloads.split(","):
        for mode in args.modes.split(","):
            print(f"== {workload} {mode} (load {load()})", flush=True)
            result = cell(workload, mode, args.time_budget, args.window, args.out,
                          args.optimize_for, args.rows_per_request, args.max_batch)
            results.append(result)
            (args.out / "figures.json").write_text(json.dumps(results, indent=2) + "\n")
            for line in rows(result):
                print(line, flush=True)
            print(f"raw best {result['raw']}; tune took {result['tune_s']:.0f} s; load "
                  f"{result['load_before']} -> {result['load_after']}", flush=True)


if __name__ == "__main__":
    main()
