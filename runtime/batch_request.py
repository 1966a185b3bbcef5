"""A request queued in the batcher, and the ``Answer`` a callback caller holds for it."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable

    from modelfn.runtime.batching import Batcher
    from modelfn.runtime.stats import ComputeTimes

log = logging.getLogger("modelfn.batching")

Outputs = dict[str, np.ndarray]


class Answer:
    """The future of a caller that takes its outputs in a callback (the HTTP edge's
    shortcut): ``set_result`` and ``set_exception`` call it on the spot, where an
    ``asyncio.Future`` would schedule a handle for a later turn of the loop. The batcher
    settles it on the loop, never inside ``submit``; its caller gives the callback
    (``then``) after ``submit`` returns. A caller that goes away (its client hung up)
    ``cancel``s it, as a cancelled ``infer`` withdraws its request."""

    __slots__ = ("_batcher", "_callback", "_cancelled", "_outcome", "_request")

    def __init__(self) -> None:
        self._callback: Callable[[Outputs | Exception], None] | None = None
        self._outcome: Outputs | Exception | None = None
        self._cancelled = False
        #: set while queued or running, so ``cancel`` can withdraw it; cleared once settled
        self._batcher: Batcher | None = None
        self._request: Request | None = None

    def done(self) -> bool:
        return self._outcome is not None or self._cancelled

    def cancelled(self) -> bool:
        return self._cancelled

    def set_result(self, outputs: Outputs) -> None:
        self._settle(outputs)

    def set_exception(self, error: Exception) -> None:
        self._settle(error)

    def then(self, callback: Callable[[Outputs | Exception], None]) -> None:
        """Call ``callback`` with the outputs or the failure, once settled."""
        self._callback = callback
        if self._outcome is not None:
            self._call(self._outcome)

    def cancel(self) -> bool:
        """The caller is gone: its request leaves the queue if it is still there, counts
        as CANCELED rather than a success, and the callback is never called. False when
        it was already settled or cancelled."""
        if self.done():
            return False
        self._cancelled = True
        self._callback = None
        batcher, request = self._batcher, self._request
        self._batcher = self._request = None
        if batcher is not None and request is not None:
            batcher._withdraw(request)
        return True

    def _settle(self, outcome: Outputs | Exception) -> None:
        if self._cancelled:
            return  # nobody waits for it
        if self._outcome is not None:
            raise asyncio.InvalidStateError("the answer is already settled")
        self._outcome = outcome
        self._batcher = self._request = None  # the request refers to this answer
        if self._callback is not None:
            self._call(outcome)

    def _call(self, outcome: Outputs | Exception) -> None:
        callback = self._callback
        assert callback is not None
        self._callback = None  # called once; it may refer back to its caller, which keeps this
        try:  # the batch's other callers are answered whatever this one does
            callback(outcome)
        except Exception:
            log.exception("answering a request failed")


@dataclass(frozen=True, slots=True)
class RequestContext:
    """What a request says besides its tensors, for a backend that sees each request of a
    batch (``Backend.per_request``: Triton's Python backend) and for an ensemble's steps:
    its id, its parameters and the outputs it asked for (empty: all). An ensemble's step
    also carries ``times``, where the batcher adds the compute durations of the batch that
    answered it."""

    id: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)
    outputs: tuple[str, ...] = ()
    times: ComputeTimes | None = None


@dataclass(slots=True, eq=False)  # eq=False: queue removal goes by identity
class Request:
    inputs: dict[str, np.ndarray]
    rows: int
    key: Hashable
    future: asyncio.Future[dict[str, np.ndarray]] | Answer
    arrival_ns: int
    deadline_ns: int
    started_ns: int = 0  # 0 while queued
    context: RequestContext | None = None  # only for per-request backends and ensembles
