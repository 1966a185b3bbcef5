"""The float weights of an ONNX file, read without the ``onnx`` package.

A function image installs onnxruntime but not ``onnx`` (31 MB, ``deploy/requirements.py``),
and onnxruntime has no API that hands out a model's initializers. So the few fields a
weight needs are read straight from the protobuf wire format, which ``onnx.proto`` fixes:

- ``ModelProto.graph`` is field 7; ``GraphProto.initializer`` (a ``TensorProto``) field 5;
- ``TensorProto``: ``dims`` 1, ``data_type`` 2, ``float_data`` 4, ``name`` 8,
  ``raw_data`` 9, ``double_data`` 10, ``external_data`` 13 (``key`` 1, ``value`` 2) and
  ``data_location`` 14 (1: external).

Every other field, and every nested message but these, is skipped by its length, so a
model's nodes cost a tag each and its weights are views of the file's bytes, not copies.
"""

from __future__ import annotations

import math
import struct
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

#: ONNX data types whose weights are read: FLOAT and DOUBLE
FLOAT, DOUBLE = 1, 11
_DTYPES: dict[int, np.dtype[Any]] = {FLOAT: np.dtype("<f4"), DOUBLE: np.dtype("<f8")}
_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5


class WeightsError(ValueError):
    """The file is not an ONNX model this reader can take apart."""


def _varint(data: memoryview, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data):
            raise WeightsError("the file ends inside a number")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7
        if shift > 63:
            raise WeightsError("a number runs past 64 bits")


def _fields(data: memoryview) -> Iterator[tuple[int, int | memoryview]]:
    """``(field number, value)`` of one message: an int, or the bytes of a
    length-delimited field (a view). Fixed-width values come as ints of their bits."""
    at, end = 0, len(data)
    while at < end:
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        value: int | memoryview
        if wire == _VARINT:
            value, at = _varint(data, at)
        elif wire == _LEN:
            size, at = _varint(data, at)
            if at + size > end:
                raise WeightsError(f"field {number} runs past the end of its message")
            value, at = data[at:at + size], at + size
        elif wire in (_I64, _I32):
            width = 8 if wire == _I64 else 4
            if at + width > end:
                raise WeightsError(f"field {number} runs past the end of its message")
            value, at = int.from_bytes(data[at:at + width], "little"), at + width
        else:  # groups (3, 4) are not in onnx.proto
            raise WeightsError(f"field {number} has wire type {wire}, which ONNX does not use")
        yield number, value


def _packed(value: int | memoryview, dtype: np.dtype[Any]) -> list[float]:
    """A repeated float or double field's values: packed (one run) or one value."""
    if isinstance(value, memoryview):
        if len(value) % dtype.itemsize:
            raise ValueError(f"packed {dtype.name} values of {len(value)} bytes")
        return [float(x) for x in np.frombuffer(value, dtype)]
    return list(struct.unpack("<f" if dtype.itemsize == 4 else "<d",
                              value.to_bytes(dtype.itemsize, "little")))


class _Tensor:
    __slots__ = ("dims", "data_type", "name", "raw", "values", "external", "location")

    def __init__(self) -> None:
        self.dims: list[int] = []
        self.data_type = 0
        self.name = ""
        self.raw: memoryview | None = None
        self.values: list[float] = []
        self.external: dict[str, str] = {}
        self.location = 0


def _tensor(data: memoryview) -> _Tensor:
    tensor = _Tensor()
    for number, value in _fields(data):
        if number == 1:
            if isinstance(value, memoryview):  # packed
                at = 0
                while at < len(value):
                    dim, at = _varint(value, at)
                    tensor.dims.append(dim)
            else:
                tensor.dims.append(value)
        elif number == 2 and isinstance(value, int):
            tensor.data_type = value
        elif number == 8 and isinstance(value, memoryview):
            tensor.name = bytes(value).decode("utf-8", "replace")
        elif number == 9 and isinstance(value, memoryview):
            tensor.raw = value
        elif number in (4, 10):
            dtype = _DTYPES[FLOAT if number == 4 else DOUBLE]
            tensor.values += _packed(value, dtype)
        elif number == 13 and isinstance(value, memoryview):
            entry = {n: bytes(v).decode("utf-8", "replace") for n, v in _fields(value)
                     if isinstance(v, memoryview)}
            tensor.external[entry.get(1, "")] = entry.get(2, "")
        elif number == 14 and isinstance(value, int):
            tensor.location = value
    return tensor


def _external(tensor: _Tensor, base: Path, dtype: np.dtype[Any]) -> np.ndarray:
    """The weight's values from its external data file, which must lie in ``base``."""
    location = tensor.external.get("location", "")
    path = (base / location).resolve()
    if not location or not path.is_relative_to(base.resolve()):
        raise WeightsError(f"initializer '{tensor.name}' has external data at "
                           f"'{location}', outside the model's directory")
    try:
        offset = int(tensor.external.get("offset") or 0)
        count = -1
        if tensor.external.get("length"):
            count = int(tensor.external["length"]) // dtype.itemsize
        return np.fromfile(path, dtype, count=count, offset=offset)
    except (OSError, ValueError, OverflowError) as exc:
        raise WeightsError(f"cannot read the external data of initializer "
                           f"'{tensor.name}': {exc}") from None


def float_weights(path: Path, *, external: bool = True) -> Iterator[tuple[str, np.ndarray]]:
    """``(name, array)`` for each FP32 and FP64 initializer of the main graph of the ONNX
    model at ``path``; ``external``: also those whose data lies in other files. Arrays read
    from the model file are read-only views of it."""
    data = memoryview(path.read_bytes())
    graph = next((v for n, v in _fields(data) if n == 7 and isinstance(v, memoryview)),
                 None)
    if graph is None:
        return
    for number, value in _fields(graph):
        if number != 5 or not isinstance(value, memoryview):
            continue
        try:
            tensor = _tensor(value)
        except (ValueError, OverflowError) as exc:  # a field of the wrong size or kind
            raise WeightsError(f"an initializer cannot be read: {exc}") from None
        dtype = _DTYPES.get(tensor.data_type)
        if dtype is None or (tensor.location == 1 and not external):
            continue
        yield tensor.name, _array(tensor, dtype, path.parent)


def _array(tensor: _Tensor, dtype: np.dtype[Any], base: Path) -> np.ndarray:
    """The weight's values in its dims, or ``WeightsError``."""
    if tensor.location == 1:
        flat = _external(tensor, base, dtype)
    elif tensor.raw is not None:
        if len(tensor.raw) % dtype.itemsize:
            raise WeightsError(f"initializer '{tensor.name}' has {len(tensor.raw)} bytes "
                               f"of raw data, not a whole number of {dtype.name}")
        flat = np.frombuffer(tensor.raw, dtype)
    else:
        flat = np.array(tensor.values, dtype)
    dims = tensor.dims
    # varints read unsigned: a negative dim is over 2**63; the product is taken exactly
    if any(dim >= 1 << 63 for dim in dims) or flat.size != math.prod(dims):
        shown = [dim - (1 << 64) if dim >= 1 << 63 else dim for dim in dims]
        raise WeightsError(f"initializer '{tensor.name}' has {flat.size} values for "
                           f"dims {shown}")
    try:
        return flat.reshape(dims)
    except ValueError as exc:  # an empty tensor whose other dims numpy cannot hold
        raise WeightsError(f"initializer '{tensor.name}' has dims {dims}: {exc}") from None
