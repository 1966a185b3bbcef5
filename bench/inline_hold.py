"""On one core, batches on the event loop against batches handed to the worker thread.

digits served pinned to core 0 (wrk on core 1, binary tensors, c=32) with requests of N rows,
under two configs that differ only in ``inline_max_us``: the old one-CPU default (100 µs,
the handoff's cost: the MLP's batches over ~20 rows went to the worker thread) and the
current default (5,000 µs, the longest a batch may hold the loop: all of them run on it).
The two are measured in turn, ``--rounds`` times, each round with raw onnxruntime at the
batch of N rows read just before it, so the machine's drift cancels out of the ratios.
foreign is the CPU other processes used during a reading, in % of a core (tune's own
measure): a reading with much of it was disturbed.

    python bench/inline_hold.py [--rows 1,64,256] [--rounds 3] [--window 5]

Prints a markdown table for bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
from pathlib import Path

from tune_figures import MODELS, raw_run, scaffold

from modelfn.client.wrk import find_wrk
from modelfn.runtime.config_file import parse_config
from modelfn.tune.candidates import Candidate
from modelfn.tune.measure import ServerMeasure

CONFIGS = {"handoff (inline_max_us 100)": "100", "hold (default)": None}
CONCURRENCY = 32


def repository(work: Path, rows: int, inline_max_us: str | None) -> Path:
    """init's digits config with ``max_batch_size`` 64 or ``rows``, whichever is more (32
    one-row clients form batches of ~16-32), and ``inline_max_us`` when given."""
    model = scaffold(MODELS["digits"], "digits", work, max(64, rows))
    config = model / "config.pbtxt"
    if inline_max_us is not None:
        config.write_text(config.read_text() + "parameters { key: \"inline_max_us\" value: "
                          f"{{ string_value: \"{inline_max_us}\" }} }}\n")
    parse_config(config.read_text())  # still a valid config
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="1,64,256", help="rows per request, comma list")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window", type=float, default=5.0, help="seconds per reading")
    args = parser.parse_args()
    wrk = find_wrk()
    if wrk is None:
        raise SystemExit("wrk is not on PATH (Debian: apt-get install wrk)")
    print("| rows a request | config | rows/s (each round) | ×raw (median) | p50 ms | p99 ms "
          "| in model | foreign (each round) |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="inline-hold-") as tmp:
        work = Path(tmp)
        for rows in map(int, args.rows.split(",")):
            readings: dict[str, list[tuple[float, float, float, float, float, float]]] = {
                name: [] for name in CONFIGS}
            measures = {
                name: ServerMeasure(repository(work / f"{rows}-{index}", rows, value), None,
                                    work / f"{rows}-{index}-runs", (CONCURRENCY,),
                                    duration=args.window, warmup=1.0, binary=True,
                                    rows_per_request=rows, server_cpus=[0], wrk=wrk,
                                    client_cpus=[1])
                for index, (name, value) in enumerate(CONFIGS.items())}
            try:
                for index in range(args.rounds):
                    raw = raw_run(MODELS["digits"], [0], 1, "on",
                                  work / f"raw-{rows}-{index}.json", batches=str(rows))
                    raw_rows = float(raw["batches"][0]["rows_per_s"])
                    for name, measure in measures.items():
                        m = measure(Candidate(label=name, as_is=True))
                        point = m.at(CONCURRENCY)
                        if m.error or point is None or point.errors:
                            raise SystemExit(f"{name}, {rows} rows: {m.error or point}")
                        readings[name].append((point.rows_per_s, raw_rows, point.p50_ms or 0,
                                               point.p99_ms or 0, point.busy or 0,
                                               m.foreign_cores or 0))
            finally:
                for measure in measures.values():
                    measure.close()
            for name, runs in readings.items():
                each = " / ".join(f"{r[0]:,.0f}" for r in runs)
                ratio = statistics.median(r[0] / r[1] for r in runs)
                print(f"| {rows} | {name} | {each} | {ratio:.2f}× | "
                      f"{statistics.median(r[2] for r in runs):.2f} | "
                      f"{statistics.median(r[3] for r in runs):.2f} | "
                      f"{statistics.median(r[4] for r in runs) * 100:.0f}% | "
                      + " / ".join(f"{r[5] * 100:.0f}%" for r in runs) + " |", flush=True)
            shutil.rmtree(work / f"{rows}-0", ignore_errors=True)


if __name__ == "__main__":
    main()
