"""What a change of batch size costs one onnxruntime CUDA session, per cuDNN algorithm search.

    python bench/cuda_shapes.py [--search EXHAUSTIVE,HEURISTIC,DEFAULT]

Needs a GPU and onnxruntime-gpu. For each ``cudnn_conv_algo_search`` a session of the CNN
(``make_cnn.py``) is created and every batch size from 1 to 32 is run once (so each shape
has been seen), then the mean time per run is printed for a steady batch of 16, for 16 and
15 alternating, for 13 to 19 in turn, and for 1 and 32 alternating, fed from host memory
through IO binding as modelfn feeds it. A steady shape against a changing one is why
modelfn pads GPU batches to a few sizes (``padded_batch_sizes``).
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

import make_cnn
import numpy as np
import onnxruntime as ort

PATTERNS: dict[str, list[int]] = {
    "steady 16": [16] * 20,
    "16 and 15": [16, 15] * 10,
    "13 to 19": list(range(13, 20)) * 3,
    "1 and 32": [1, 32] * 8,
}


def run(session: ort.InferenceSession, batch: np.ndarray) -> None:
    binding = session.io_binding()
    binding.bind_cpu_input("input", batch)
    binding.bind_output("logits", "cpu")
    session.run_with_iobinding(binding)
    binding.copy_outputs_to_cpu()


def ms_per_run(session: ort.InferenceSession, batches: dict[int, np.ndarray],
               sizes: list[int]) -> float:
    start = time.perf_counter()
    for size in sizes:
        run(session, batches[size])
    return (time.perf_counter() - start) / len(sizes) * 1e3


def _in_thread(found: list[float], session: ort.InferenceSession,
               batches: dict[int, np.ndarray], sizes: list[int]) -> None:
    found.append(ms_per_run(session, batches, sizes))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--search", default="EXHAUSTIVE,HEURISTIC,DEFAULT")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    batches = {b: rng.standard_normal((b, 3, 224, 224), dtype=np.float32) for b in range(1, 33)}
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "cnn.onnx"
        model.write_bytes(make_cnn.build().SerializeToString())
        for search in args.search.split(","):
            options = ort.SessionOptions()
            options.log_severity_level = 3
            start = time.perf_counter()
            session = ort.InferenceSession(str(model), options, providers=[
                ("CUDAExecutionProvider", {"cudnn_conv_algo_search": search}),
                "CPUExecutionProvider"])
            for size in range(1, 33):
                run(session, batches[size])
            print(f"{search}: session and a run of each size 1..32 in "
                  f"{time.perf_counter() - start:.1f} s")
            for name, sizes in PATTERNS.items():
                print(f"  {name:10s} {ms_per_run(session, batches, sizes):7.2f} ms per run")
            found: list[float] = []
            worker = threading.Thread(target=_in_thread,
                                      args=(found, session, batches, PATTERNS["16 and 15"]))
            worker.start()
            worker.join()
            print(f"  16 and 15 from another thread {found[0]:7.2f} ms per run")


if __name__ == "__main__":
    main()
