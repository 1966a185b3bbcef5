"""One V2 inference call from a user's machine: ``modelfn invoke`` and scripts.

Requests are encoded by the load generator's ``prepare_request`` (JSON, or Triton's binary
tensor extension asking for binary outputs), so ``invoke`` and ``bench`` send the same bytes.
Answers are decoded here, JSON or binary, into numpy arrays. Auth is none, SigV4 for
``AWS_IAM`` function URLs, or a gateway API key. Every failure is a ``ModelfnError``: an
unreachable URL, or the server's own status and ``{"error": ...}`` message.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

import httpx
import numpy as np
import orjson

from modelfn.client.auth import Signer, api_key_headers, region_of
from modelfn.client.loadgen import infer_url, prepare_request
from modelfn.runtime.datatypes import BY_V2
from modelfn.runtime.errors import InvalidInput, ModelfnError
from modelfn.runtime.nonfinite import loads_with_constants

if TYPE_CHECKING:
    from collections.abc import Mapping

Auth = Literal["none", "iam", "key"]
HEADER_LENGTH = "inference-header-content-length"


class Unreachable(ModelfnError):
    status_code = 503


class ServerError(ModelfnError):
    """The server answered with an error: its status and its own message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status


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
    """The response header (JSON) and its outputs as arrays, from a JSON or binary body."""
    document = body[:header_length] if header_length else body
    try:
        header: dict[str, Any] = orjson.loads(document)
    except orjson.JSONDecodeError as refusal:
        try:
            header = loads_with_constants(document, refusal)
        except orjson.JSONDecodeError as exc:
            raise InvalidInput(f"the response is not V2 JSON: {exc}") from None
    offset = header_length or 0
    outputs = []
    for tensor in header.get("outputs", []):
        name, shape = tensor["name"], [int(d) for d in tensor["shape"]]
        datatype = BY_V2.get(tensor["datatype"])
        if datatype is None:
            raise InvalidInput(f"output '{name}' has unknown datatype {tensor['datatype']}")
        size = (tensor.get("parameters") or {}).get("binary_data_size")
        count = math.prod(shape)
        if size is not None:
            raw = body[offset: offset + int(size)]
            offset += int(size)
            if datatype.is_bytes:
                array = _split_bytes(raw, count, name)
            elif len(raw) % datatype.numpy.itemsize:
                raise InvalidInput(f"output '{name}': {len(raw)} bytes are not whole "
                                   f"{datatype.v2} values")
            else:
                array = np.frombuffer(raw, dtype=datatype.numpy)
        elif datatype.is_bytes:
            array = np.array([str(v).encode() for v in np.ravel(np.array(tensor["data"],
                                                                          dtype=object))],
                             dtype=object)
        else:
            array = np.asarray(tensor["data"], dtype=datatype.numpy).ravel()
        if array.size != count:
            raise InvalidInput(f"output '{name}' has {array.size} values for shape {shape}")
        outputs.append(Output(name, datatype.v2, array.reshape(shape)))
    return header, outputs


def as_json(header: Mapping[str, Any], outputs: list[Output]) -> dict[str, Any]:
    """The response as V2 JSON, binary outputs included as ``data``."""
    doc = {k: v for k, v in header.items() if k != "outputs"}
    doc["outputs"] = [{
        "name": o.name, "datatype": o.datatype, "shape": o.shape,
        "data": ([v.decode(errors="replace") for v in o.data.ravel()]
                 if o.datatype == "BYTES" else o.data.ravel().tolist()),
    } for o in outputs]
    return doc


def _error(status: int, body: bytes) -> ServerError:
    try:
        message = str(orjson.loads(body).get("error") or body[:500].decode(errors="replace"))
    except (orjson.JSONDecodeError, AttributeError):
        message = body[:500].decode(errors="replace") or f"HTTP {status}"
    return ServerError(status, f"HTTP {status}: {message}")


@dataclass
class V2Client:
    """Calls to one V2 base URL (a function, a gateway, a function URL)."""

    url: str
    auth: Auth = "none"
    api_key: str | None = None
    region: str | None = None
    timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if self.auth == "key" and not self.api_key:
            raise InvalidInput("--auth key needs an API key (--api-key or MODELFN_API_KEY)")
        self._signer = Signer() if self.auth == "iam" else None
        host = urlsplit(self.url).netloc
        self.region = self.region or region_of(host)

    def _send(self, method: str, url: str, body: bytes, headers: Mapping[str, str]
              ) -> httpx.Response:
        sent = dict(headers)
        if self.auth == "key":
            assert self.api_key is not None
            sent.update(api_key_headers(self.api_key))
        if self._signer is not None:
            sent = self._signer.sign(method, url, sent, body, self.region or _env_region())
        try:
            return httpx.request(method, url, content=body, headers=sent,
                                 timeout=self.timeout_s)
        except httpx.ConnectError as exc:
            raise Unreachable(f"{self.url} refused the connection or cannot be reached: "
                              f"{exc}") from exc
        except httpx.TimeoutException as exc:
            raise Unreachable(f"{url} did not answer within {self.timeout_s:g} s") from exc
        except httpx.HTTPError as exc:
            raise Unreachable(f"{method} {url} failed: {type(exc).__name__}: {exc}") from exc

    def metadata(self, model: str, version: str | None = None) -> dict[str, Any]:
        base = f"{self.url.rstrip('/')}/v2/models/{model}"
        target = f"{base}/versions/{version}" if version else base
        answer = self._send("GET", target, b"", {})
        if answer.status_code != 200:
            raise _error(answer.status_code, answer.content)
        doc: dict[str, Any] = answer.json()
        return doc

    def infer_body(self, model: str, body: bytes, headers: Mapping[str, str],
                   version: str | None = None) -> tuple[dict[str, Any], list[Output]]:
        """Send an already encoded request; the decoded answer."""
        answer = self._send("POST", infer_url(self.url, model, version), body, headers)
        if answer.status_code != 200:
            raise _error(answer.status_code, answer.content)
        length = answer.headers.get(HEADER_LENGTH)
        return decode_response(answer.content, int(length) if length else None)

    def infer(self, model: str, inputs: Mapping[str, np.ndarray], *, binary: bool = False,
              version: str | None = None) -> tuple[dict[str, Any], list[Output]]:
        request = prepare_request(inputs, binary=binary)
        return self.infer_body(model, request.body, request.headers, version)


def _env_region() -> str:
    import os

    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
