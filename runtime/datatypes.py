"""The one datatype table: V2 name, config ``TYPE_*`` name, numpy dtype, byte size,
ONNX type and the gRPC ``InferTensorContents`` field that carries typed elements.

Every other mapping (ONNX element types, lookups by numpy dtype) is derived
from ``DATATYPES`` so the table is written once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from modelfn.runtime.errors import InvalidInput


@dataclass(frozen=True, slots=True)
class Datatype:
    v2: str  # KServe V2 name, e.g. "FP32"
    config: str  # config.pbtxt name, e.g. "TYPE_FP32"
    numpy: np.dtype[np.generic]  # little-endian numpy dtype; object for BYTES
    size: int  # bytes per element; 0 for variable-size BYTES
    onnx: str  # ONNX Runtime type string, e.g. "tensor(float)"
    contents: str  # the gRPC InferTensorContents field, e.g. "fp32_contents"; "" = raw only

    @property
    def is_bytes(self) -> bool:
        return self.v2 == "BYTES"


def _dt(v2: str, config: str, numpy: str, size: int, onnx: str, contents: str) -> Datatype:
    return Datatype(v2, config, np.dtype(numpy), size, onnx, contents)


DATATYPES: tuple[Datatype, ...] = (
    _dt("BOOL", "TYPE_BOOL", "bool", 1, "tensor(bool)", "bool_contents"),
    _dt("UINT8", "TYPE_UINT8", "<u1", 1, "tensor(uint8)", "uint_contents"),
    _dt("UINT16", "TYPE_UINT16", "<u2", 2, "tensor(uint16)", "uint_contents"),
    _dt("UINT32", "TYPE_UINT32", "<u4", 4, "tensor(uint32)", "uint_contents"),
    _dt("UINT64", "TYPE_UINT64", "<u8", 8, "tensor(uint64)", "uint64_contents"),
    _dt("INT8", "TYPE_INT8", "<i1", 1, "tensor(int8)", "int_contents"),
    _dt("INT16", "TYPE_INT16", "<i2", 2, "tensor(int16)", "int_contents"),
    _dt("INT32", "TYPE_INT32", "<i4", 4, "tensor(int32)", "int_contents"),
    _dt("INT64", "TYPE_INT64", "<i8", 8, "tensor(int64)", "int64_contents"),
    _dt("FP16", "TYPE_FP16", "<f2", 2, "tensor(float16)", ""),
    _dt("FP32", "TYPE_FP32", "<f4", 4, "tensor(float)", "fp32_contents"),
    _dt("FP64", "TYPE_FP64", "<f8", 8, "tensor(double)", "fp64_contents"),
    _dt("BYTES", "TYPE_STRING", "object", 0, "tensor(string)", "bytes_contents"),
)

BY_V2: dict[str, Datatype] = {d.v2: d for d in DATATYPES}
BY_CONFIG: dict[str, Datatype] = {d.config: d for d in DATATYPES}
BY_ONNX: dict[str, Datatype] = {d.onnx: d for d in DATATYPES}
BY_NUMPY: dict[np.dtype[np.generic], Datatype] = {d.numpy: d for d in DATATYPES}


def from_v2(name: str) -> Datatype:
    try:
        return BY_V2[name]
    except KeyError:
        raise InvalidInput(
            f"unsupported datatype '{name}'; expected one of {', '.join(BY_V2)}"
        ) from None


def from_numpy(dtype: np.dtype[np.generic]) -> Datatype:
    """The V2 datatype of a numpy array, treating str/bytes arrays as BYTES."""
    found = BY_NUMPY.get(dtype.newbyteorder("<") if dtype.byteorder == ">" else dtype)
    if found is not None:
        return found
    if dtype.kind in ("U", "S", "O"):
        return BY_V2["BYTES"]
    raise InvalidInput(f"numpy dtype {dtype} has no V2 datatype")
