"""Denormal weights: found, counted, and flushed to zero for ONNX Runtime.

A denormal (subnormal) float is nonzero and smaller in magnitude than the type's smallest
normal number (1.18e-38 for FP32). x86 CPUs compute with one through a microcode assist
that costs about a hundred cycles, so a weight matrix that holds a few of them makes every
GEMM over it slow. Training with L2 regularisation leaves them behind: scikit-learn's MLP
that ``examples/make_digits.py`` converts has 314 of its 6,464 weights denormal, and
onnxruntime runs a batch of it several times slower than with those weights zero
(``bench/RESULTS.md``).

Flushing them changes a product ``w·x`` by less than ``1.2e-38·|x|``, which a sum of normal
numbers rarely feels: the digits model answers all 1,797 digits bit for bit the same at every
batch size from 1 to 64, and uniform random inputs all but a few rows the same, those
within rounding of a probability, no label changed (``bench/RESULTS.md``). It is still a change
to the user's
weights, so it is a config parameter (``flush_denormal_weights``), off by default, which
``modelfn init`` suggests when it finds denormal weights.

The weights are replaced, not the CPU's mode: onnxruntime's own
``session.set_denormal_as_zero`` sets flush-to-zero on the thread that creates the session
and on every thread that thread later starts, which would silently flush the inputs and
outputs of every other model in the process.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from modelfn.runtime.backends.onnx_weights import float_weights

if TYPE_CHECKING:
    from pathlib import Path

    import onnxruntime as ort


@dataclass(frozen=True)
class Flushed:
    """The initializers of a model that held denormals, each with its denormals zeroed."""

    arrays: dict[str, np.ndarray]
    #: denormal values found, over all of them
    count: int


def _denormal(array: np.ndarray) -> np.ndarray:
    """Where ``array`` (float) holds a denormal: nonzero, below the smallest normal."""
    magnitude = np.abs(array)
    found: np.ndarray = (magnitude < np.finfo(array.dtype).tiny) & (magnitude != 0)
    return found


def count(path: Path, *, external: bool = True) -> int:
    """How many FP32 and FP64 weights of the ONNX model at ``path`` are denormal;
    ``external``: counting those kept in external data files too."""
    return sum(int(_denormal(array).sum()) for _, array in float_weights(path, external=external))


def flushed(path: Path) -> Flushed:
    """Copies of the float initializers of the ONNX model at ``path`` that hold denormals,
    with those zeroed (``onnx_weights.WeightsError`` when the file cannot be taken apart)."""
    arrays: dict[str, np.ndarray] = {}
    total = 0
    for name, array in float_weights(path):
        mask = _denormal(array)
        found = int(mask.sum())
        if found:
            arrays[name] = np.where(mask, array.dtype.type(0), array)
            total += found
    return Flushed(arrays, total)


def add_flushed(options: ort.SessionOptions, path: Path) -> tuple[Flushed, list[ort.OrtValue]]:
    """Give every session made with ``options`` the model's float weights with their
    denormals zeroed (``add_initializer``); what was flushed, and the values, which
    onnxruntime does not copy: they must outlive those sessions."""
    import onnxruntime as ort

    found = flushed(path)
    values = []
    for name, array in found.arrays.items():
        value = ort.OrtValue.ortvalue_from_numpy(array)
        options.add_initializer(name, value)
        values.append(value)
    return found, values
