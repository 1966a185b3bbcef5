"""One V2 inference call from a user's machine: ``modelfn invoke`` and scripts.

Requests are encoded by the load generator's ``prepare_request`` (JSON, or Triton's binary
tensor extension asking for binary outputs), so ``invoke`` and ``bench`` send the same bytes.
Answers are decoded here, JSON or binary, into numpy arrays. Auth is none, SigV4 for
``AWS_IAM`` function URLs, or a gateway API key (``RequestAuth``). Every failure is a
``ModelfnError``: an unreachable URL, the server's own status and ``{"error": ...}`` message,
or a 200 answer that is not V2 (``client.endpoint``).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx
import numpy as np
import orjson

from modelfn.client.auth import Auth, RequestAuth, region_of
from modelfn.client.bodies import prepare_request
from modelfn.client.endpoint import (
    NotV2,
    ServerError,
    Unreachable,
    checked_metadata,
    error_from_answer,
    infer_url,
    is_shape,
    json_kind,
    json_object,
    model_url,
    not_json,
    typed_array,
)
from modelfn.protocol.nonfinite import loads
from modelfn.runtime.datatypes import BY_V2
from modelfn.runtime.errors import InvalidInput

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["Auth", "NotV2", "Output", "ServerError", "Unreachable", "V2Client", "as_json",
           "decode_response"]
HEADER_LENGTH = "inference-header-content-length"


@dataclass(frozen=True)
class Output:
    name: str
    datatype: str
    data: np.ndarray  # shaped as the response says

    @property
    def shape(self) -> list[int]:
        return list(self.data.shape)


def _split_bytes(raw: bytes, count: int, name: str) -> np.ndarray:
    """A BYTES tensor's elements from their 4-byte little-endian length prefixes."""
    items: list[bytes] = []
    offset = 0
    for _ in range(count):
        if offset + 4 > len(raw):
            raise InvalidInput(f"output '{name}': BYTES data ends inside a length prefix")
        (size,) = struct.unpack_from("<I", raw, offset)
        items.append(raw[offset + 4: offset + 4 + size])
        offset += 4 + size
    if offset != len(raw):
        raise InvalidInput(f"output '{name}': BYTES data does not match its element count")
    return np.array(items, dtype=object)


def decode_response(body: bytes, header_length: int | None) -> tuple[dict[str, Any],
                                                                      list[Output]]:
    """The response header (JSON) and its outputs as arrays, from a JSON or binary body;
    ``InvalidInput`` says what is wrong with a body that is not a V2 response."""
    if header_length is not None and not 0 <= header_length <= len(body):
        raise InvalidInput(f"{HEADER_LENGTH} {header_length} is outside the "
                           f"{len(body)}-byte body")
    document = body[:header_length] if header_length else body
    try:
        header = loads(document)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(not_json(document, exc)) from None
    if not isinstance(header, dict):
        raise InvalidInput(f"the answer is {json_kind(header)}, not an object")
    tensors = header.get("outputs", [])
    if not isinstance(tensors, list):
        raise InvalidInput(f"its outputs are {json_kind(tensors)}, not a list")
    offset = header_length or 0
    outputs = []
    for tensor in tensors:
        array, offset = _output(tensor, body, offset)
        outputs.append(array)
    return header, outputs


def _output(tensor: object, body: bytes, offset: int) -> tuple[Output, int]:
    """One output tensor of a response, and where the next one's binary data starts."""
    if not isinstance(tensor, dict) or not isinstance(tensor.get("name"), str):
        raise InvalidInput("an output has no name")
    name, shape = tensor["name"], tensor.get("shape")
    if not is_shape(shape, variable=False):
        raise InvalidInput(f"output '{name}' has shape {shape!r}, not a list of dimensions")
    named = tensor.get("datatype")
    datatype = BY_V2.get(named) if isinstance(named, str) else None
    if datatype is None:
        raise InvalidInput(f"output '{name}' has unknown datatype {named}")
    size = (tensor.get("parameters") or {}).get("binary_data_size")
    count = math.prod(shape)
    if size is not None:
        if not isinstance(size, int) or size < 0:
            raise InvalidInput(f"output '{name}' has binary_data_size {size!r}")
        raw, offset = body[offset: offset + size], offset + size
        if datatype.is_bytes:
            array = _split_bytes(raw, count, name)
        elif len(raw) % datatype.numpy.itemsize:
            raise InvalidInput(f"output '{name}': {len(raw)} bytes are not whole "
                               f"{datatype.v2} values")
        else:
            array = np.frombuffer(raw, dtype=datatype.numpy)
    else:
        try:
            array = typed_array(tensor.get("data"), datatype)
        except ValueError as exc:
            raise InvalidInput(f"output '{name}': {exc}") from None
    if array.size != count:
        raise InvalidInput(f"output '{name}' has {array.size} values for shape {shape}")
    return Output(name, datatype.v2, array.reshape(shape)), offset


def as_json(header: Mapping[str, Any], outputs: list[Output]) -> dict[str, Any]:
    """The response as V2 JSON, binary outputs included as ``data``."""
    doc = {k: v for k, v in header.items() if k != "outputs"}
    doc["outputs"] = [{
        "name": o.name, "datatype": o.datatype, "shape": o.shape,
        "data": ([v.decode(errors="replace") for v in o.data.ravel()]
                 if o.datatype == "BYTES" else o.data.ravel().tolist()),
    } for o in outputs]
    return doc


@dataclass
class V2Client:
    """Calls to one V2 base URL (a function, a gateway, a function URL)."""

    url: str
    auth: Auth = "none"
    api_key: str | None = None
    region: str | None = None
    timeout_s: float = 60.0

    def __post_init__(self) -> None:
        self.region = self.region or region_of(urlsplit(self.url).netloc)
        self._auth = RequestAuth(self.auth, self.api_key, self.region)

    def _send(self, method: str, url: str, body: bytes, headers: Mapping[str, str]
              ) -> httpx.Response:
        sent = self._auth.headers(method, url, headers, body)
        try:
            answer = httpx.request(method, url, content=body, headers=sent,
                                   timeout=self.timeout_s)
        except httpx.ConnectError as exc:
            raise Unreachable(f"{self.url} refused the connection or cannot be reached: "
                              f"{exc}") from exc
        except httpx.TimeoutException as exc:
            raise Unreachable(f"{url} did not answer within {self.timeout_s:g} s") from exc
        except httpx.HTTPError as exc:
            raise Unreachable(f"{method} {url} failed: {type(exc).__name__}: {exc}") from exc
        if answer.status_code != 200:
            error = error_from_answer(answer.status_code, answer.content)
            if answer.status_code == 403 and self.auth != "iam" and (
                    "x-amzn-errortype" in answer.headers
                    or region_of(urlsplit(url).netloc) is not None):
                error = ServerError(403, f"{error.message} (the request was not signed: an "
                                         "AWS_IAM function URL needs --auth iam)")
            raise error
        return answer

    def metadata(self, model: str, version: str | None = None) -> dict[str, Any]:
        """The model's V2 metadata, its inputs checked (``checked_metadata``)."""
        target = model_url(self.url, model, version)
        answer = self._send("GET", target, b"", {})
        return checked_metadata(json_object(answer.content, target), target)

    def infer_body(self, model: str, body: bytes, headers: Mapping[str, str],
                   version: str | None = None) -> tuple[dict[str, Any], list[Output]]:
        """Send an already encoded request; the decoded answer."""
        target = infer_url(self.url, model, version)
        answer = self._send("POST", target, body, headers)
        length = answer.headers.get(HEADER_LENGTH)
        try:
            if length is not None and not length.strip().isdigit():
                raise InvalidInput(f"{HEADER_LENGTH} {length!r} is not a byte count")
            return decode_response(answer.content, int(length) if length else None)
        except InvalidInput as exc:
            raise NotV2(target, exc.message) from None

    def infer(self, model: str, inputs: Mapping[str, np.ndarray], *, binary: bool = False,
              version: str | None = None, fields: Mapping[str, Any] | None = None
              ) -> tuple[dict[str, Any], list[Output]]:
        """``inputs`` sent to ``model``, with a V2 document's ``id``, ``parameters`` and
        ``outputs`` (``fields``); the answer's header and its outputs."""
        request = prepare_request(inputs, binary=binary, fields=fields)
        return self.infer_body(model, request.body, request.headers, version)
