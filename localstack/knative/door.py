"""The local Knative API's front door: who may call it, and how much they may send.

``Door`` wraps the API's ASGI app. Before a request reaches a route it must carry the
kubeconfig's bearer token (``Authorization: Bearer <token>``, compared in constant time;
401 otherwise), carry no ``Origin`` (a browser's request, which any web page the user
visits can make: 403), and declare no body over ``MAX_BODY`` (413). A body without a
length is counted as it arrives and refused once it passes the limit.
Per request: one scan of the headers, one ``hmac.compare_digest``; per body chunk, one
addition.
"""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING

import orjson

from modelfn.localstack.knative.errors import (
    ApiError,
    MalformedRequest,
    RequestEntityTooLarge,
    RequestForbidden,
    Unauthenticated,
)

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: the API server's limit on a request body (3 MiB)
MAX_BODY = 3 * 1024 * 1024


def too_large() -> RequestEntityTooLarge:
    return RequestEntityTooLarge(f"the request body is larger than the limit of {MAX_BODY} "
                                 "bytes")


class Door:
    """``Door(app, token)``: ``app`` sees only requests with ``token`` and no ``Origin``."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            length = self._check(scope)
        except ApiError as exc:
            await _refuse(exc, send)
            return
        if length is None:
            receive = _counted(receive)
        await self.app(scope, receive, send)

    def _check(self, scope: Scope) -> int | None:
        """The declared body length (None when there is none); raises what refuses it."""
        authorization = b""
        length: int | None = None
        origin = False
        for name, value in scope["headers"]:
            if name == b"authorization":
                authorization = value
            elif name == b"origin":
                origin = True
            elif name == b"content-length":
                try:
                    length = int(value)
                except ValueError:
                    raise MalformedRequest("the Content-Length header is not a number") from None
        if origin:
            raise RequestForbidden("requests from a browser (with an Origin header) are refused: "
                                   "the local Knative API is for kubectl and API clients, with the "
                                   "kubeconfig's token")
        if not hmac.compare_digest(authorization, self._expected):
            raise Unauthenticated("Unauthorized: send the bearer token of the modelfn dev "
                                  "kubeconfig")
        if length is not None and length > MAX_BODY:
            raise too_large()
        return length


def _counted(receive: Receive) -> Receive:
    """``receive`` that raises ``RequestEntityTooLarge`` once the body passes the limit
    (the app's error handler answers it)."""
    seen = 0

    async def counted() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > MAX_BODY:
                raise too_large()
        return message

    return counted


async def _refuse(exc: ApiError, send: Send) -> None:
    body = orjson.dumps(exc.status())
    await send({"type": "http.response.start", "status": exc.status_code,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
