"""Warmup: run the shapes a live request can bring before the model reports ready.

A ``model_warmup`` in the config is run as Triton runs it, on every instance, and a sample
that fails is the model's load failure, named with the model and the sample. A backend
served as Triton's Python backend is (``per_request``) gets each sample as ``batch_size``
requests of one row through ``run_requests``, as Triton hands its ``execute`` a sample.

Backends whose ``implicit_warmup`` is True (ONNX Runtime, TensorRT) are also warmed by
modelfn itself when the config asks for no ``model_warmup``: to pay first-run costs before
traffic, and to time batches for ``inline_rows``. modelfn times one row, then picks the plan
(``warmup_plan``): every batch size 1..max_batch_size when that sweep fits
``warmup_budget_s`` (a config parameter), which is what a tiny model needs, since a new
shape's fixed cost is a large share of its compute. Otherwise it depends on what a new
shape costs the backend. On ONNX Runtime's CPU provider that is memory: the first run at
a size allocates and first touches its intermediates, and smaller sizes reuse the arena the
largest batch grew, so the smallest and the largest batch are enough. What is left, some
memory the first large requests still touch, is within a few percent of their compute
(bench/warmup_penalty.py and bench/warmup_plans.py measure it; bench/RESULTS.md has it).
Backends that tune kernels per shape (cuDNN's algorithm search, TensorRT) get the powers
of two and the maximum. This implicit warmup sends zeros and empty strings, which a model
may refuse (Triton's ``simple_string`` casts its strings to numbers): its failure is one
warning, and the model serves without batch timings (every batch on a worker thread).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from modelfn.runtime.errors import BackendError, ConfigError, ModelfnError
from modelfn.runtime.hardware import usable_cpus
from modelfn.runtime.warmup_data import configured_batch, default_batch, timing_batch

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    import numpy as np

    from modelfn.runtime.backends.base import Backend
    from modelfn.runtime.config import ModelConfig, Warmup

    Run = Callable[[int, dict[str, np.ndarray]], object]

log = logging.getLogger("modelfn.warmup")
#: seconds the full sweep may take when warming the largest batch covers every size
DEFAULT_BUDGET_S = 1.0
#: ... and when the backend tunes per shape, so that skipped sizes pay a first-run cost
DEFAULT_BUDGET_TUNED_S = 10.0
#: a batch slower than this is not timed again: its warmup run's time is close enough
#: for what it decides (which batches run inline, which needs microseconds)
RETIME_BELOW_S = 0.01


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



def _timed(run: Run, batch: dict[str, np.ndarray], repeat: int = 3) -> float:
    """The fastest of ``repeat`` runs: the model's cost, not the machine's noise."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        run(0, batch)
        best = min(best, time.perf_counter() - start)
    return best


def _run_all(run: Run, instances: int, batch: dict[str, np.ndarray], count: int = 1
             ) -> float:
    """Run ``batch`` ``count`` times on every instance; the last run's seconds."""
    seconds = 0.0
    for instance in range(instances):
        for _ in range(count):
            start = time.perf_counter()
            run(instance, batch)
            seconds = time.perf_counter() - start
    return seconds


def _run_s(run: Run, batch: Callable[[], dict[str, np.ndarray]], warm_run_s: float) -> float:
    """What a warmed batch costs: ``batch()`` timed again (best of three) when it is cheap,
    else its last warmup run's time, an over-estimate by at most its first-run cost. The
    batch is only built when it is timed: for a large model it is tens of megabytes."""
    return _timed(run, batch()) if warm_run_s < RETIME_BELOW_S else warm_run_s


def _runner(backend: Backend, requests: int) -> Run:
    """How a warmup batch runs: ``run`` for a backend that takes batches; for a
    ``per_request`` one, ``requests`` requests of one row each (Triton's ``batch_size``
    requests of a sample) through ``run_requests``, the first failure raised."""
    if not backend.per_request:
        return backend.run

    def run_requests(instance: int, batch: dict[str, np.ndarray]) -> object:
        if backend.config.batching:
            rows = [{k: v[i:i + 1] for k, v in batch.items()} for i in range(requests)]
        else:
            rows = [batch] * requests
        for outcome in backend.run_requests(instance, [(row, None) for row in rows]):
            if isinstance(outcome, Exception):
                raise outcome
        return None

    return run_requests


def _sample_failed(config: ModelConfig, warmup: Warmup, exc: Exception) -> ModelfnError:
    """A ``model_warmup`` sample's failure as the model's load failure, naming both: a
    config error (its data) stays one, anything the model raised is a ``BackendError``."""
    what = f"model '{config.name}' model_warmup '{warmup.name}'"
    if isinstance(exc, ConfigError):
        return ConfigError(f"{what}: {exc.message}", path=config.source or None)
    detail = exc.message if isinstance(exc, ModelfnError) else f"{type(exc).__name__}: {exc}"
    return BackendError(f"{what} failed: {detail}")


def _configured(backend: Backend, config: ModelConfig, version_dir: Path
                ) -> WarmupReport | None:
    """Run every ``model_warmup`` sample ``count`` times on every instance; then time the
    largest and the smallest again, unless the backend runs only what Triton runs (no
    ``implicit_warmup``: None)."""
    text = backend.text_strings
    largest: tuple[int, Run, dict[str, np.ndarray], float] | None = None
    smallest: tuple[int, Run, dict[str, np.ndarray], float] | None = None
    for warmup in config.model_warmup:
        try:
            batch = configured_batch(config, warmup, version_dir, text)
            run = _runner(backend, warmup.batch_size)
            seconds = _run_all(run, backend.instance_count, batch, max(1, warmup.count))
        except Exception as exc:
            raise _sample_failed(config, warmup, exc) from exc
        if largest is None or warmup.batch_size > largest[0]:
            largest = (warmup.batch_size, run, batch, seconds)
        if smallest is None or warmup.batch_size < smallest[0]:
            smallest = (warmup.batch_size, run, batch, seconds)
    assert largest is not None and smallest is not None
    if not backend.implicit_warmup:
        return None
    sizes = [w.batch_size for w in config.model_warmup]
    large, small = largest[2], smallest[2]
    return WarmupReport(sizes, _run_s(largest[1], lambda: large, largest[3]),
                        (smallest[0], _run_s(smallest[1], lambda: small, smallest[3])))


def _implicit(backend: Backend, config: ModelConfig, budget: float) -> WarmupReport:
    """modelfn's own warmup: zeros at the batch sizes ``warmup_plan`` picks, timed."""
    text, run, instances = backend.text_strings, backend.run, backend.instance_count
    covers = backend.warms_by_largest
    batch = default_batch(config, 1, text)
    _run_all(run, instances, batch)  # the first run of a session includes one-off setup
    seconds = _timed(run, batch, repeat=1)
    one_row = (1, _run_s(run, lambda: timing_batch(config, 1, text), seconds))
    sizes = warmup_plan(config.max_batch_size, seconds, budget, largest_covers=covers)
    for size in sizes[1:]:
        batch = default_batch(config, size, text)
        seconds = _run_all(run, instances, batch)
    log.debug("warmed %s on batch sizes %s", config.name, sizes)
    largest_s = (_run_s(run, lambda: timing_batch(config, sizes[-1], text), seconds)
                 if len(sizes) > 1 else one_row[1])
    return WarmupReport(sizes, largest_s, one_row)


def warm_up(backend: Backend, config: ModelConfig, version_dir: Path) -> WarmupReport | None:
    """Warm every instance up; the batch sizes warmed and what they cost, or None when
    nothing timed them (no ``model_warmup`` and no implicit warmup, or a failed one).
    A failing ``model_warmup`` sample raises; a failing implicit warmup is a warning."""
    if config.model_warmup:
        return _configured(backend, config, version_dir)
    if not backend.implicit_warmup:
        return None
    budget = config.number("warmup_budget_s", DEFAULT_BUDGET_S if backend.warms_by_largest
                           else DEFAULT_BUDGET_TUNED_S, low=0, high=3600)
    try:
        return _implicit(backend, config, budget)
    except Exception as exc:
        reason = exc.message if isinstance(exc, ModelfnError) else f"{type(exc).__name__}: {exc}"
        log.warning("model %s: modelfn's own warmup (zeros and empty strings at each batch "
                    "size; the config has no model_warmup) failed, so it serves without batch "
                    "timings, every batch on a worker thread: %s", config.name, reason)
        return None


#: on one CPU, the longest a batch may hold the event loop: a handoff to the worker thread
#: buys no parallelism there and costs two context switches, so only a longer batch is handed
#: off (the loop then still answers probes and parses while it runs; figures in bench/RESULTS.md)
INLINE_HOLD_US_ONE_CPU = 5000.0
#: with more CPUs, what handing a batch to a worker thread and back costs
HANDOFF_US_MANY_CPUS = 15.0


def inline_rows(config: ModelConfig, backend: Backend, warmup: WarmupReport | None) -> int:
    """The largest batch, in rows, that runs on the event loop itself rather than on a
    worker thread: one whose run is estimated to take at most ``inline_max_us``.
    0: every batch goes to the thread, as it does when no warmup timed the batches
    (``warmup`` None).

    On one CPU the handoff is two context switches and a GIL transfer a batch, and buys
    nothing: the loop cannot parse while the worker computes, they share the
    core. So every batch up to INLINE_HOLD_US_ONE_CPU runs inline, and only a longer one is
    handed off, for the loop to go on answering probes and parsing while it runs. With
    more CPUs the worker computes while the loop parses, and the handoff is cheaper: only
    batches cheaper than it stay inline (the figures: bench/RESULTS.md). A batch's cost is
    taken as linear in its rows
    between the smallest and the largest warmed batch. A single instance only: instances
    run in parallel.
    """
    default = INLINE_HOLD_US_ONE_CPU if usable_cpus() == 1 else HANDOFF_US_MANY_CPUS
    limit_s = config.number("inline_max_us", default, low=0, high=1e6) / 1e6
    if backend.instance_count != 1 or warmup is None:
        return 0
    if warmup.largest_run_s <= limit_s:
        return max(1, config.max_batch_size)
    small, small_s = warmup.smallest_run
    large = max(warmup.sizes)
    if small_s > limit_s or large <= small:
        return 0
    per_row_s = (warmup.largest_run_s - small_s) / (large - small)
    return small + int((limit_s - small_s) / per_row_s)
