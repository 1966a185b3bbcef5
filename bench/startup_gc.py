"""Time the cyclic garbage collector spends during a function's start-up, with the
collector on and with ``handlers.startup.paused_collector`` (off, then frozen).

    python bench/startup_gc.py [--runs 3] [REPOSITORY]

Each run is a fresh interpreter that imports the serve path and loads REPOSITORY
(default: examples/models) under gc callbacks, alternating the two modes. Prints the
start-up time, the time inside the collector and the collections per generation.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import contextlib, gc, sys, time
from pathlib import Path
spent, count, began = [0.0], [0, 0, 0], [0.0]
def watch(phase, info):
    if phase == "start":
        began[0] = time.perf_counter()
    else:
        spent[0] += time.perf_counter() - began[0]
        count[info["generation"]] += 1
gc.callbacks.append(watch)
started = time.perf_counter()
if sys.argv[1] == "paused":
    from modelfn.handlers.startup import paused_collector
    context = paused_collector()
else:
    context = contextlib.nullcontext()
with context:
    from modelfn.handlers.boot import open_function_repository
    from modelfn.handlers.http import run
    open_function_repository(Path(sys.argv[2]), None)
total = time.perf_counter() - started
print(f"{sys.argv[1]:<6} start-up {total * 1000:6.0f} ms, in the collector "
      f"{spent[0] * 1000:5.1f} ms, collections per generation {count}")
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repository", nargs="?", default=str(ROOT / "examples" / "models"))
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    for _ in range(args.runs):
        for mode in ("on", "paused"):
            done = subprocess.run([sys.executable, "-c", CHILD, mode, args.repository],
                                  capture_output=True, text=True, check=True)
            print(done.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
