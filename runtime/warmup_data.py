"""The inputs warmup runs: zeros, random values, or a ``model_warmup`` sample's own data.

A ``model_warmup`` sample describes one request row (``dims``, without the batch dimension)
and is repeated ``batch_size`` times, as Triton sends ``batch_size`` copies of it. Its
``input_data_file`` (in the model directory's ``warmup/`` folder) holds that row's data as
Triton documents it: raw little-endian tensor bytes in row-major order, and for a BYTES
(``TYPE_STRING``) input each element as a 4-byte little-endian length followed by its bytes.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

import numpy as np

from modelfn.runtime.errors import ConfigError

if TYPE_CHECKING:
    from pathlib import Path

    from modelfn.runtime.config import ModelConfig, TensorConfig, Warmup, WarmupInput
    from modelfn.runtime.datatypes import Datatype

_LENGTH = struct.Struct("<I")


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


def bytes_elements(raw: bytes, what: str) -> list[bytes]:
    """The elements of serialized BYTES data: each a 4-byte little-endian length, then that
    many bytes. A length that runs past the end is refused, naming the element."""
    elements: list[bytes] = []
    offset = 0
    while offset < len(raw):
        if offset + _LENGTH.size > len(raw):
            raise ConfigError(f"{what} is truncated: element {len(elements)} at byte {offset} "
                              f"has {len(raw) - offset} of the 4 bytes of its length")
        (size,) = _LENGTH.unpack_from(raw, offset)
        offset += _LENGTH.size
        if offset + size > len(raw):
            raise ConfigError(f"{what} is truncated: element {len(elements)} declares "
                              f"{size} bytes, {len(raw) - offset} are left")
        elements.append(raw[offset:offset + size])
        offset += size
    return elements


def _file_row(name: str, spec: WarmupInput, row: tuple[int, ...], version_dir: Path,
              text: bool) -> np.ndarray:
    """One row of ``name``'s data, read from its ``input_data_file``."""
    path = version_dir.parent / "warmup" / spec.input_data_file
    what = f"input '{name}' input_data_file '{spec.input_data_file}'"
    if not path.is_file():
        raise ConfigError(f"{what} not found (looked for {path.parent.name}/{path.name})")
    raw = path.read_bytes()
    count = int(np.prod(row))
    if not spec.datatype.is_bytes:
        need = count * spec.datatype.size
        if len(raw) < need:
            raise ConfigError(f"{what} has {len(raw)} bytes, dims {list(spec.dims)} of "
                              f"{spec.datatype.v2} need {need}")
        return np.frombuffer(raw[:need], dtype=spec.datatype.numpy).reshape(row)
    elements = bytes_elements(raw, what)
    if len(elements) != count:
        raise ConfigError(f"{what} holds {len(elements)} elements, dims {list(spec.dims)} "
                          f"need {count} (each a 4-byte little-endian length, then its bytes)")
    values: list[bytes] | list[str] = elements
    if text:
        try:
            values = [e.decode() for e in elements]
        except UnicodeDecodeError:
            raise ConfigError(f"{what} is not UTF-8 text, which the model's string input "
                              "needs") from None
    array = np.empty(count, dtype=object)
    array[:] = values
    return array.reshape(row)


def configured_batch(config: ModelConfig, warmup: Warmup, version_dir: Path,
                     text: bool = False) -> dict[str, np.ndarray]:
    """A ``model_warmup`` sample's inputs, ``batch_size`` rows of them when the model
    batches."""
    rng = np.random.default_rng(0)
    lead = (warmup.batch_size,) if config.batching else ()
    batch: dict[str, np.ndarray] = {}
    for name, spec in warmup.inputs.items():
        row = _static(spec.dims)
        if spec.data == "input_data_file":
            data = _file_row(name, spec, row, version_dir, text)
            batch[name] = np.broadcast_to(data, lead + row).copy() if lead else data
        elif spec.data == "random_data":
            batch[name] = _random(spec.datatype, lead + row, rng, text)
        else:
            batch[name] = _zeros(spec.datatype, lead + row, text)
    return batch
