"""The physical limit: in-process onnxruntime, back-to-back ``session.run`` per batch size.

For each batch size (1, 2, 4, ..., 64 by default) the same input is run for a fixed time and the
rows per second are reported; the best of them is what no server on this machine can beat.

    python bench/raw_ort.py MODEL.onnx [--threads 1] [--spinning on|off] [--duration 2]
                            [--batches 1,2,4,8,16,32,64] [--flush-denormal-weights]
                            [--json out.json]

``--flush-denormal-weights`` runs the model with its denormal weights zeroed, as modelfn
does for a config with the ``flush_denormal_weights`` parameter; ``bench/run.py`` passes it
when the workload's config has it, so raw and modelfn run the same weights.

Pin it like the server under test (``taskset -c 0``) so the comparison holds.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from modelfn.runtime.backends import denormals

NUMPY_BY_ONNX = {
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
    "tensor(float16)": np.float16,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8,
    "tensor(bool)": np.bool_,
}
DEFAULT_BATCHES = (1, 2, 4, 8, 16, 32, 64)


@dataclass(frozen=True, slots=True)
class BatchResult:
    batch: int
    runs: int
    seconds: float
    rows_per_s: float
    ms_per_run: float


@dataclass(frozen=True, slots=True)
class RawResult:
    model: str
    threads: int
    spinning: bool
    batches: list[BatchResult]

    @property
    def best(self) -> BatchResult:
        return max(self.batches, key=lambda b: b.rows_per_s)

    def to_json(self) -> dict[str, object]:
        return {
            **asdict(self),
            "best_rows_per_s": self.best.rows_per_s,
            "best_batch": self.best.batch,
        }


def make_session(path: Path, threads: int, spinning: bool,
                 flush: bool = False) -> tuple[ort.InferenceSession, list[ort.OrtValue]]:
    """The session, and the flushed weights it reads (``add_initializer`` keeps no copy:
    they must outlive it)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    values = denormals.add_flushed(options, path)[1] if flush else []
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]), values


def feeds(session: ort.InferenceSession, batch: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs: the first (dynamic) dimension is ``batch``, other dynamic ones are 1."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for arg in session.get_inputs():
        dims = [d if isinstance(d, int) else 1 for d in arg.shape]
        shape = (batch, *dims[1:])
        dtype = NUMPY_BY_ONNX[arg.type]
        if np.issubdtype(dtype, np.floating):
            out[arg.name] = rng.random(shape).astype(dtype)
        else:
            out[arg.name] = rng.integers(0, 2, shape).astype(dtype)
    return out


def measure(
    path: Path,
    *,
    threads: int = 1,
    spinning: bool = True,
    duration: float = 2.0,
    batches: tuple[int, ...] = DEFAULT_BATCHES,
    flush: bool = False,
) -> RawResult:
    session, _weights = make_session(path, threads, spinning, flush)
    results = []
    for batch in batches:
        inputs = feeds(session, batch)
        session.run(None, inputs)  # first-shape cost outside the window
        runs = 0
        start = time.perf_counter()
        deadline = start + duration
        now = start
        while now < deadline:
            session.run(None, inputs)
            runs += 1
            now = time.perf_counter()
        seconds = now - start
        results.append(
            BatchResult(batch, runs, seconds, runs * batch / seconds, seconds / runs * 1e3)
        )
    return RawResult(path.parent.parent.name, threads, spinning, results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path, help="path to model.onnx")
    parser.add_argument("--threads", type=int, default=1, help="intra_op_num_threads")
    parser.add_argument("--spinning", choices=("on", "off"), default="on")
    parser.add_argument("--duration", type=float, default=2.0, help="seconds per batch size")
    parser.add_argument(
        "--batches", default=",".join(map(str, DEFAULT_BATCHES)), help="comma-separated sizes"
    )
    parser.add_argument("--flush-denormal-weights", action="store_true",
                        help="zero the model's denormal weights, as modelfn's parameter does")
    parser.add_argument("--json", type=Path, default=None, help="write the result here")
    args = parser.parse_args()
    result = measure(
        args.model,
        threads=args.threads,
        spinning=args.spinning == "on",
        duration=args.duration,
        batches=tuple(int(b) for b in args.batches.split(",")),
        flush=args.flush_denormal_weights,
    )
    print(f"{result.model}: threads={result.threads} spinning={args.spinning}")
    for b in result.batches:
        print(f"  batch {b.batch:>3}: {b.rows_per_s:>12,.0f} rows/s  {b.ms_per_run:8.3f} ms/run")
    print(f"  best: {result.best.rows_per_s:,.0f} rows/s at batch {result.best.batch}")
    if args.json:
        args.json.write_text(json.dumps(result.to_json(), indent=2) + "\n")


if __name__ == "__main__":
    main()
