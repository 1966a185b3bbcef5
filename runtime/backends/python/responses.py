"""A Python model's responses, checked against its config, and errors both ways between
Triton's error codes (``pb_utils.TritonError``) and modelfn's status codes."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from modelfn.runtime.backends.python.pb_utils import TritonError
from modelfn.runtime.errors import BackendError, ModelfnError

if TYPE_CHECKING:
    from modelfn.runtime.config import ModelConfig, TensorConfig

#: a TritonError's code -> the status of the request it fails (others: 500)
STATUS_OF_CODE: dict[int, int] = {
    TritonError.INVALID_ARG: 400,
    TritonError.NOT_FOUND: 404,
    TritonError.UNAVAILABLE: 503,
}
#: a status -> the TritonError code a BLS caller sees (others: INTERNAL)
CODE_OF_STATUS: dict[int, int] = {
    **{status: code for code, status in STATUS_OF_CODE.items()},
    501: TritonError.UNSUPPORTED,
}


class ModelResponseError(ModelfnError):
    """A Python model answered one request with an error (``InferenceResponse(error=...)``):
    that request fails with the model's message and the status of its code."""

    def __init__(self, model: str, message: str, code: int) -> None:
        super().__init__(message)
        self.model = model
        self.code = code
        self.status_code = STATUS_OF_CODE.get(code, 500)


def error_reply(error: BaseException) -> tuple[str, int]:
    """A failure as a BLS caller's ``TritonError`` sees it: message and code."""
    if isinstance(error, ModelfnError):
        return error.message, CODE_OF_STATUS.get(error.status_code, TritonError.INTERNAL)
    return f"{type(error).__name__}: {error}", TritonError.INTERNAL


def checked(config: ModelConfig, rows: int | None, wanted: tuple[str, ...],
            outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray] | Exception:
    """``outputs`` when they hold every output ``wanted`` (all, when none is named) with its
    config's datatype and shape (``rows`` first when the model batches); else the
    ``BackendError`` that fails this request, naming the model and the tensor."""
    model = config.name
    for name in wanted or [t.name for t in config.outputs]:
        if name not in outputs:
            return BackendError(f"python model '{model}' returned no output '{name}' "
                                "(every requested output, or all of them when none is "
                                "requested, must be in the response)")
    for name, array in outputs.items():
        tensor = config.output(name)
        if tensor is None:
            declared = ", ".join(f"'{t.name}'" for t in config.outputs) or "none"
            return BackendError(f"python model '{model}' returned output '{name}', which its "
                                f"config does not declare (its outputs: {declared})")
        lead = (-1 if rows is None else rows,) if config.batching else ()
        problem = _problem(tensor, array, lead)
        if problem:
            return BackendError(f"python model '{model}' output '{name}': {problem}")
    return outputs


def _problem(tensor: TensorConfig, array: np.ndarray, lead: tuple[int, ...]) -> str:
    datatype = tensor.datatype
    if not isinstance(array, np.ndarray):
        return f"is a {type(array).__name__}, not a numpy array"
    if datatype.is_bytes:
        if array.dtype != np.object_:
            return f"is {array.dtype}, but TYPE_STRING needs an object array of bytes"
    elif array.dtype != datatype.numpy:
        return f"is {array.dtype}, but its config says {datatype.config}"
    dims = tensor.reshape if tensor.reshape is not None else tensor.dims
    expected = (*lead, *dims)
    if len(array.shape) != len(expected) or any(
            d not in (-1, n) for n, d in zip(array.shape, expected, strict=True)):
        return f"has shape {list(array.shape)}, but its config says {list(expected)}"
    return ""
