"""KServe V2 REST inference requests and responses: JSON tensors and Triton's binary extension.

``ModelCodec`` is built once per model; the config's decisions (datatypes, shapes,
reshapes, required inputs) are resolved in its ``tensors`` (``tensors.ModelTensors``,
shared with the gRPC codec), so ``decode`` and ``encode`` do per-request work only.

Behaviour worth knowing:

- Binary inputs are zero-copy, read-only numpy views of the request body.
- JSON ``data`` may be flat or nested. Each element must be of the tensor's kind:
  booleans for BOOL, integers for integer types, numbers for FP32/FP64, strings
  for BYTES; FP16 has no JSON form and must be sent binary. Values out of range
  for the datatype are refused.
- ``NaN``, ``Infinity`` and ``-Infinity`` are read and written as Triton writes them
  (``runtime/nonfinite.py``): orjson alone would refuse them in a request and write them
  as ``null`` in an answer, which reads back as NaN.
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
import re
from itertools import chain
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from modelfn.protocol.nonfinite import json_data, loads
from modelfn.protocol.tensors import (
    InferRequest,
    ModelTensors,
    RequestedOutput,
    bad,
    blob_of,
    fmt,
    object_array,
    reshape,
    short,
    timeout_of,
)
from modelfn.runtime.errors import BackendError, InvalidInput, Unsupported

if TYPE_CHECKING:
    import numpy.typing as npt

    from modelfn.protocol.tensors import ServedTensor
    from modelfn.runtime.config import ModelConfig

    Array = npt.NDArray[Any]

__all__ = ["InferRequest", "ModelCodec", "RequestedOutput"]

#: request and response header giving the length of the JSON part of a binary body
HEADER_LENGTH = "inference-header-content-length"
CONTENT_TYPE = "content-type"
JSON_CONTENT_TYPE = "application/json"
BINARY_CONTENT_TYPE = "application/octet-stream"

_BINARY_ONLY = frozenset({"FP16"})
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
#: orjson reads an integer as a double only from here on (beyond int64 and uint64)
_BEYOND_INT64 = 2.0**63
_JSON_NAMES: dict[type, str] = {
    bool: "booleans",
    int: "integers",
    float: "non-integer numbers",
    str: "strings",
    type(None): "nulls",
    dict: "objects",
}


def _from_json(spec: ServedTensor, data: Any, shape: list[int], count: int) -> Array:
    """A tensor from its JSON ``data``, flat or nested, each element of the tensor's kind."""
    if spec.datatype.v2 in _BINARY_ONLY:
        raise bad(
            spec.name,
            f"is {spec.datatype.v2}, which has no JSON form; send it as "
            "binary data (binary_data_size)",
        )
    flat = data if type(data) is list else [data]
    types = set(map(type, flat))
    while list in types:
        if len(types) > 1:
            raise bad(spec.name, "mixes nested lists and values in 'data'")
        flat = list(chain.from_iterable(flat))
        types = set(map(type, flat))
    if len(flat) == count:
        accepts, expects = _JSON_SCALARS[spec.dtype.kind]
        if not types <= accepts:
            foreign = types - accepts
            found = ", ".join(sorted(_JSON_NAMES.get(t, t.__name__) for t in foreign))
            if foreign == {float} and spec.dtype.kind in "iu" and all(
                    abs(v) >= _BEYOND_INT64 for v in flat if type(v) is float):
                found = "integers beyond 64 bits, which JSON parsers read as doubles"
            raise bad(
                spec.name,
                f"of datatype {spec.datatype.v2} expects {expects} in 'data' but got {found}",
            )
        if spec.is_bytes and not spec.text:
            flat = list(map(str.encode, flat))
    return spec.from_values(flat, shape, count, "'data'")


def _object(item: Any, kind: str) -> dict[str, Any]:
    """An entry of 'inputs' or 'outputs': it must be a JSON object."""
    if type(item) is not dict:
        raise InvalidInput(f"each entry of '{kind}s' must be a JSON object, not {short(item)}")
    return item


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


#: JSON parts shorter than this are not worth a structure check: parsing them is cheap
_CHECK_STRUCTURE_BYTES = 64 * 1024
#: arrays a valid request may hold beyond its data: shapes, 'inputs', 'outputs', parameters
_SPARE_ARRAYS = 256
#: a JSON string literal: the brackets inside one are text, not arrays
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')


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
        self.tensors = tensors = ModelTensors(config, labels, text_strings=text_strings)
        self.name = tensors.name
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
        would cost seconds and gigabytes. One ``count`` over the bytes, at memchr speed;
        only a count over the bound is taken again without the strings' contents, whose
        brackets are text (BYTES data, an ``id``, a parameter).
        """
        if len(document) < _CHECK_STRUCTURE_BYTES:
            return
        text = document if isinstance(document, bytes) else bytes(document)
        stripped = False
        # a tensor's data holds an empty array only where a dimension is 0
        empty = text.count(b"[]")
        if empty > _SPARE_ARRAYS:
            text, stripped = _STRING.sub(b'""', text), True  # a "[]" in a string is text
            empty = text.count(b"[]")
        if empty > _SPARE_ARRAYS:
            raise InvalidInput(
                f"the request's JSON has {empty} empty arrays; tensor data has none unless a "
                "dimension is 0"
            )
        if self.max_arrays is None:
            return
        arrays = text.count(b"[")
        if arrays > self.max_arrays and not stripped:
            arrays = _STRING.sub(b'""', text).count(b"[")
        if arrays > self.max_arrays:
            raise InvalidInput(
                f"the request's JSON has {arrays} arrays, but a request for model "
                f"'{self.name}' can hold at most {self.max_arrays}: its inputs take at most "
                f"{self.max_elements} elements"
            )

    # ---------------------------------------------------------------- decoding
    def decode(self, body: bytes | bytearray, header_length: int | None = None) -> InferRequest:
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
        document: bytes | memoryview
        if header_length is None:
            document = body if type(body) is bytes else view
        else:
            document = view[:header_length]
        self.check_structure(document)
        try:
            doc = loads(document)
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
        tensors = self.tensors
        for item in items:
            spec = tensors.input(_object(item, "input").get("name"))
            name = spec.name
            if name in inputs:
                raise bad(name, "is given more than once")
            spec.check_datatype(item.get("datatype"))
            shape, count = spec.check_shape(item.get("shape"))
            params = item.get("parameters")
            size = None
            if params is not None:
                if type(params) is not dict:
                    raise bad(name, "'parameters' must be a JSON object")
                if "shared_memory_region" in params:
                    raise Unsupported(f"input '{name}' uses shared memory, which is not supported")
                size = params.get("binary_data_size")
            data = item.get("data")
            if (size is None) == (data is None):
                raise bad(name, "needs exactly one of 'data' and 'parameters.binary_data_size'")
            if size is not None:
                if header_length is None:
                    raise bad(
                        name,
                        "has binary_data_size but the request has no "
                        "Inference-Header-Content-Length header",
                    )
                if type(size) is not int or size < 0:
                    raise bad(
                        name, f"binary_data_size must be a non-negative integer, not {short(size)}"
                    )
                end = offset + size
                if end > total:
                    raise bad(
                        name,
                        f"has binary_data_size {size} but only {total - offset} "
                        "bytes of binary data remain",
                    )
                array = spec.from_blob(view[offset:end], shape, count)
                offset, last_binary = end, name
            elif count > total:  # every JSON element takes at least one byte
                raise bad(
                    name, f"shape {fmt(shape)} has more elements than the request could hold"
                )
            else:
                array = _from_json(spec, data, shape, count)
            batch = tensors.join_batch(name, shape, batch)
            inputs[name] = array if spec.reshape is None else spec.to_backend(array)
        if offset != total:
            owner = f"after input '{last_binary}'" if last_binary else "that no input claims"
            raise InvalidInput(
                f"the request body has {total - offset} unexpected bytes of binary data {owner}"
            )
        tensors.check_complete(inputs)
        return self._request(doc, inputs, batch or 1)

    def _request(self, doc: dict[str, Any], inputs: dict[str, Array], batch: int) -> InferRequest:
        request_id = doc.get("id")
        if request_id is not None and type(request_id) is not str:
            raise InvalidInput(f"request 'id' must be a string, not {short(request_id)}")
        params = doc.get("parameters")
        if params is None:
            params = {}
        elif type(params) is not dict:
            raise InvalidInput("request 'parameters' must be a JSON object")
        binary = params.get("binary_data_output", False)
        if type(binary) is not bool:
            raise InvalidInput(f"'binary_data_output' must be true or false, not {short(binary)}")
        outputs = self._requested(doc.get("outputs"))
        return InferRequest(inputs, batch, request_id, outputs, params, binary,
                            timeout_of(params))

    def _requested(self, items: Any) -> list[RequestedOutput] | None:
        if not items:
            return None  # absent or empty: all outputs
        if type(items) is not list:
            raise InvalidInput("'outputs' must be a list")
        requested: dict[str, RequestedOutput] = {}
        for item in items:
            name = self.tensors.output(_object(item, "output").get("name")).name
            params = item.get("parameters") or {}
            if type(params) is not dict:
                raise InvalidInput(f"output '{name}' 'parameters' must be a JSON object")
            binary = params.get("binary_data")
            if binary is not None and type(binary) is not bool:
                raise InvalidInput(f"output '{name}' binary_data must be true or false")
            requested[name] = self.tensors.requested_output(name, requested, params, binary)
        return list(requested.values())

    def _decode_raw(self, body: bytes | bytearray) -> InferRequest:
        """Inference-Header-Content-Length 0: the whole body is the model's single input."""
        spec = self.tensors.single
        if spec is None:
            raise InvalidInput(
                f"a raw binary request (Inference-Header-Content-Length: 0) needs "
                f"a model with one input; model '{self.name}' has {len(self.tensors.inputs)}"
            )
        # BYTES: the body is one element; otherwise batch 1 and at most one dim from the size
        shape = [1] * len(spec.shape) if spec.is_bytes else list(spec.shape)
        shape[: spec.lead] = [1] * spec.lead
        free = [i for i, d in enumerate(shape) if d == -1]
        if len(free) > 1:
            raise bad(
                spec.name,
                f"with dims {fmt(spec.shape)} cannot take a raw binary request: "
                "more than one dimension is variable",
            )
        if free:
            row = math.prod(d for d in shape if d != -1) * spec.itemsize
            shape[free[0]] = len(body) // row if row else 0
        shape, count = spec.check_shape(shape)
        if spec.is_bytes:
            element: Any = spec.decode_text([bytes(body)])[0] if spec.text else bytes(body)
            array = object_array([element]).reshape(shape)
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
        for wanted, datatype, array in self.tensors.output_arrays(request, outputs):
            name = wanted.name
            entry: dict[str, Any] = {"name": name, "datatype": datatype.v2}
            entry["shape"] = list(array.shape)
            if request.binary_output if wanted.binary is None else wanted.binary:
                blob = blob_of(datatype, array)
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
        if b"null" in header:  # orjson's NaN or ±Infinity, or only a "null" in text
            for entry in entries:
                data = entry.get("data")
                if isinstance(data, np.ndarray) and data.dtype.kind == "f":
                    entry["data"] = json_data(data)
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
            spec = self.tensors.inputs[name]
            if spec.reshape is not None:  # back from the backend's shape to the config's
                array = reshape(array, spec.lead, spec.model_dims, spec.dims,
                                f"input '{name}'", BackendError)
            blob = blob_of(spec.datatype, array)
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
        document = body if header_length is None else view[:header_length]
        try:
            doc = loads(document)
        except orjson.JSONDecodeError as exc:
            raise InvalidInput(f"malformed JSON in the response: {exc}") from None
        items = doc.get("outputs") if type(doc) is dict else None
        if type(items) is not list:
            raise InvalidInput("the response has no 'outputs' list")
        offset = total if header_length is None else header_length
        outputs: dict[str, Array] = {}
        for item in items:
            if type(item) is not dict:
                raise InvalidInput(f"a response output must be a JSON object, not {short(item)}")
            spec = self.tensors.output(item.get("name"))
            name = spec.name
            if item.get("datatype") != spec.datatype.v2:
                raise bad(name, f"has datatype {short(item.get('datatype'))} but the model's "
                          f"is {spec.datatype.v2}", "output")
            shape, count = spec.check_shape(item.get("shape"))
            params = item.get("parameters")
            size = params.get("binary_data_size") if type(params) is dict else None
            if size is not None:
                if header_length is None or type(size) is not int or not 0 <= size <= (
                    total - offset
                ):
                    raise bad(name, f"has binary_data_size {short(size)} that the response's "
                              "binary data does not hold", "output")
                array = spec.from_blob(view[offset:offset + size], shape, count)
                offset += size
            else:
                array = _from_json(spec, item.get("data"), shape, count)
            outputs[name] = array if spec.reshape is None else spec.to_backend(array)
        if offset != total:
            raise InvalidInput(f"the response has {total - offset} bytes of binary data that "
                               "no output claims")
        return outputs
