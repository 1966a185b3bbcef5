"""The V2 infer route on the HTTP edge's fast path (``modelfn.net.fast_path``).

``handlers.http`` registers ``RestFastPath`` with the edge when it builds the server. The
edge then hands it every ``POST /v2/models/{m}[/versions/{v}]/infer`` whose request target
is plain (no query, no percent-escapes) and whose ``Content-Length`` is no larger than the
JSON limit, body whole; the request is checked as ``InferEndpoint`` checks it, decoded and
queued at once (``DataPlane.submit``), and its answer written from the batcher's callback.
A body whose JSON is large enough to be decoded in the helper process goes through a task
instead, as does every failure: it is answered as the app's own handler answers it on the
ASGI path, so every answer is the one that path gives.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from modelfn.protocol.codec import HEADER_LENGTH
from modelfn.protocol.content_coding import response_coding
from modelfn.protocol.rest import compressed, infer_failure, infer_params

if TYPE_CHECKING:
    import numpy as np

    from modelfn.net.fast_path import Exchange, Pending
    from modelfn.protocol.rest import V2App
    from modelfn.protocol.tensors import InferRequest
    from modelfn.runtime.model import ModelVersion

_ROUTES: dict[bytes, dict[str, str] | None] = {}
#: request targets remembered (at most this many, this long: 256 KiB in all); any other
#: is parsed every time
_ROUTES_MAX = 1024
_ROUTE_MAX_BYTES = 256
#: the claim's key for the coding its answer gets (``Accept-Encoding``), when not identity
_CODING = "coding"


def _infer_route(url: bytes) -> dict[str, str] | None:
    """``infer_params`` of a request target the fast path may take: a plain ASCII path with
    no query, fragment or percent-escape (the ASGI path unquotes and splits those). A
    function serves a handful of models, so the answer is remembered per target."""
    try:
        return _ROUTES[url]
    except KeyError:
        pass
    params = None
    if (url.endswith(b"/infer") and url.isascii() and b"?" not in url and b"%" not in url
            and b"#" not in url):
        params = infer_params(url.decode())
    if len(_ROUTES) < _ROUTES_MAX and len(url) <= _ROUTE_MAX_BYTES:
        _ROUTES[url] = params
    return params


def _path(params: dict[str, str]) -> str:
    """The request target ``params`` were read from (a plain one: see ``_infer_route``)."""
    version = params.get("version")
    if version is None:
        return f"/v2/models/{params['model']}/infer"
    return f"/v2/models/{params['model']}/versions/{version}/infer"


def _lines(headers: dict[str, str]) -> list[bytes]:
    """An answer's headers as the lines of its head."""
    return [f"{name}: {value}\r\n".encode() for name, value in headers.items()]


class RestFastPath:
    """The V2 app's infer route as the edge's ``FastPath``; a claim is the route's
    parameters (``{"model": m}`` or ``{"model": m, "version": v}``)."""

    header = HEADER_LENGTH.encode()

    def __init__(self, app: V2App) -> None:
        self.app = app
        self.dataplane = app.infer.dataplane
        self.limits = app.infer.limits

    def claim(self, method: bytes, url: bytes, length: int, header: bytes | None,
              accept: bytes | None) -> dict[str, str] | None:
        if method != b"POST" or length > self.limits.json:
            return None  # the ASGI path refuses an oversize body before reading it
        params = _infer_route(url)
        if accept is None or params is None:
            return params
        coding = response_coding(accept)  # a claim of its own only when the answer is coded
        return params if coding is None else {**params, _CODING: coding}

    def bulk(self, claim: dict[str, str], header: bytes | None) -> bool:
        """A body of binary tensors is raw data."""
        return header is not None and header != b"0"

    def answer(self, claim: dict[str, str], header: bytes | None, body: bytes | bytearray,
               exchange: Exchange) -> Pending | None:
        """Decode and queue the request now; its answer is written from the batcher's
        callback. A request too large to decode on the loop, and every failure, goes
        through a task. Errors are checked as ``InferEndpoint.answer`` checks them, in its
        order."""
        dataplane = self.dataplane
        try:
            model = dataplane.model(claim["model"], claim.get("version"))
            length, limit = self.limits.infer(header)
            if len(body) > limit:
                raise self.limits.too_large(len(body), length)
            if dataplane.offloaded(body, length):
                return exchange.spawn(self._infer(exchange, claim, model, body, length))
            request, answer, start = dataplane.submit(model, body, length)
        except Exception as exc:
            exchange.spawn(self._fail(exchange, claim, exc))
            return None
        answer.then(partial(self._outputs, exchange, claim, model, request, start))
        return answer

    def _outputs(self, exchange: Exchange, claim: dict[str, str], model: ModelVersion,
                 request: InferRequest, start: int,
                 outcome: dict[str, np.ndarray] | Exception) -> None:
        """Write the answer, called by the batcher as it resolves the batch."""
        if isinstance(outcome, Exception):
            exchange.spawn(self._fail(exchange, claim, outcome))
            return
        try:
            content, headers = self.dataplane.encode(model, request, outcome, start)
        except Exception as exc:
            exchange.spawn(self._fail(exchange, claim, exc))
            return
        if _CODING in claim:
            content, headers = compressed(content, headers, claim[_CODING])
        exchange.respond(200, _lines(headers), content)

    async def _infer(self, exchange: Exchange, claim: dict[str, str], model: ModelVersion,
                     body: bytes | bytearray, length: int | None) -> None:
        try:
            content, headers = await self.dataplane.infer(model, body, length)
        except Exception as exc:
            await self._fail(exchange, claim, exc)
            return
        if _CODING in claim:
            content, headers = compressed(content, headers, claim[_CODING])
        exchange.respond(200, _lines(headers), content)

    async def _fail(self, exchange: Exchange, claim: dict[str, str], exc: Exception) -> None:
        """Answer as the app's handler for ``exc`` does on the ASGI path."""
        response, unexpected = infer_failure(_path(claim), exc)
        exchange.respond(response.status_code,
                         [b"%s: %s\r\n" % pair for pair in response.raw_headers
                          if pair[0] != b"content-length"],
                         bytes(response.body), close=unexpected)
