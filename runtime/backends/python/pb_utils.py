"""``triton_python_backend_utils``: what Triton's python_backend README documents for models
that are not decoupled, for a ``model.py`` that does ``import triton_python_backend_utils as
pb_utils``. The worker registers this module under that name before it imports the model.

Tensors are numpy arrays (BYTES: object arrays of ``bytes``); ``to_dlpack``/``from_dlpack``
go through numpy's DLPack support, on the CPU. ``InferenceRequest.exec`` and ``async_exec``
(BLS) and ``Logger`` reach the server through the worker's stub (``install``).
"""

from __future__ import annotations

import json
import struct
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np

from modelfn.runtime.backends.python.autocomplete import AutoCompleteConfig
from modelfn.runtime.datatypes import DATATYPES

if TYPE_CHECKING:
    from collections.abc import Awaitable, Sequence
    from concurrent.futures import Future

__all__ = [
    "InferenceRequest", "InferenceResponse", "Logger", "ModelConfig", "Tensor", "TritonError",
    "TritonModelException", "deserialize_bytes_tensor", "get_input_config_by_name",
    "get_input_tensor_by_name", "get_output_config_by_name", "get_output_tensor_by_name",
    "numpy_to_triton_type", "serialize_byte_tensor", "triton_string_to_numpy",
    "triton_to_numpy_type", "using_decoupled_model_transaction_policy",
]

#: the object ``auto_complete_config`` receives, under Triton's name
ModelConfig = AutoCompleteConfig

TRITON_STRING_TO_NUMPY: dict[str, type[Any]] = {d.config: d.numpy.type for d in DATATYPES}
#: Triton's DataType enum: TYPE_BOOL is 1, and so on in the datatype table's order
_ENUM: dict[int, type[Any]] = {i: d.numpy.type for i, d in enumerate(DATATYPES, start=1)}
_ENUM_OF_NUMPY: dict[type[Any], int] = {t: i for i, t in _ENUM.items()} | {np.bytes_: 13}

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2
TRITONSERVER_MEMORY_CPU = 0
TRITONSERVER_MEMORY_GPU = 2


class Stub(Protocol):
    """The worker's side of the server: BLS calls and log lines."""

    def infer(self, request: InferenceRequest) -> Future[InferenceResponse]: ...

    def log(self, level: str, message: str) -> None: ...


_stub: Stub | None = None


def install(stub: Stub) -> None:
    global _stub
    _stub = stub


def _server() -> Stub:
    if _stub is None:
        raise TritonModelException("this process is not a modelfn Python model worker")
    return _stub


class TritonModelException(Exception):  # noqa: N818 - Triton's name
    """Raise it in ``execute`` to fail every request of the batch with its message."""


class TritonError:
    """An error a response carries (``InferenceResponse(error=...)``): it fails that
    request alone, with a status for ``code``."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    def __init__(self, message: str, code: int = INTERNAL) -> None:
        self._message = str(message)
        self._code = int(code)

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code

    def __repr__(self) -> str:
        return f"TritonError({self._message!r}, code={self._code})"


class _Capsule:
    """A bare DLPack capsule, for ``np.from_dlpack`` (which takes an object that exports)."""

    def __init__(self, capsule: object) -> None:
        self._capsule = capsule

    def __dlpack__(self, stream: object = None) -> object:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # kDLCPU


class Tensor:
    """A named tensor; ``as_numpy`` gives its array (BYTES: an object array of bytes)."""

    __slots__ = ("_array", "_name")

    def __init__(self, name: str, array: np.ndarray[Any, Any]) -> None:
        if not isinstance(array, np.ndarray):
            raise TritonModelException(f"tensor '{name}' must be a numpy array, "
                                       f"not {type(array).__name__}")
        self._name = name
        self._array = array

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray[Any, Any]:
        return self._array

    def shape(self) -> list[int]:
        return list(self._array.shape)

    def is_cpu(self) -> bool:
        return True

    def triton_dtype(self) -> int:
        return numpy_to_triton_type(self._array.dtype.type)

    def to_dlpack(self) -> object:
        return self._array.__dlpack__()

    @staticmethod
    def from_dlpack(name: str, capsule: object) -> Tensor:
        source = capsule if hasattr(capsule, "__dlpack__") else _Capsule(capsule)
        return Tensor(name, np.from_dlpack(source))

    def __repr__(self) -> str:
        return f"Tensor({self._name!r}, shape={list(self._array.shape)}, dtype={self._array.dtype})"


class InferenceResponse:
    """One request's answer: its output tensors, or the error that fails it alone."""

    def __init__(self, output_tensors: Sequence[Tensor] | None = None,
                 error: TritonError | None = None,
                 parameters: dict[str, Any] | str | None = None) -> None:
        self._outputs = list(output_tensors or [])
        self._error = error
        self._parameters = parameters if isinstance(parameters, str) else json.dumps(
            parameters or {})

    def output_tensors(self) -> list[Tensor]:
        return self._outputs

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def parameters(self) -> str:
        return self._parameters


class InferenceRequest:
    """A request ``execute`` receives, and a BLS request a model builds to call another model
    of the same server (``exec``, or ``await async_exec()``)."""

    def __init__(self, model_name: str | bytes = "", inputs: Sequence[Tensor] = (),
                 requested_output_names: Sequence[str] = (), request_id: str = "",
                 correlation_id: int | str = 0, model_version: int = -1, flags: int = 0,
                 timeout: int = 0, preferred_memory: object = None, trace: object = None,
                 parameters: dict[str, Any] | str | None = None) -> None:
        self._model_name = model_name.decode() if isinstance(model_name, bytes) else model_name
        self._inputs = list(inputs)
        self._outputs = [o.decode() if isinstance(o, bytes) else o
                         for o in requested_output_names]
        self._request_id = request_id
        self._correlation_id = correlation_id
        self._model_version = int(model_version)
        self._flags = flags
        self._timeout = int(timeout)
        self._parameters = parameters if isinstance(parameters, str) else json.dumps(
            parameters or {})

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def requested_output_names(self) -> list[str]:
        return self._outputs

    def request_id(self) -> str:
        return self._request_id

    def correlation_id(self) -> int | str:
        return self._correlation_id

    def model_name(self) -> str:
        return self._model_name

    def model_version(self) -> int:
        return self._model_version

    def flags(self) -> int:
        return self._flags

    def timeout(self) -> int:
        return self._timeout

    def parameters(self) -> str:
        """The request's parameters as a JSON string, as Triton gives them."""
        return self._parameters

    def is_cancelled(self) -> bool:
        return False

    def get_response_sender(self) -> object:
        raise TritonModelException("decoupled models are not supported by modelfn: "
                                   "return one InferenceResponse per request from execute")

    def exec(self, decoupled: bool = False) -> InferenceResponse:
        """Run this request on its model, waiting for the answer; an error comes back in the
        response (``has_error``), it is not raised."""
        _refuse_decoupled(decoupled)
        return _server().infer(self).result()

    def async_exec(self, decoupled: bool = False) -> Awaitable[InferenceResponse]:
        """Send this request now; await the result for its response."""
        _refuse_decoupled(decoupled)
        return _awaited(_server().infer(self))


async def _awaited(future: Future[InferenceResponse]) -> InferenceResponse:
    import asyncio

    return await asyncio.wrap_future(future)


def _refuse_decoupled(decoupled: bool) -> None:
    if decoupled:
        raise TritonModelException("decoupled BLS calls are not supported by modelfn")


class Logger:
    """Log lines that reach the server's log under the model's name."""

    INFO: ClassVar[str] = "INFO"
    WARNING: ClassVar[str] = "WARNING"
    ERROR: ClassVar[str] = "ERROR"
    VERBOSE: ClassVar[str] = "VERBOSE"

    @staticmethod
    def log(message: str, level: str = "INFO") -> None:
        _server().log(level, str(message))

    @staticmethod
    def log_info(message: str) -> None:
        Logger.log(message, Logger.INFO)

    @staticmethod
    def log_warn(message: str) -> None:
        Logger.log(message, Logger.WARNING)

    @staticmethod
    def log_error(message: str) -> None:
        Logger.log(message, Logger.ERROR)

    @staticmethod
    def log_verbose(message: str) -> None:
        Logger.log(message, Logger.VERBOSE)


def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None:
    return next((t for t in inference_request.inputs() if t.name() == name), None)


def get_output_tensor_by_name(inference_response: InferenceResponse, name: str
                              ) -> Tensor | None:
    return next((t for t in inference_response.output_tensors() if t.name() == name), None)


def get_input_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((t for t in model_config.get("input", []) if t["name"] == name), None)


def get_output_config_by_name(model_config: dict[str, Any], name: str
                              ) -> dict[str, Any] | None:
    return next((t for t in model_config.get("output", []) if t["name"] == name), None)


def using_decoupled_model_transaction_policy(model_config: dict[str, Any]) -> bool:
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))


def triton_string_to_numpy(triton_type_string: str) -> type[Any]:
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def triton_to_numpy_type(data_type: int) -> type[Any] | None:
    return _ENUM.get(data_type)


def numpy_to_triton_type(data_type: Any) -> int:
    """Triton's DataType number of a numpy type (0, TYPE_INVALID, when it has none)."""
    return _ENUM_OF_NUMPY.get(np.dtype(data_type).type, 0)


def serialize_byte_tensor(input_tensor: np.ndarray[Any, Any]) -> bytes:
    """Each element as a 4-byte little-endian length and its bytes, in C order."""
    parts: list[bytes] = []
    for item in input_tensor.ravel(order="C").tolist():
        data = item if isinstance(item, bytes) else str(item).encode("utf-8")
        parts += (struct.pack("<I", len(data)), data)
    return b"".join(parts)


def deserialize_bytes_tensor(encoded_tensor: bytes) -> np.ndarray[Any, Any]:
    items: list[bytes] = []
    view, offset = memoryview(encoded_tensor), 0
    while offset < len(view):
        (size,) = struct.unpack_from("<I", view, offset)
        items.append(bytes(view[offset + 4:offset + 4 + size]))
        offset += 4 + size
    return np.array(items, dtype=np.object_)
