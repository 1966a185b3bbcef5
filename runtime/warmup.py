"""Warmup: run the shapes a live request can bring before the model reports ready.

Without a ``model_warmup`` in the config, modelfn times one row, then picks the plan
(``warmup_plan``): every batch size 1..max_batch_size when that sweep fits
``warmup_budget_s`` (a config parameter), which is what a tiny model needs, since a new
shape's fixed cost is a large share of its compute. Otherwise it depends on what a new
shape costs the backend. On ONNX Runtime's CPU provider that is memory: the first run at
a size allocates and first touches its intermediates, and smaller sizes reuse the arena the
largest batch grew, so the smallest and the largest batch are enough. What is left, some
memory the first large requests still touch, is within a few percent of their compute
(bench/warmup_penalty.py and bench/warmup_plans.py measure it; bench/RESULTS.md has it).
Backends that tune kernels per shape (cuDNN's algorithm search, TensorRT) get the powers
of two and the maximum. A ``model_warmup`` in the config replaces the plan, with Triton's
meaning.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from modelfn.runtime.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from modelfn.runtime.backends.base import Backend
    from modelfn.runtime.config import ModelConfig, TensorConfig, Warmup, WarmupInput
    from modelfn.runtime.datatypes import Datatype

log = logging.getLogger("modelfn.warmup")
#: seconds the full sweep may take when warming the largest batch covers every size
DEFAULT_BUDGET_S = 1.0
#: ... and when the backend tunes per shape, so that skipped sizes pay a first-run cost
DEFAULT_BUDGET_TUNED_S = 10.0
#: a batch slower than this is not timed again: its warmup run's time is close enough
#: for what it decides (which batches run inline, which needs microseconds)
RETIME_BELOW_S = 0.01


def _zeros(datatype: Datatype, shape: tuple[int, ...], text: bool) -> np.ndarray:
    if datatype.is_bytes:
        return np.full(shape, "" if text else b"", dtype=object)
    return np.zeros(shape, dtype=datatype.numpy)


def _random(datatype: Datatype, shape: tuple[int, ...], rng: np.random.Generator,
            text: bool) -> np.ndarray:
    if datatype.is_bytes:
        return np.full(shape, "warmup" if text else b"warmup", dtype=object)
    if datatype.numpy.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    if datatype.numpy.kind in "iu":
        return rng.integers(0, 100, size=shape).astype(datatype.numpy)
    return rng.random(size=shape).astype(datatype.numpy)


def _static(dims: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(1 if d < 0 else d for d in dims)


def _model_shape(tensor: TensorConfig) -> tuple[int, ...]:
    """The shape the backend sees for one row: reshape wins over dims."""
    return _static(tensor.reshape if tensor.reshape is not None else tensor.dims)


def default_batch(config: ModelConfig, rows: int, text: bool = False) -> dict[str, np.ndarray]:
    """Zeros for every required input (empty strings for BYTES, ``str`` when ``text``)."""
    lead = (rows,) if config.batching else ()
    return {
        t.name: _zeros(t.datatype, lead + _model_shape(t), text)
        for t in config.inputs
        if not t.optional
    }


def timing_batch(config: ModelConfig, rows: int, text: bool = False) -> dict[str, np.ndarray]:
    """``default_batch`` with random floating-point inputs: what a batch costs with values
    like a request's (a model may run much faster on zeros: bench/RESULTS.md). Other inputs stay
    zeros, which are in range for any index or id an integer input may be."""
    rng = np.random.default_rng(0)
    lead = (rows,) if config.batching else ()
    batch = {}
    for t in config.inputs:
        if not t.optional:
            shape = lead + _model_shape(t)
            floats = t.datatype.numpy.kind == "f"
            batch[t.name] = (_random(t.datatype, shape, rng, text) if floats
                             else _zeros(t.datatype, shape, text))
    return batch


def _file_data(spec: WarmupInput, shape: tuple[int, ...], version_dir: Path,
               text: bool) -> np.ndarray:
    path = version_dir.parent / "warmup" / spec.input_data_file
    if not path.is_file():
        raise ConfigError(f"model_warmup input_data_file '{spec.input_data_file}' not found "
                          f"(looked for {path.parent.name}/{path.name})")
    raw = path.read_bytes()
    if spec.datatype.is_bytes:
        if not text:
            return np.full(shape, raw, dtype=object)
        try:
            return np.full(shape, raw.decode(), dtype=object)
        except UnicodeDecodeError:
            raise ConfigError(f"model_warmup file '{spec.input_data_file}' is not UTF-8 text, "
                              "which the model's string input needs") from None
    count = int(np.prod(shape))
    need = count * spec.datatype.size
    if len(raw) < need:
        raise ConfigError(f"model_warmup file '{spec.input_data_file}' has {len(raw)} bytes, "
                          f"{need} needed")
    return np.frombuffer(raw[:need], dtype=spec.datatype.numpy).reshape(shape)


def configured_batch(config: ModelConfig, warmup: Warmup, version_dir: Path,
                     text: bool = False) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    lead = (warmup.batch_size,) if config.batching else ()
    batch: dict[str, np.ndarray] = {}
    for name, spec in warmup.inputs.items():
        shape = lead + _static(spec.dims)
        if spec.data == "input_data_file":
            batch[name] = _file_data(spec, shape, version_dir, text)
        elif spec.data == "random_data":
            batch[name] = _random(spec.datatype, shape, rng, text)
        else:
            batch[name] = _zeros(spec.datatype, shape, text)
    return batch


def warmup_plan(max_batch_size: int, seconds_at_one: float, budget_s: float, *,
                largest_covers: bool) -> list[int]:
    """The batch sizes to warm, smallest first.

    Every size when the sweep is estimated (cost about linear in rows: sum(1..max) times
    one row's time) to fit ``budget_s``. Otherwise, when ``largest_covers`` (a new size
    costs only memory the largest batch has already touched), the smallest and the
    largest; else the powers of two and the largest.
    """
    top = max_batch_size
    if top <= 1:
        return [1]
    if seconds_at_one * top * (top + 1) / 2 <= budget_s:
        return list(range(1, top + 1))
    if largest_covers:
        return [1, top]
    sizes, size = [], 1
    while size < top:
        sizes.append(size)
        size *= 2
    return [*sizes, top]


@dataclass(frozen=True)
class WarmupReport:
    #: the batch sizes warmed (or each configured warmup's batch size)
    sizes: list[int]
    #: seconds one run of the largest warmed batch took once warm
    largest_run_s: float
    #: the smallest warmed batch size, and seconds one run of it took once warm
    smallest_run: tuple[int, float]


def _timed(backend: Backend, batch: dict[str, np.ndarray], repeat: int = 3) -> float:
    """The fastest of ``repeat`` runs: the model's cost, not the machine's noise."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        backend.run(0, batch)
        best = min(best, time.perf_counter() - start)
    return best


def _run_all(backend: Backend, batch: dict[str, np.ndarray], count: int = 1) -> float:
    """Run ``batch`` ``count`` times on every instance; the last run's seconds."""
    seconds = 0.0
    for instance in range(backend.instance_count):
        for _ in range(count):
            start = time.perf_counter()
            backend.run(instance, batch)
            seconds = time.perf_counter() - start
    return seconds


def _run_s(backend: Backend, batch: Callable[[], dict[str, np.ndarray]],
           warm_run_s: float) -> float:
    """What a warmed batch costs: ``batch()`` timed again (best of three) when it is cheap,
    else its last warmup run's time, an over-estimate by at most its first-run cost. The
    batch is only built when it is timed: for a large model it is tens of megabytes."""
    return _timed(backend, batch()) if warm_run_s < RETIME_BELOW_S else warm_run_s


def warm_up(backend: Backend, config: ModelConfig, version_dir: Path) -> WarmupReport:
    """Run warmup on every instance; report the sizes and what the largest costs."""
    text = backend.text_strings
    if config.model_warmup:
        largest: tuple[int, dict[str, np.ndarray], float] | None = None
        smallest: tuple[int, dict[str, np.ndarray], float] | None = None
        for warmup in config.model_warmup:
            batch = configured_batch(config, warmup, version_dir, text)
            seconds = _run_all(backend, batch, max(1, warmup.count))
            if largest is None or warmup.batch_size > largest[0]:
                largest = (warmup.batch_size, batch, seconds)
            if smallest is None or warmup.batch_size < smallest[0]:
                smallest = (warmup.batch_size, batch, seconds)
        assert largest is not None and smallest is not None
        sizes = [w.batch_size for w in config.model_warmup]
        large, small = largest[1], smallest[1]
        return WarmupReport(sizes, _run_s(backend, lambda: large, largest[2]),
                            (smallest[0], _run_s(backend, lambda: small, smallest[2])))
    covers = backend.warms_by_largest
    budget = config.number("warmup_budget_s",
                           DEFAULT_BUDGET_S if covers else DEFAULT_BUDGET_TUNED_S,
                           low=0, high=3600)
    batch = default_batch(config, 1, text)
    _run_all(backend, batch)  # the first run of a session includes one-off setup
    seconds = _timed(backend, batch, repeat=1)
    one_row = (1, _run_s(backend, lambda: timing_batch(config, 1, text), seconds))
    sizes = warmup_plan(config.max_batch_size, seconds, budget, largest_covers=covers)
    for size in sizes[1:]:
        batch = default_batch(config, size, text)
        seconds = _run_all(backend, batch)
    log.debug("warmed %s on batch sizes %s", config.name, sizes)
    largest_s = (_run_s(backend, lambda: timing_batch(config, sizes[-1], text), seconds)
                 if len(sizes) > 1 else one_row[1])
    return WarmupReport(sizes, largest_s, one_row)
