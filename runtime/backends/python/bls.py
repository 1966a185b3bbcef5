"""Business logic scripting, the server's side: a Python model's
``pb_utils.InferenceRequest(...).exec()`` runs another model of the same repository through
that model's own batcher, on the server's event loop, as a client's request would.

The inputs are checked against the called model's config as the V2 codec checks a client's
(names, datatypes, shapes), and shaped the way its backend takes them; the outputs come back
in the config's shapes, BYTES as object arrays of ``bytes``, only the requested ones when
some are named. A failure is the caller's error response (``InferenceResponse.has_error``),
as Triton gives it, never an exception in the worker.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import numpy as np

from modelfn.runtime.batch_request import RequestContext
from modelfn.runtime.errors import InvalidInput

if TYPE_CHECKING:
    from concurrent.futures import Future

    from modelfn.runtime.backends.base import ModelLookup
    from modelfn.runtime.config import ModelConfig

#: a BLS request as the worker sends it
Request = tuple[str, int, dict[str, np.ndarray], tuple[str, ...], str, dict[str, Any], int]


def schedule(models: ModelLookup, loop: asyncio.AbstractEventLoop, request: Request
             ) -> Future[dict[str, np.ndarray]]:
    """Start ``request`` on ``loop`` from another thread: the future of its outputs."""
    return asyncio.run_coroutine_threadsafe(call(models, request), loop)


async def call(models: ModelLookup, request: Request) -> dict[str, np.ndarray]:
    name, version, inputs, wanted, request_id, parameters, timeout_us = request
    target = models.get(name, None if version < 0 else str(version))
    config = target.config
    unknown = [o for o in wanted if config.output(o) is None]
    if unknown:
        raise InvalidInput(f"model '{name}' has no output '{unknown[0]}'")
    arrays, rows = _inputs(config, inputs, target.text_strings)
    context = (RequestContext(request_id, parameters, tuple(wanted))
               if target.wants_context else None)
    outputs = await target.infer(arrays, rows, timeout_us or None, context)
    lead = (rows,) if config.batching else ()
    answer: dict[str, np.ndarray] = {}
    for output in config.outputs:
        array = outputs.get(output.name)
        if array is None or (wanted and output.name not in wanted):
            continue
        if output.reshape is not None:
            array = array.reshape((*lead, *output.dims))
        answer[output.name] = _as_bytes(array) if output.datatype.is_bytes else array
    return answer


def _inputs(config: ModelConfig, inputs: dict[str, np.ndarray], text: bool
            ) -> tuple[dict[str, np.ndarray], int]:
    """The inputs as the called model's backend takes them, and the request's rows."""
    model = config.name
    for name in inputs:
        if config.input(name) is None:
            raise InvalidInput(f"model '{model}' has no input '{name}'")
    missing = [t.name for t in config.inputs if not t.optional and t.name not in inputs]
    if missing:
        raise InvalidInput(f"model '{model}': input '{missing[0]}' is missing")
    rows: int | None = None
    arrays: dict[str, np.ndarray] = {}
    for tensor in config.inputs:
        array = inputs.get(tensor.name)
        if array is None:
            continue
        array = np.asarray(array)
        where = f"model '{model}' input '{tensor.name}'"
        if tensor.datatype.is_bytes:
            if array.dtype.kind not in "OSU":
                raise InvalidInput(f"{where} is {array.dtype}, but TYPE_STRING takes bytes")
            array = _as_text(array) if text else _as_bytes(array)
        elif array.dtype != tensor.datatype.numpy:
            raise InvalidInput(f"{where} is {array.dtype}, but the model takes "
                               f"{tensor.datatype.config}")
        lead: tuple[int, ...] = ()
        if config.batching:
            if array.ndim == 0:
                raise InvalidInput(f"{where} needs a batch dimension")
            if rows is not None and array.shape[0] != rows:
                raise InvalidInput(f"{where} has {array.shape[0]} rows, another input {rows}")
            rows, lead = array.shape[0], array.shape[:1]
        shape = array.shape[len(lead):]
        if len(shape) != len(tensor.dims) or any(
                d not in (-1, n) for n, d in zip(shape, tensor.dims, strict=True)):
            raise InvalidInput(f"{where} has shape {list(array.shape)}, but the model takes "
                               f"{[*([-1] if lead else []), *tensor.dims]}")
        if tensor.reshape is not None:
            array = array.reshape((*lead, *tensor.reshape))
        arrays[tensor.name] = array
    return arrays, 1 if rows is None else rows


def _as_bytes(array: np.ndarray) -> np.ndarray:
    if array.dtype == np.object_ and all(isinstance(s, bytes) for s in array.flat):
        return array
    flat = [s.encode() if isinstance(s, str) else bytes(s) for s in array.ravel().tolist()]
    return np.array(flat, dtype=object).reshape(array.shape)


def _as_text(array: np.ndarray) -> np.ndarray:
    try:
        flat = [s.decode() if isinstance(s, bytes) else str(s) for s in array.ravel().tolist()]
    except UnicodeDecodeError:
        raise InvalidInput("a string input of the called model is not UTF-8 text") from None
    return np.array(flat, dtype=object).reshape(array.shape)
