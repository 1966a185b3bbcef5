"""Warmup: run every shape a live request can bring before the model reports ready.

Without a ``model_warmup`` in the config, modelfn warms every batch size the
batcher can form (1..max_batch_size) on every instance, so no request pays a
first-shape cost (ORT plans memory per shape; TensorRT may pick new tactics).
When that sweep would take longer than ``warmup_budget_s`` (a config
parameter, 10 s by default), it warms the powers of two and the maximum.
A ``model_warmup`` in the config replaces the sweep, with Triton's meaning.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from modelfn.runtime.errors import ConfigError

if TYPE_CHECKING:
    from pathlib import Path

    from modelfn.runtime.backends.base import Backend
    from modelfn.runtime.config import ModelConfig, TensorConfig, Warmup, WarmupInput
    from modelfn.runtime.datatypes import Datatype

log = logging.getLogger("modelfn.warmup")
DEFAULT_BUDGET_S = 10.0


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


def batch_sizes(config: ModelConfig, seconds_at_one: float, budget_s: float) -> list[int]:
    """Every size up to max_batch_size, or powers of two when that would blow the budget."""
    top = config.max_batch_size
    if top <= 1:
        return [1]
    # cost grows about linearly with rows: sum(1..top) * t1
    if seconds_at_one * top * (top + 1) / 2 <= budget_s:
        return list(range(1, top + 1))
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


def _timed(backend: Backend, batch: dict[str, np.ndarray], repeat: int = 3) -> float:
    """The fastest of ``repeat`` runs: the model's cost, not the machine's noise."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        backend.run(0, batch)
        best = min(best, time.perf_counter() - start)
    return best


def warm_up(backend: Backend, config: ModelConfig, version_dir: Path) -> WarmupReport:
    """Run warmup on every instance, then time the largest batch once more, warm."""
    if config.model_warmup:
        batches = []
        for warmup in config.model_warmup:
            batch = configured_batch(config, warmup, version_dir, backend.text_strings)
            for instance in range(backend.instance_count):
                for _ in range(max(1, warmup.count)):
                    backend.run(instance, batch)
            batches.append((warmup.batch_size, batch))
        largest = max(batches, key=lambda b: b[0])[1]
        return WarmupReport([size for size, _ in batches], _timed(backend, largest))
    budget = config.number("warmup_budget_s", DEFAULT_BUDGET_S, low=0, high=3600)
    one = default_batch(config, 1, backend.text_strings)
    for instance in range(backend.instance_count):
        backend.run(instance, one)
    # time a second run: the first includes one-off allocation
    sizes = batch_sizes(config, _timed(backend, one, repeat=1), budget)
    batch = one
    for size in sizes[1:]:
        batch = default_batch(config, size, backend.text_strings)
        for instance in range(backend.instance_count):
            backend.run(instance, batch)
    log.debug("warmed %s on batch sizes %s", config.name, sizes)
    return WarmupReport(sizes, _timed(backend, batch))
