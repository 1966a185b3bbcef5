"""A batch put together and taken apart: the requests' inputs concatenated (padded to the
size the backend runs), the outputs split back per request as views, and a batch's
failure copied for each of its callers."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from modelfn.runtime.errors import BackendError

if TYPE_CHECKING:
    from modelfn.runtime.batch_request import Request


def padded_batch(parts: list[np.ndarray], size: int) -> np.ndarray:
    """``parts`` one after another along the first dimension in a batch of ``size`` rows,
    the rest zeros (empty strings for BYTES): one copy of each part, none of the whole."""
    first = parts[0]
    batch = np.empty((size, *first.shape[1:]), dtype=first.dtype)
    rows = 0
    for part in parts:
        batch[rows:rows + len(part)] = part
        rows += len(part)
    batch[rows:] = "" if first.dtype == object else 0
    return batch


def padded_size(padded_sizes: tuple[int, ...], rows: int) -> int:
    """The padded size a batch of ``rows`` runs at when that is more, else 0."""
    size = next((n for n in padded_sizes if n >= rows), rows)
    return size if size > rows else 0


def concatenate(batch: list[Request], padded_sizes: tuple[int, ...]) -> dict[str, np.ndarray]:
    """The batch's inputs, each request's rows in order; padded with zeros (empty
    strings) to the rows the backend runs it at, when that is more."""
    if padded_sizes:
        size = padded_size(padded_sizes, sum(request.rows for request in batch))
        if size:
            return {name: padded_batch([request.inputs[name] for request in batch], size)
                    for name in batch[0].inputs}
    if len(batch) == 1:
        return batch[0].inputs
    return {
        name: np.concatenate([request.inputs[name] for request in batch])
        for name in batch[0].inputs
    }


def split(
    outputs: dict[str, np.ndarray], batch: list[Request], model: str, max_batch_size: int,
    padded_sizes: tuple[int, ...],
) -> list[dict[str, np.ndarray]]:
    """Each request's rows of every output, as views."""
    if not max_batch_size:
        return [outputs]
    rows = sum(request.rows for request in batch)
    size = padded_size(padded_sizes, rows) if padded_sizes else 0
    if size:  # a padded batch answers for its padding too
        outputs = {name: array[:rows] if array.shape[:1] == (size,) else array
                   for name, array in outputs.items()}
    for name, array in outputs.items():
        if array.shape[:1] != (rows,):
            raise BackendError(
                f"model '{model}' returned output '{name}' with shape "
                f"{list(array.shape)}, but a batch of {rows} rows must give {rows} rows "
                "along the first dimension"
            )
    if len(batch) == 1:
        return [outputs]
    results = []
    start = 0
    for request in batch:
        stop = start + request.rows
        results.append({name: array[start:stop] for name, array in outputs.items()})
        start = stop
    return results


def per_caller(error: Exception) -> Exception:
    """A copy of ``error`` for one caller of a failed batch, built without calling its
    ``__init__`` (``copy.copy`` would call it with the message alone, which most
    ``ModelfnError`` classes do not take)."""
    clone = type(error).__new__(type(error))
    clone.args = error.args
    clone.__dict__.update(error.__dict__)
    return clone
