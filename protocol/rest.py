"""The KServe V2 REST app: every route in one table, every error rendered one way.

``create_app(repository)`` is the single integration point: uvicorn serves it
for Knative and containers, Mangum wraps it for Lambda. Routes follow the
Open Inference Protocol plus Triton's binary tensor, model configuration,
statistics and model repository extensions.

The infer route is the hot path: ``V2App`` answers ``POST .../infer`` ahead of Starlette's
middleware and router (the same endpoint, the same error handlers, the same answers); every
other request goes the Starlette way. Served by uvicorn, the route goes faster still, on
the HTTP edge's fast path (``rest_edge``). Either way the request itself is decoded,
run and encoded by the data plane (``dataplane``), as gRPC's are.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any, TypeVar

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from modelfn.net.fast_path import HANG_UP
from modelfn.protocol import offload
from modelfn.protocol.body_limits import BodyLimits
from modelfn.protocol.codec import HEADER_LENGTH
from modelfn.protocol.content_coding import compress, request_coding, response_coding
from modelfn.protocol.dataplane import DataPlane
from modelfn.protocol.server_metadata import EXTENSIONS, modelfn_version, server_name
from modelfn.protocol.tensors import short
from modelfn.runtime import metrics
from modelfn.runtime.errors import (
    InvalidInput,
    ModelfnError,
    ModelNotReady,
    PayloadTooLarge,
    Unsupported,
)
from modelfn.runtime.stats import EDGE

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Mapping

    from starlette.types import Message, Receive, Scope, Send

    from modelfn.runtime.model import ModelVersion
    from modelfn.runtime.repository import Repository

log = logging.getLogger("modelfn.app")
_HEADER_LENGTH = HEADER_LENGTH.encode()

#: 64 MiB by default; the Lambda handler sets Lambda's 6 MB
DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
#: JSON is the costly way to send a tensor: parsing holds the GIL and takes several times
#: the body's size in memory, against a copy-free view for binary data (bench/RESULTS.md
#: has the figures). 16 MiB of JSON (some two million numbers) is parsed in the helper
#: process; anything larger belongs in Triton's binary extension, which keeps the 64 MiB limit.
DEFAULT_MAX_JSON_BYTES = 16 * 1024 * 1024
class JSON(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def _error(status: int, message: str, headers: Mapping[str, str] | None = None) -> Response:
    return JSON({"error": message}, status_code=status, headers=headers)


#: 5xx answers that are the request's doing or the server's state, not a server fault:
#: unavailable (503) and not implemented (501, e.g. a shared-memory request) are not errors
_NOT_FAULTS = frozenset({501, 503})


def _modelfn_answer(method: str, path: str, exc: ModelfnError) -> Response:
    if exc.status_code >= 500 and exc.status_code not in _NOT_FAULTS:
        log.error("%s %s: %s", method, path, exc.message)
    elif exc.status_code == 501:
        log.info("%s %s: %s", method, path, exc.message)
    return _error(exc.status_code, exc.message, getattr(exc, "headers", None))


def _client_gone_answer(method: str, path: str) -> Response:
    """A client that hung up mid-request is a normal event: counted, logged at debug."""
    EDGE.client_disconnects += 1
    log.debug("%s %s: the client disconnected before its answer", method, path)
    return Response(status_code=499)  # nobody reads it; uvicorn drops it


def _internal_answer(method: str, path: str, exc: Exception) -> Response:
    log.exception("%s %s failed", method, path, exc_info=exc)
    return _error(500, f"internal error: {type(exc).__name__}: {exc}")


async def _modelfn_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ModelfnError)
    return _modelfn_answer(request.method, request.url.path, exc)


async def _client_gone(request: Request, exc: Exception) -> Response:
    return _client_gone_answer(request.method, request.url.path)


async def _internal_error(request: Request, exc: Exception) -> Response:
    return _internal_answer(request.method, request.url.path, exc)


def infer_failure(path: str, exc: Exception) -> tuple[Response, bool]:
    """The answer the app's handler for ``exc`` gives an infer request to ``path`` that
    failed before any of its body was read from ASGI (the HTTP edge's fast path), and
    whether ``exc`` was unexpected (an internal error: its connection is closed)."""
    if isinstance(exc, ModelfnError):
        return _modelfn_answer("POST", path, exc), False
    if isinstance(exc, ClientDisconnect):
        return _client_gone_answer("POST", path), False
    return _internal_answer("POST", path, exc), True


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    message = exc.detail
    if exc.status_code == 404:
        message = f"no route for {request.method} {request.url.path}"
    # a 405 names the methods the resource allows (RFC 9110 15.5.6): Starlette puts them there
    return _error(exc.status_code, message, exc.headers)


async def read_body(receive: Receive, declared: bytes | None, limit: int) -> bytes:
    """The whole request body, refusing (413) one over ``limit`` before reading it all."""
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(int(declared), limit)
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(size, limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


_T = TypeVar("_T")


async def withdrawn_on_hang_up(scope: Scope, work: Awaitable[_T]) -> _T:
    """``work``'s result, unless the server calls ``scope[HANG_UP]`` first because the
    client hung up: then ``work`` is cancelled (a request waiting in the batcher leaves it
    and counts CANCELED; one running lets its batch answer the others) and
    ``ClientDisconnect`` raised. ``work`` runs in this task: the hang-up cancels the task,
    and the cancellation is taken back here. A server that never calls the hook (Mangum: a
    Lambda invocation runs to its end) costs a dict entry. ASGI's own way, a task waiting
    on ``receive`` for the disconnect, costs one more task per request."""
    current = asyncio.current_task()
    assert current is not None
    left = over = False

    def hang_up() -> None:
        nonlocal left
        if not over and not left:
            left = True
            current.cancel()

    scope[HANG_UP] = hang_up
    try:
        return await work
    except asyncio.CancelledError:
        if left and current.uncancel() == 0:  # ours alone, and ``work`` withdrawn by now
            raise ClientDisconnect() from None
        raise
    finally:
        over = True
        del scope[HANG_UP]


class InferEndpoint:
    """``POST .../infer`` as a bare ASGI endpoint: the hot path skips Starlette's Request
    and Response objects; errors still reach the app's one error handler.
    """

    def __init__(self, dataplane: DataPlane, max_body_bytes: int, max_json_bytes: int
                 ) -> None:
        self.dataplane = dataplane
        self.limits = BodyLimits.of(max_body_bytes, max_json_bytes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        start, body = await self.answer(scope, receive)
        await send(start)
        await send(body)

    async def answer(self, scope: Scope, receive: Receive) -> tuple[Message, Message]:
        """The answer's two ASGI messages; a failure raises before anything is sent."""
        params = scope["path_params"]
        model = self.dataplane.model(params["model"], params.get("version"))
        declared = header_length = coding = accept = None
        for name, value in scope["headers"]:
            if name == b"content-length":
                declared = value
            elif name == _HEADER_LENGTH:
                header_length = value
            elif name == b"accept-encoding":
                accept = value
            elif name == b"content-encoding":
                coding = value
        length, limit = self.limits.infer(header_length)
        try:
            body = await read_body(receive, declared, limit)
        except PayloadTooLarge as exc:
            raise self.limits.too_large(exc.size, length) from None
        if coding is not None:
            body = self.limits.inflated(body, request_coding(coding), length)
        content, headers = await withdrawn_on_hang_up(
            scope, self.dataplane.infer(model, body, length))
        if accept is not None:
            content, headers = compressed(content, headers, response_coding(accept))
        raw = [(k.encode(), v.encode()) for k, v in headers.items()]
        raw.append((b"content-length", str(len(content)).encode()))
        return ({"type": "http.response.start", "status": 200, "headers": raw},
                {"type": "http.response.body", "body": content})


def compressed(content: bytes, headers: dict[str, str], coding: str | None
               ) -> tuple[bytes, dict[str, str]]:
    """An infer answer in the coding its ``Accept-Encoding`` chose (None: as it is). An
    answer over ``MAX_COMPRESSED_BYTES`` goes as it is: compressing it would hold the event
    loop, and every other request, for as long (identity is always acceptable to a client
    that does not refuse it with ``identity;q=0``)."""
    if coding is None or len(content) > MAX_COMPRESSED_BYTES:
        return content, headers
    return compress(content, coding), {**headers, "content-encoding": coding}


#: the largest answer compressed when the client asks (Triton compresses any size)
MAX_COMPRESSED_BYTES = 1 << 20

_MODELS = "/v2/models/"
_INFER = "/infer"


def infer_params(path: str) -> dict[str, str] | None:
    """``{"model": m}`` or ``{"model": m, "version": v}`` for an infer path, else None: what
    the two infer routes would match (a segment is one or more characters other than ``/``)."""
    if not (path.startswith(_MODELS) and path.endswith(_INFER)):
        return None
    parts = path[len(_MODELS):-len(_INFER)].split("/")
    if len(parts) == 1:
        return {"model": parts[0]} if parts[0] else None
    if len(parts) == 3 and parts[1] == "versions" and parts[0] and parts[2]:
        return {"model": parts[0], "version": parts[2]}
    return None


class V2App(Starlette):
    """Starlette with one shortcut: an infer request goes straight to ``InferEndpoint``,
    skipping the middleware stack, the router and their per-request closures and send
    wrappers. A failure is rendered by the handler Starlette would pick, and an unexpected
    one is raised again after its 500 answer, as Starlette's ``ServerErrorMiddleware`` does.
    """

    infer: InferEndpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] == "http" and scope["method"] == "POST"
                and not scope.get("root_path")):
            params = infer_params(scope["path"])
            if params is not None:
                scope["app"] = self
                scope["path_params"] = params
                try:
                    start, body = await self.infer.answer(scope, receive)
                except Exception as exc:
                    await self._fail(scope, receive, send, exc)
                    return
                await send(start)
                await send(body)
                return
        await super().__call__(scope, receive, send)

    async def _fail(self, scope: Scope, receive: Receive, send: Send, exc: Exception) -> None:
        response, unexpected = await self.failure(scope, exc, receive)
        await response(scope, receive, send)
        if unexpected:
            raise exc

    async def failure(self, scope: Scope, exc: Exception,
                      receive: Receive | None = None) -> tuple[Response, bool]:
        """The answer the app's handler for ``exc`` gives, and whether ``exc`` was unexpected
        (an internal error: Starlette raises it again once answered)."""
        handler = next(self.exception_handlers[cls] for cls in type(exc).__mro__
                       if cls in self.exception_handlers)
        request = Request(scope, receive) if receive is not None else Request(scope)
        return await handler(request, exc), handler is _internal_error


def create_app(repository: Repository, *, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
               max_json_bytes: int = DEFAULT_MAX_JSON_BYTES,
               offload_bytes: int | None = offload.OFFLOAD_BYTES,
               stop_on_shutdown: bool = True) -> V2App:
    """The V2 app over an already-loaded repository."""

    def model_of(request: Request) -> ModelVersion:
        params = request.path_params
        return repository.get(params["model"], params.get("version"))

    async def live(request: Request) -> Response:
        return JSON({"live": True})

    async def ready(request: Request) -> Response:
        # 503 rather than Triton's 400: load balancers and probes read 503 as "not yet".
        # Ready once some model serves, though others failed (``Repository.ready``)
        ok = repository.ready
        return JSON({"ready": ok}, status_code=200 if ok else 503)

    async def server_metadata(request: Request) -> Response:
        return JSON({"name": server_name(), "version": modelfn_version(), "extensions": EXTENSIONS})

    async def model_metadata(request: Request) -> Response:
        params = request.path_params
        return JSON(repository.metadata(params["model"], params.get("version")))

    async def model_ready(request: Request) -> Response:
        # a version that is not ready says why (Triton: 400 and "Model version not ready");
        # 503, as the server's own ready, for probes to read it as unavailable
        model = model_of(request)
        if model.ready:
            return JSON({"name": model.name, "ready": True})
        error = ModelNotReady(model.name, model.version or None, model.reason).message
        return JSON({"name": model.name, "ready": False, "error": error}, status_code=503)

    async def model_config(request: Request) -> Response:
        return JSON(model_of(request).config.to_json())

    async def stats(request: Request) -> Response:
        params = request.path_params
        models = repository.select(params.get("model"), params.get("version"))
        return JSON({"model_stats": [m.stats.to_json() for m in models]})

    async def repository_index(request: Request) -> Response:
        body = await read_body(request.receive, None, 1 << 20)
        only_ready = False
        if body.strip():
            try:
                query = orjson.loads(body)
            except orjson.JSONDecodeError as exc:
                raise InvalidInput(f"malformed JSON in repository index request: {exc}") from None
            if not isinstance(query, dict):
                raise InvalidInput("repository index request must be a JSON object")
            only_ready = query.get("ready", False)
            if type(only_ready) is not bool:
                raise InvalidInput(f"repository index 'ready' must be true or false, "
                                   f"not {short(only_ready)}")
        return JSON(repository.index(ready=only_ready))

    async def model_control(request: Request) -> Response:
        action = request.url.path.rsplit("/", 1)[-1]
        raise Unsupported(
            f"cannot {action} model '{request.path_params['model']}': model control is not "
            "enabled; modelfn serves the versions it loaded at start (Triton's model control "
            "mode NONE), so serve or deploy the version you want instead"
        )

    async def prometheus(request: Request) -> Response:
        return Response(metrics.exposition(repository), media_type=metrics.CONTENT_TYPE)

    infer = InferEndpoint(DataPlane(repository, offload_bytes=offload_bytes), max_body_bytes,
                          max_json_bytes)
    model = "/v2/models/{model}"
    versioned = "/v2/models/{model}/versions/{version}"
    # Starlette tries routes in order: the hot ones first
    routes = [
        Route(f"{model}/infer", infer, methods=["POST"]),
        Route(f"{versioned}/infer", infer, methods=["POST"]),
        Route("/v2/health/live", live),
        Route("/v2/health/ready", ready),
        Route("/v2", server_metadata),
        Route("/v2/models/stats", stats),
        Route("/v2/repository/index", repository_index, methods=["POST"]),
        Route("/v2/repository/models/{model}/load", model_control, methods=["POST"]),
        Route("/v2/repository/models/{model}/unload", model_control, methods=["POST"]),
        Route("/metrics", prometheus),
    ]
    for base in (model, versioned):
        routes += [
            Route(base, model_metadata),
            Route(f"{base}/ready", model_ready),
            Route(f"{base}/config", model_config),
            Route(f"{base}/stats", stats),
        ]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        if stop_on_shutdown:
            await repository.stop()
        offload.shutdown()

    app = V2App(
        routes=routes,
        exception_handlers={
            ModelfnError: _modelfn_error,
            HTTPException: _http_error,
            ClientDisconnect: _client_gone,
            Exception: _internal_error,
        },
        lifespan=lifespan,
    )
    app.infer = infer
    app.state.repository = repository
    return app
