"""What checking the local cache costs a warm cold start, for digits and the CNN.

A pinned version already in the cache is served without a request to the store; before
it is, every cached file is checked against what was installed. This times ``fetch`` of
such a version (the whole of that cold-start phase) with the default check (a ``stat``
per file, re-hashing only a changed file) and with ``MODELFN_CACHE_VERIFY=full`` (every
file re-hashed), and the re-hash after a file changed.

    python bench/cache_check.py [--repeat 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import make_cnn  # noqa: E402

from modelfn.model_store import FileSystemStore  # noqa: E402


def timed(store: FileSystemStore, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        store.fetch("model", 1)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        models = {"digits": HERE.parent / "examples" / "models" / "digits",
                  "cnn": make_cnn.write(root / "cnn-src").parent.parent}
        print("| model | files | bytes | stat check (default) | full re-hash | after a change |")
        print("|---|---|---|---|---|---|")
        for name, source in models.items():
            local = root / "src" / name / "model"
            (local / "1").mkdir(parents=True)
            onnx = next(source.rglob("model.onnx"))
            (local / "1" / "model.onnx").write_bytes(onnx.read_bytes())
            (local / "config.pbtxt").write_text('name: "model"\nplatform: "onnxruntime_onnx"\n')
            store = FileSystemStore(root / "store" / name, cache_dir=root / "cache" / name)
            store.push(local)
            path = store.fetch("model", 1)
            size = (path / "model" / "1" / "model.onnx").stat().st_size
            os.environ.pop("MODELFN_CACHE_VERIFY", None)
            stat_ms = timed(store, args.repeat)
            os.environ["MODELFN_CACHE_VERIFY"] = "full"
            full_ms = timed(store, args.repeat)
            os.environ.pop("MODELFN_CACHE_VERIFY")
            changes = []
            for _ in range(5):
                os.utime(path / "model" / "1" / "model.onnx")  # ctime moves: re-hash once
                start = time.perf_counter()
                store.fetch("model", 1)
                changes.append(time.perf_counter() - start)
            print(f"| {name} | 2 | {size / 2**20:.2f} MiB | {stat_ms:.3f} ms | {full_ms:.2f} ms |"
                  f" {statistics.median(changes) * 1000:.2f} ms |")


if __name__ == "__main__":
    main()
