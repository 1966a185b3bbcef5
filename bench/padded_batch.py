"""What building a padded batch costs the host, per batch: concatenating the requests and
then padding the batch (two copies, as modelfn did before the batcher padded), against the
batcher's ``padded_batch`` (one copy of each request into the padded batch).

    python bench/padded_batch.py [--requests 16] [--size 32] [--shape 3,224,224] [--rounds 300]

The default is what the CNN's c=32 cell on a GPU batches: 16 one-image requests of 602 KB,
padded to 32 rows (``padded_batch_sizes`` 1,32). A host-bound GPU server pays this on the
path of every batch. No GPU needed: the copies are host memory.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from modelfn.runtime.batch_assembly import padded_batch


def two_copies(requests: list[np.ndarray], size: int) -> np.ndarray:
    batch = np.concatenate(requests)
    if size <= len(batch):
        return batch
    grown = np.empty((size, *batch.shape[1:]), dtype=batch.dtype)
    grown[:len(batch)] = batch
    grown[len(batch):] = 0
    return grown


def per_batch_ms(build: object, requests: list[np.ndarray], size: int, rounds: int) -> float:
    assert callable(build)
    started = time.perf_counter()
    for _ in range(rounds):
        build(requests, size)
    return (time.perf_counter() - started) / rounds * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--shape", default="3,224,224")
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    shape = tuple(int(n) for n in args.shape.split(","))
    rng = np.random.default_rng(0)
    requests = [rng.random((1, *shape), dtype=np.float32) for _ in range(args.requests)]
    np.testing.assert_array_equal(two_copies(requests, args.size),
                                  padded_batch(requests, args.size))
    mb = sum(r.nbytes for r in requests) / 1e6
    print(f"{args.requests} requests of {mb / args.requests:.3f} MB, padded to {args.size} rows")
    for _ in range(args.repeat):  # interleaved, so a slow moment of the machine hits both
        before = per_batch_ms(two_copies, requests, args.size, args.rounds)
        after = per_batch_ms(padded_batch, requests, args.size, args.rounds)
        print(f"concatenate, then pad: {before:.2f} ms   padded_batch: {after:.2f} ms   "
              f"({after / before:.2f}x)")


if __name__ == "__main__":
    main()
