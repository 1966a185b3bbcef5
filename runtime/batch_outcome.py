"""A batch's outcome settled: each caller's outputs or failure, and the batch's statistics.

A batch either failed as a whole (an exception: each caller gets a ``BackendError`` with
its message, or, where the run's errors are the callers' own (an upstream's status, a
Python model's code), a copy of it) or answered each request: outputs, or, from a
per-request run, the exception that fails that request alone.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from modelfn.runtime.batch_assembly import per_caller
from modelfn.runtime.errors import BackendError, ModelfnError

if TYPE_CHECKING:
    from modelfn.runtime.batch_request import Request
    from modelfn.runtime.stats import ModelStats

Outcome = list[dict[str, np.ndarray]] | list[dict[str, np.ndarray] | Exception] | Exception
#: the batch's compute input, infer and output durations, ns
Timings = tuple[int, int, int]

_now = time.perf_counter_ns


def settle(batch: list[Request], outcome: Outcome, timings: Timings, stats: ModelStats, *,
           keep_errors: bool, per_request: bool) -> None:
    """Resolve the batch's futures and record its stats. ``keep_errors``: a failure that is
    a ``ModelfnError`` reaches each caller as it is (its status code), not as a
    ``BackendError``."""
    now = _now()
    if isinstance(outcome, Exception):
        message = outcome.message if isinstance(outcome, ModelfnError) else str(outcome)
        keep = keep_errors and isinstance(outcome, ModelfnError)
        for request in batch:
            if not request.future.cancelled():
                if keep:
                    error: Exception = per_caller(outcome)
                else:
                    error = BackendError(message or type(outcome).__name__)
                    error.__cause__ = outcome
                stats.record_failure("BACKEND", now - request.arrival_ns)
                request.future.set_exception(error)
        return
    ran = [request for request, outputs in zip(batch, outcome, strict=True)
           if not isinstance(outputs, Exception)] if per_request else batch
    stats.record_execution(sum(request.rows for request in ran), len(ran), *timings)
    for request, outputs in zip(batch, outcome, strict=True):
        if request.future.cancelled():  # a cancelled caller counted itself
            continue
        if isinstance(outputs, Exception):  # a per-request run failed this one alone
            stats.record_failure("BACKEND", now - request.arrival_ns)
            request.future.set_exception(outputs)
            continue
        # counted first: an Answer's callback runs inside set_result, and one
        # whose outputs cannot be encoded takes this success back
        stats.record_success(now - request.arrival_ns, request.started_ns - request.arrival_ns)
        context = request.context
        if context is not None and context.times is not None:  # an ensemble's step
            context.times.add(*timings)
        request.future.set_result(outputs)
