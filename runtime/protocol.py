"""KServe V2 inference requests and responses: JSON tensors and Triton's binary extension.

``ModelCodec`` is built once per model from its completed config and resolves
everything the config decides (datatypes, numpy dtypes, expected shapes with the
batch dimension, reshapes, required inputs), so ``decode`` and ``encode`` do
per-request work only.

Behaviour worth knowing:

- Binary inputs are zero-copy, read-only numpy views of the request body.
- JSON ``data`` may be flat or nested. Each element must be of the tensor's kind:
  booleans for BOOL, integers for integer types, numbers for FP32/FP64, strings
  for BYTES; FP16 has no JSON form and must be sent binary. Values out of range
  for the datatype are refused.
- BYTES outputs are sent as JSON strings when they are valid UTF-8; otherwise a
  JSON response is refused (400) asking for ``binary_data``, since V2 JSON has no
  lossless form for arbitrary bytes.
- ``Inference-Header-Content-Length: 0`` is a raw binary request: the whole body
  is the model's single input (batch 1, the one variable dimension inferred from
  the size; for BYTES, one element), and every output is returned binary.
- The ``timeout`` request parameter (microseconds, 0 = none) becomes
  ``InferRequest.timeout_us``; other parameters are passed through untouched.
- An absent or empty ``outputs`` list means every output, in config order.
- The client side (``encode_request``, ``decode_response``) is the same codec run the
  other way, for the gateway that batches requests and sends them on to a function.
  Classification (``"classification": N``) gives a BYTES tensor of the top N
  ``"value:index"`` entries per batch row. Shared-memory parameters are 501.
"""

from __future__ import annotations

import math
import struct
from contextlib import nullcontext
from dataclasses import dataclass, field
from itertools import chain
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from modelfn.runtime.datatypes import BY_V2
from modelfn.runtime.errors import BackendError, InvalidInput, ModelfnError, Unsupported

if TYPE_CHECKING:
    import numpy.typing as npt

    from modelfn.runtime.config import ModelConfig, TensorConfig

    Array = npt.NDArray[Any]

#: request and response header giving the length of the JSON part of a binary body
HEADER_LENGTH = "inference-header-content-length"
CONTENT_TYPE = "content-type"
JSON_CONTENT_TYPE = "application/json"
BINARY_CONTENT_TYPE = "application/octet-stream"

_BYTES = BY_V2["BYTES"]
_PREFIX = struct.Struct("<I")
_BINARY_ONLY = frozenset({"FP16"})
_INT = frozenset({int})
_STR = frozenset({str})
_BYTES_TYPES = frozenset({bytes})

#: numpy kind -> (Python types JSON may hold for it, how to say so)
_JSON_SCALARS: dict[str, tuple[frozenset[type], str]] = {
    "b": (frozenset({bool}), "JSON booleans"),
    "u": (frozenset({int}), "JSON integers"),
    "i": (frozenset({int}), "JSON integers"),
    "f": (frozenset({int, float}), "JSON numbers"),
    "O": (frozenset({str}), "JSON strings"),
}
_JSON_NAMES: dict[type, str] = {
    bool: "booleans",
    int: "integers",
    float: "non-integer numbers",
    str: "strings",
    type(None): "nulls",
    dict: "objects",
}
#: numpy kind -> how a classification entry shows its value (C++ std::to_string, like Triton)
_CLASS_FORMAT: dict[str, str] = {"f": "{:f}:{}", "i": "{:d}:{}", "u": "{:d}:{}", "b": "{:d}:{}"}


@dataclass(frozen=True, slots=True)
class RequestedOutput:
    name: str
    binary: bool | None = None  # None: follow the request's binary_data_output
    classification: int = 0  # top-N classification; 0 = off


@dataclass(slots=True)
class InferRequest:
    inputs: dict[str, Array]
    batch_size: int = 1  # rows along the batch dimension when the model batches, else 1
    id: str | None = None
    outputs: list[RequestedOutput] | None = None  # None = all, in config order
    parameters: dict[str, Any] = field(default_factory=dict)
    binary_output: bool = False  # request-level binary_data_output
    timeout_us: int | None = None  # schedule_policy ``timeout``


def _fmt(shape: Any) -> str:
    return "[" + ",".join(map(str, shape)) + "]"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _bad(name: str, problem: str, kind: str = "input") -> InvalidInput:
    return InvalidInput(f"{kind} '{name}' {problem}")


class _Tensor:
    """One config input or output with everything the hot path needs resolved."""

    def __init__(self, tc: TensorConfig, model: str, max_batch_size: int,
                 text: bool = False, kind: str = "input") -> None:
        self.name, self.model, self.max_batch_size = tc.name, model, max_batch_size
        self.kind = kind  # "input", or "output" when reading a function's response
        #: BYTES elements go to the backend as str (decoded UTF-8) rather than bytes
        self.text = text and tc.datatype.is_bytes
        self.datatype, self.dtype, self.itemsize = tc.datatype, tc.datatype.numpy, tc.datatype.size
        self.is_bytes = tc.datatype.is_bytes
        self.lead = int(max_batch_size > 0)  # 1 when the first dimension is the batch
        self.dims = tuple(tc.dims)
        #: expected full shape including the batch dimension; -1 matches anything
        self.shape: tuple[int, ...] = (-1,) * self.lead + self.dims
        #: the dims as a list when none is variable, for a one-comparison shape check
        self.fixed = None if -1 in self.dims else list(self.dims)
        self.reshape = None if tc.reshape is None else tuple(tc.reshape)
        #: the shape the backend sees (without batch): ``reshape`` when configured, else ``dims``
        self.model_dims = self.dims if tc.reshape is None else tuple(tc.reshape)
        self.accepts, self.expects = _JSON_SCALARS[self.dtype.kind]
        self.json_ok = tc.datatype.v2 not in _BINARY_ONLY
        self.check_bool = self.dtype.kind == "b"
        #: only FP32 can overflow from JSON numbers (too large for FP64 raises anyway)
        self.guard_overflow = tc.datatype.v2 == "FP32"

    def _bad(self, problem: str) -> InvalidInput:
        return _bad(self.name, problem, self.kind)

    def check_shape(self, shape: Any) -> tuple[list[int], int]:
        """The request shape, validated against the config, and its element count."""
        if (
            type(shape) is not list
            or not set(map(type, shape)) <= _INT
            or min(shape, default=0) < 0
        ):
            raise self._bad(
                f"'shape' must be a list of non-negative integers, not {_short(shape)}"
            )
        expected = self.shape
        if len(shape) != len(expected) or (
            shape[self.lead :] != self.fixed
            if self.fixed is not None
            else any(w != -1 and g != w for g, w in zip(shape, expected, strict=True))
        ):
            raise InvalidInput(
                f"unexpected shape for {self.kind} '{self.name}' for model '{self.model}': "
                f"expected {_fmt(expected)}, got {_fmt(shape)}"
            )
        if self.lead and not 1 <= shape[0] <= self.max_batch_size:
            raise self._bad(
                f"has batch size {shape[0]}; the model takes 1 to {self.max_batch_size}"
            )
        return shape, math.prod(shape)

    def from_blob(self, blob: memoryview, shape: list[int], count: int) -> Array:
        if self.is_bytes:
            items: list[Any] = _split_bytes(blob, self.name, count, self.kind)
            if self.text:
                items = self.decode_text(items)
            return _object_array(items).reshape(shape)
        need = count * self.itemsize
        if len(blob) != need:
            raise self._bad(
                f"has {len(blob)} bytes of binary data but shape "
                f"{_fmt(shape)} of {self.datatype.v2} needs {need}",
            )
        if self.check_bool and count and np.frombuffer(blob, np.uint8).max() > 1:
            raise self._bad("has BOOL bytes other than 0 and 1")
        return np.frombuffer(blob, self.dtype).reshape(shape)

    def from_json(self, data: Any, shape: list[int], count: int) -> Array:
        if not self.json_ok:
            raise self._bad(
                f"is {self.datatype.v2}, which has no JSON form; send it as "
                "binary data (binary_data_size)",
            )
        flat = data if type(data) is list else [data]
        types = set(map(type, flat))
        while list in types:
            if len(types) > 1:
                raise self._bad("mixes nested lists and values in 'data'")
            flat = list(chain.from_iterable(flat))
            types = set(map(type, flat))
        if len(flat) != count:
            raise self._bad(
                f"has {len(flat)} elements in 'data' but shape {_fmt(shape)} needs {count}",
            )
        if not types <= self.accepts:
            found = ", ".join(sorted(_JSON_NAMES.get(t, t.__name__) for t in types - self.accepts))
            raise self._bad(
                f"of datatype {self.datatype.v2} expects {self.expects} in 'data' but got {found}",
            )
        if self.is_bytes:
            return _object_array(flat if self.text else list(map(str.encode, flat))).reshape(shape)
        try:
            with np.errstate(over="raise") if self.guard_overflow else nullcontext():
                array = np.array(flat, dtype=self.dtype)
        except (OverflowError, FloatingPointError) as exc:
            raise self._bad(f"has a value that does not fit {self.datatype.v2}: {exc}") from None
        return array.reshape(shape)

    def decode_text(self, items: list[bytes]) -> list[str]:
        """BYTES elements as the text a string model takes; bad UTF-8 is the request's 400."""
        try:
            return [item.decode() for item in items]
        except UnicodeDecodeError:
            bad = next(i for i, item in enumerate(items) if not _utf8(item))
            raise self._bad(
                f"BYTES element {bad} is not valid UTF-8, and model '{self.model}' takes "
                "text (an ONNX string tensor)",
            ) from None

    def to_backend(self, array: Array) -> Array:
        """An input as the backend takes it: config ``reshape`` applied."""
        return _reshape(
            array, self.lead, self.dims, self.model_dims, f"{self.kind} '{self.name}'",
            InvalidInput,
        )

    def from_backend(self, array: Array) -> Array:
        """An output as the client sees it: back from the config ``reshape`` to ``dims``."""
        return _reshape(
            array, self.lead, self.model_dims, self.dims, f"output '{self.name}'", BackendError
        )


def _utf8(item: bytes) -> bool:
    try:
        item.decode()
    except UnicodeDecodeError:
        return False
    return True


def _object_array(items: list[Any]) -> Array:
    array = np.empty(len(items), dtype=object)
    array[:] = items
    return array


def _split_bytes(blob: memoryview, name: str, count: int, kind: str = "input") -> list[bytes]:
    """BYTES elements from 4-byte little-endian length prefixes, exactly ``count`` of them."""
    size = len(blob)
    if size < 4 * count:
        raise _bad(
            name, f"has {size} bytes of binary data, too few for {count} BYTES elements", kind
        )
    raw = blob.tobytes()
    items: list[bytes] = []
    append, unpack = items.append, _PREFIX.unpack_from
    offset = length = start = 0
    try:
        for _ in range(count):
            (length,) = unpack(raw, offset)
            start = offset + 4
            offset = start + length
            append(raw[start:offset])
    except struct.error:
        if offset <= size:
            raise _bad(name, f"binary data ends before BYTES element {len(items)}", kind) from None
    if offset > size:
        element = len(items) - 1
        raise _bad(
            name, f"BYTES element {element} claims {length} bytes; {size - start} remain", kind
        )
    if offset != size:
        raise _bad(
            name, f"has {size - offset} bytes of binary data after its {count} elements", kind
        )
    return items


def _reshape(
    array: Array,
    lead: int,
    src: tuple[int, ...],
    dst: tuple[int, ...],
    what: str,
    error: type[ModelfnError],
) -> Array:
    """Reshape ``array`` (config shape ``src``) to config shape ``dst``; -1s map in order."""
    head, body = array.shape[:lead], array.shape[lead:]
    if -1 in dst:
        free = iter([n for n, d in zip(body, src, strict=False) if d == -1])
        dst = tuple(next(free, -1) if d == -1 else d for d in dst)
    try:
        return array.reshape(head + dst)
    except ValueError:
        raise error(
            f"cannot reshape {what} of shape {_fmt(array.shape)} to {_fmt(head + dst)}"
        ) from None


def _classify(array: Array, top: int, batching: bool, labels: list[str] | None = None) -> Array:
    """Triton's classification extension: the top ``top`` "value:index" entries per row,
    "value:index:label" when the output has a label file."""
    rows = array.reshape(array.shape[0] if batching else 1, -1)
    width = rows.shape[1]
    keep = min(top, width)
    # stable descending order with ties broken by lower index first
    order = (width - 1) - np.argsort(rows[:, ::-1], axis=1, kind="stable")[:, ::-1][:, :keep]
    values = np.take_along_axis(rows, order, axis=1)
    fmt = _CLASS_FORMAT[rows.dtype.kind].format
    entries = [
        fmt(v, i) if labels is None or i >= len(labels) else f"{fmt(v, i)}:{labels[i]}"
        for vrow, irow in zip(values.tolist(), order.tolist(), strict=True)
        for v, i in zip(vrow, irow, strict=True)
    ]
    return _object_array(entries).reshape((rows.shape[0], keep) if batching else (keep,))


def _texts(items: list[Any], name: str) -> list[str]:
    """BYTES elements as JSON strings: str as is, bytes decoded as UTF-8."""
    kinds = set(map(type, items))
    try:
        if kinds <= _STR:
            return items
        if kinds <= _BYTES_TYPES:
            return list(map(bytes.decode, items))
        return [x.decode() if isinstance(x, bytes) else str(x) for x in items]
    except UnicodeDecodeError:
        raise InvalidInput(
            f"output '{name}' holds bytes that are not valid UTF-8 and cannot be sent as "
            "JSON; request it with the binary_data parameter"
        ) from None


def _bytes_blob(items: list[Any]) -> bytes:
    """BYTES elements as 4-byte little-endian length prefixes, each followed by its bytes."""
    if not set(map(type, items)) <= _BYTES_TYPES:
        items = [x if isinstance(x, bytes) else str(x).encode() for x in items]
    return b"".join(
        chain.from_iterable(zip(map(_PREFIX.pack, map(len, items)), items, strict=True))
    )


#: JSON parts shorter than this are not worth a structure check: parsing them is cheap
_CHECK_STRUCTURE_BYTES = 64 * 1024
#: arrays a valid request may hold beyond its data: shapes, 'inputs', 'outputs', parameters
_SPARE_ARRAYS = 256


def _max_elements(config: ModelConfig) -> int | None:
    """The most elements a request can carry, when the config bounds them."""
    elements = 0
    for tensor in config.inputs:
        if -1 in tensor.dims or tensor.datatype.is_bytes:  # unbounded, or '[' inside strings
            return None
        elements += max(1, config.max_batch_size) * math.prod(tensor.dims)
    return elements


class ModelCodec:
    """Decodes V2 requests for one model and encodes its responses."""

    def __init__(self, config: ModelConfig, labels: dict[str, list[str]] | None = None,
                 *, text_strings: bool = False) -> None:
        """``labels``: an output's class labels (its ``label_filename``), for classification;
        ``text_strings``: the backend takes BYTES inputs as ``str`` (``Backend.text_strings``).
        """
        self.name = config.name
        self._labels = labels or {}
        self.batching = config.max_batch_size > 0
        self._inputs = {
            t.name: _Tensor(t, self.name, config.max_batch_size, text_strings)
            for t in config.inputs
        }
        self._outputs = {
            t.name: _Tensor(t, self.name, config.max_batch_size, kind="output")
            for t in config.outputs
        }
        self._required = tuple(t.name for t in config.inputs if not t.optional)
        self._input_names = ", ".join(f"'{t.name}'" for t in config.inputs)
        self._output_names = ", ".join(f"'{t.name}'" for t in config.outputs)
        self._all_outputs = [RequestedOutput(t.name) for t in config.outputs]
        self._single = next(iter(self._inputs.values())) if len(self._inputs) == 1 else None
        self.max_elements = _max_elements(config)
        self.max_arrays = (
            None if self.max_elements is None
            else 2 * self.max_elements + 4 * (len(config.inputs) + len(config.outputs))
            + _SPARE_ARRAYS
        )

    def check_structure(self, document: bytes | memoryview) -> None:
        """Refuse, before parsing, a JSON part with more arrays than any valid request has.

        Data has no empty arrays unless a dimension is 0, so thousands of ``[]`` are not a
        tensor. When every input has fixed dims, the config bounds a request's elements, and a
        valid request spells them with at most about two arrays per element (fully nested
        data) plus its shapes; millions of ``[]`` cannot be one, and parsing them first
        would cost seconds and gigabytes. One ``count`` over the bytes, at memchr speed.
        """
        if len(document) < _CHECK_STRUCTURE_BYTES:
            return
        text = document if isinstance(document, bytes) else bytes(document)
        # a tensor's data holds an empty array only where a dimension is 0
        empty = text.count(b"[]")
        if empty > _SPARE_ARRAYS:
            raise InvalidInput(
                f"the request's JSON has {empty} empty arrays; tensor data has none unless a "
                "dimension is 0"
            )
        if self.max_arrays is None:
            return
        arrays = text.count(b"[")
        if arrays > self.max_arrays:
            raise InvalidInput(
                f"the request's JSON has {arrays} arrays, but a request for model "
                f"'{self.name}' can hold at most {self.max_arrays}: its inputs take at most "
                f"{self.max_elements} elements"
            )

    # ---------------------------------------------------------------- decoding
    def decode(self, body: bytes, header_length: int | None = None) -> InferRequest:
        """Parse an infer request body; ``header_length`` is Inference-Header-Content-Length."""
        if header_length == 0:
            return self._decode_raw(body)
        total = len(body)
        view = memoryview(body)
        if header_length is not None and not 0 < header_length <= total:
            raise InvalidInput(
                f"Inference-Header-Content-Length {header_length} is outside "
                f"the request body of {total} bytes"
            )
        document = body if header_length is None else view[:header_length]
        self.check_structure(document)
        try:
            doc = orjson.loads(document)
        except orjson.JSONDecodeError as exc:
            raise InvalidInput(f"malformed JSON in request body: {exc}") from None
        if type(doc) is not dict:
            raise InvalidInput("the request body must be a JSON object")
        items = doc.get("inputs")
        if type(items) is not list:
            raise InvalidInput(
                "the request has no 'inputs'" if items is None else "'inputs' must be a list"
            )
        inputs: dict[str, Array] = {}
        offset = total if header_length is None else header_length
        batch = 0
        last_binary = ""
        for item in items:
            name, spec = self._entry(item, "input", self._inputs, self._input_names)
            if name in inputs:
                raise _bad(name, "is given more than once")
            datatype = item.get("datatype")
            if datatype != spec.datatype.v2:
                shown = (
                    datatype if type(datatype) is str and len(datatype) < 20 else _short(datatype)
                )
                raise _bad(name, f"has datatype {shown} but the model expects {spec.datatype.v2}")
            shape, count = spec.check_shape(item.get("shape"))
            params = item.get("parameters")
            size = None
            if params is not None:
                if type(params) is not dict:
                    raise _bad(name, "'parameters' must be a JSON object")
                if "shared_memory_region" in params:
                    raise Unsupported(f"input '{name}' uses shared memory, which is not supported")
                size = params.get("binary_data_size")
            data = item.get("data")
            if (size is None) == (data is None):
                raise _bad(name, "needs exactly one of 'data' and 'parameters.binary_data_size'")
            if size is not None:
                if header_length is None:
                    raise _bad(
                        name,
                        "has binary_data_size but the request has no "
                        "Inference-Header-Content-Length header",
                    )
                if type(size) is not int or size < 0:
                    raise _bad(
                        name, f"binary_data_size must be a non-negative integer, not {_short(size)}"
                    )
                end = offset + size
                if end > total:
                    raise _bad(
                        name,
                        f"has binary_data_size {size} but only {total - offset} "
                        "bytes of binary data remain",
                    )
                array = spec.from_blob(view[offset:end], shape, count)
                offset, last_binary = end, name
            elif count > total:  # every JSON element takes at least one byte
                raise _bad(
                    name, f"shape {_fmt(shape)} has more elements than the request could hold"
                )
            else:
                array = spec.from_json(data, shape, count)
            if self.batching:
                if batch and shape[0] != batch:
                    raise InvalidInput(
                        f"all inputs must have the same batch size: input '{name}' "
                        f"has {shape[0]} but an earlier input has {batch}"
                    )
                batch = shape[0]
            inputs[name] = array if spec.reshape is None else spec.to_backend(array)
        if offset != total:
            owner = f"after input '{last_binary}'" if last_binary else "that no input claims"
            raise InvalidInput(
                f"the request body has {total - offset} unexpected bytes of binary data {owner}"
            )
        if len(inputs) != len(self._inputs):
            missing = ", ".join(repr(n) for n in self._required if n not in inputs)
            if missing:
                raise InvalidInput(
                    f"model '{self.name}' expects input(s) {self._input_names} "
                    f"but the request is missing required input(s) {missing}"
                )
        return self._request(doc, inputs, batch or 1)

    def _request(self, doc: dict[str, Any], inputs: dict[str, Array], batch: int) -> InferRequest:
        request_id = doc.get("id")
        if request_id is not None and type(request_id) is not str:
            raise InvalidInput(f"request 'id' must be a string, not {_short(request_id)}")
        params = doc.get("parameters")
        if params is None:
            params = {}
        elif type(params) is not dict:
            raise InvalidInput("request 'parameters' must be a JSON object")
        binary = params.get("binary_data_output", False)
        if type(binary) is not bool:
            raise InvalidInput(f"'binary_data_output' must be true or false, not {_short(binary)}")
        timeout = params.get("timeout")
        if timeout is not None and (type(timeout) is not int or timeout < 0):
            raise InvalidInput(
                f"'timeout' must be a non-negative integer of microseconds, not {_short(timeout)}"
            )
        outputs = self._requested(doc.get("outputs"))
        return InferRequest(inputs, batch, request_id, outputs, params, binary, timeout or None)

    def _entry(self, item: Any, kind: str, table: dict[str, _Tensor], names: str
               ) -> tuple[str, _Tensor]:
        """An entry of 'inputs' or 'outputs': a JSON object naming a tensor of the model."""
        if type(item) is not dict:
            raise InvalidInput(f"each entry of '{kind}s' must be a JSON object, not {_short(item)}")
        name = item.get("name")
        if type(name) is not str or (spec := table.get(name)) is None:
            raise InvalidInput(
                f"unexpected inference {kind} {_short(name)} for model "
                f"'{self.name}'; its {kind}s are {names}"
            )
        return name, spec

    def _requested(self, items: Any) -> list[RequestedOutput] | None:
        if not items:
            return None  # absent or empty: all outputs
        if type(items) is not list:
            raise InvalidInput("'outputs' must be a list")
        requested: dict[str, RequestedOutput] = {}
        for item in items:
            name, spec = self._entry(item, "output", self._outputs, self._output_names)
            if name in requested:
                raise InvalidInput(f"output '{name}' is requested more than once")
            params = item.get("parameters") or {}
            if type(params) is not dict:
                raise InvalidInput(f"output '{name}' 'parameters' must be a JSON object")
            if "shared_memory_region" in params:
                raise Unsupported(f"output '{name}' uses shared memory, which is not supported")
            binary = params.get("binary_data")
            if binary is not None and type(binary) is not bool:
                raise InvalidInput(f"output '{name}' binary_data must be true or false")
            top = params.get("classification", 0)
            if type(top) is not int or top < 0:
                raise InvalidInput(
                    f"output '{name}' classification must be a non-negative "
                    f"integer, not {_short(top)}"
                )
            if top and spec.is_bytes:
                raise InvalidInput(f"output '{name}' is BYTES and cannot be classified")
            requested[name] = RequestedOutput(name, binary, top)
        return list(requested.values())

    def _decode_raw(self, body: bytes) -> InferRequest:
        """Inference-Header-Content-Length 0: the whole body is the model's single input."""
        spec = self._single
        if spec is None:
            raise InvalidInput(
                f"a raw binary request (Inference-Header-Content-Length: 0) needs "
                f"a model with one input; model '{self.name}' has {len(self._inputs)}"
            )
        # BYTES: the body is one element; otherwise batch 1 and at most one dim from the size
        shape = [1] * len(spec.shape) if spec.is_bytes else list(spec.shape)
        shape[: spec.lead] = [1] * spec.lead
        free = [i for i, d in enumerate(shape) if d == -1]
        if len(free) > 1:
            raise _bad(
                spec.name,
                f"with dims {_fmt(spec.shape)} cannot take a raw binary request: "
                "more than one dimension is variable",
            )
        if free:
            row = math.prod(d for d in shape if d != -1) * spec.itemsize
            shape[free[0]] = len(body) // row if row else 0
        shape, count = spec.check_shape(shape)
        if spec.is_bytes:
            element: Any = spec.decode_text([bytes(body)])[0] if spec.text else bytes(body)
            array = _object_array([element]).reshape(shape)
        else:
            array = spec.from_blob(memoryview(body), shape, count)
        inputs = {spec.name: array if spec.reshape is None else spec.to_backend(array)}
        return InferRequest(inputs, 1, binary_output=True)

    # ---------------------------------------------------------------- encoding
    def encode(
        self, request: InferRequest, outputs: dict[str, Array], model_version: str
    ) -> tuple[bytes, dict[str, str]]:
        """The response body and its headers for ``outputs`` of ``request``."""
        entries: list[dict[str, Any]] = []
        blobs: list[bytes | memoryview] = []
        for wanted in self._all_outputs if request.outputs is None else request.outputs:
            name = wanted.name
            spec = self._outputs[name]
            array = outputs.get(name)
            if array is None:
                raise BackendError(f"model '{self.name}' did not produce output '{name}'")
            if spec.reshape is not None:
                array = spec.from_backend(array)
            datatype = spec.datatype
            if wanted.classification:
                array = _classify(array, wanted.classification, self.batching,
                                  self._labels.get(name))
                datatype = _BYTES
            elif not spec.is_bytes and array.dtype != spec.dtype:
                array = array.astype(spec.dtype)
            entry: dict[str, Any] = {"name": name, "datatype": datatype.v2}
            entry["shape"] = list(array.shape)
            if request.binary_output if wanted.binary is None else wanted.binary:
                if datatype.is_bytes:
                    blob: bytes | memoryview = _bytes_blob(array.ravel().tolist())
                else:
                    blob = np.ascontiguousarray(array).reshape(-1).view(np.uint8).data
                entry["parameters"] = {"binary_data_size": len(blob)}
                blobs.append(blob)
            elif datatype.is_bytes:
                entry["data"] = _texts(array.ravel().tolist(), name)
            else:
                entry["data"] = array.ravel()
            entries.append(entry)
        response: dict[str, Any] = {"model_name": self.name}
        if model_version:
            response["model_version"] = model_version
        if request.id is not None:
            response["id"] = request.id
        response["outputs"] = entries
        header = orjson.dumps(response, option=orjson.OPT_SERIALIZE_NUMPY)
        if not blobs:
            return header, {CONTENT_TYPE: JSON_CONTENT_TYPE}
        headers = {CONTENT_TYPE: BINARY_CONTENT_TYPE, HEADER_LENGTH: str(len(header))}
        return b"".join([header, *blobs]), headers

    # ---------------------------------------------------------------- the client side
    def encode_request(self, inputs: dict[str, Array]) -> tuple[bytes, dict[str, str]]:
        """An infer request for ``inputs`` (as ``decode`` gives them) in the binary tensor
        extension, asking for every output as binary data: what the gateway sends a function
        for a batch. The inverse of ``decode``."""
        entries: list[dict[str, Any]] = []
        blobs: list[bytes | memoryview] = []
        for name, array in inputs.items():
            spec = self._inputs[name]
            if spec.reshape is not None:  # back from the backend's shape to the config's
                array = _reshape(array, spec.lead, spec.model_dims, spec.dims,
                                 f"input '{name}'", BackendError)
            if spec.is_bytes:
                blob: bytes | memoryview = _bytes_blob(array.ravel().tolist())
            else:
                blob = np.ascontiguousarray(array, spec.dtype).reshape(-1).view(np.uint8).data
            entries.append({"name": name, "datatype": spec.datatype.v2, "shape": list(array.shape),
                            "parameters": {"binary_data_size": len(blob)}})
            blobs.append(blob)
        header = orjson.dumps({"inputs": entries, "parameters": {"binary_data_output": True}})
        headers = {CONTENT_TYPE: BINARY_CONTENT_TYPE, HEADER_LENGTH: str(len(header))}
        return b"".join([header, *blobs]), headers

    def decode_response(self, body: bytes, header_length: int | None) -> dict[str, Array]:
        """The outputs of an infer response (JSON, or binary with ``header_length``), checked
        against the config as ``decode`` checks inputs, and shaped as ``encode`` takes them.
        The inverse of ``encode``; a response that does not fit is ``InvalidInput``."""
        total = len(body)
        if header_length is not None and not 0 < header_length <= total:
            raise InvalidInput(f"Inference-Header-Content-Length {header_length} is outside "
                               f"the response body of {total} bytes")
        view = memoryview(body)
        try:
            doc = orjson.loads(body if header_length is None else view[:header_length])
        except orjson.JSONDecodeError as exc:
            raise InvalidInput(f"malformed JSON in the response: {exc}") from None
        items = doc.get("outputs") if type(doc) is dict else None
        if type(items) is not list:
            raise InvalidInput("the response has no 'outputs' list")
        offset = total if header_length is None else header_length
        outputs: dict[str, Array] = {}
        for item in items:
            name, spec = self._entry(item, "output", self._outputs, self._output_names)
            if item.get("datatype") != spec.datatype.v2:
                raise spec._bad(f"has datatype {_short(item.get('datatype'))} but the model's "
                                f"is {spec.datatype.v2}")
            shape, count = spec.check_shape(item.get("shape"))
            params = item.get("parameters")
            size = params.get("binary_data_size") if type(params) is dict else None
            if size is not None:
                if header_length is None or type(size) is not int or not 0 <= size <= (
                    total - offset
                ):
                    raise spec._bad(f"has binary_data_size {_short(size)} that the response's "
                                    "binary data does not hold")
                array = spec.from_blob(view[offset:offset + size], shape, count)
                offset += size
            else:
                array = spec.from_json(item.get("data"), shape, count)
            outputs[name] = array if spec.reshape is None else spec.to_backend(array)
        if offset != total:
            raise InvalidInput(f"the response has {total - offset} bytes of binary data that "
                               "no output claims")
        return outputs
