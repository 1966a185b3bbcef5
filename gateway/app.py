"""The gateway as one ASGI app: V2 paths in, the right function's answer out.

- ``/v2/models/{m}[/versions/{v}]/...`` (infer, metadata, ready, config, stats) goes to
  the function the routing table names; the body and the answer pass through unparsed,
  with the function's status, headers (``Inference-Header-Content-Length``, content
  type) and V2 body unchanged, and hop-by-hop headers dropped.
- Except infer requests for a version whose function instances take one request at a
  time (Lambda): the gateway batches those itself (``batching``) and answers each caller,
  inflating a compressed body (``Content-Encoding``) and compressing the answer its
  ``Accept-Encoding`` asks for, as the function would (``protocol.content_coding``).
  A caller that hangs up while its request waits for a batch is withdrawn from the queue
  (counted CANCELED and as a client disconnect, never as an answer).
- Statistics (``GET .../stats``) of those versions are the gateway's own, since it is where
  their callers are counted; ``GET /v2/models/stats`` merges every routed version's
  (``stats``).
- ``GET /v2/models`` and Triton's ``POST /v2/repository/index`` list the routed models;
  ``/v2/health/live`` and ``/v2/health/ready`` (ready once the routing table is loaded)
  are the gateway's own.
- ``/metrics`` is the gateway's own series, with Triton's ``nv_inference_*`` for the
  versions it batches for. Health and metrics stay open when API keys
  are on, unless ``protect_metrics``.
- Errors of the gateway itself (unknown model, no key, cold budget spent) use the V2
  ``{"error": ...}`` shape too.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

import orjson
from starlette.requests import ClientDisconnect

from modelfn.gateway.auth import NoApiKey
from modelfn.gateway.batching import DEFAULT_INSTANCES, GatewayBatching
from modelfn.gateway.identity import server_metadata
from modelfn.gateway.limits import DEFAULT_MAX_BODY_BYTES, FunctionLimits
from modelfn.gateway.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from modelfn.gateway.metrics import GatewayMetrics
from modelfn.gateway.origins import Origins
from modelfn.gateway.stats import GatewayStatistics
from modelfn.gateway.upstream import UpstreamClient, UpstreamResponse
from modelfn.net.headers import HOP_BY_HOP
from modelfn.protocol import offload
from modelfn.protocol.codec import HEADER_LENGTH
from modelfn.protocol.content_coding import request_coding, response_coding
from modelfn.protocol.rest import compressed, read_body
from modelfn.runtime.errors import InvalidInput, ModelfnError, ModelNotFound, PayloadTooLarge
from modelfn.runtime.stats import EDGE

if TYPE_CHECKING:
    from collections.abc import Iterable

    from starlette.types import Receive, Scope, Send

    from modelfn.gateway.auth import ApiKeys
    from modelfn.gateway.batching import BatchedVersion
    from modelfn.gateway.router import Router, Upstream

logger = logging.getLogger("modelfn.gateway")

_JSON = [(b"content-type", b"application/json")]
#: the upstream's own name and clock: the gateway's server writes its own
_UPSTREAM_SERVER = frozenset({"server", "date"})
#: response headers not relayed: the upstream connection's, its chunking (the body is read
#: whole and sent in one piece; a ``content-length`` stays), and the upstream server's
_NOT_RELAYED = HOP_BY_HOP | {"transfer-encoding"} | _UPSTREAM_SERVER


async def _send_json(send: Send, status: int, content: Any,
                     headers: list[tuple[bytes, bytes]] | None = None) -> None:
    body = orjson.dumps(content)
    await send({"type": "http.response.start", "status": status,
                "headers": [*_JSON, (b"content-length", str(len(body)).encode()),
                            *(headers or ())]})
    await send({"type": "http.response.body", "body": body})


class GrpcOnly(ModelfnError):
    """The model's function speaks V2 gRPC only (deployed with ``--protocol grpc``)."""

    status_code = 501

    def __init__(self, upstream: Upstream) -> None:
        which = (f"version {upstream.version}" if upstream.version is not None
                 else "the versions its traffic goes to")
        super().__init__(f"model '{upstream.model}' ({which}) is served over V2 gRPC only "
                         "(deployed with --protocol grpc): send the request to the "
                         "gateway's gRPC port")


class Gateway:
    def __init__(self, router: Router, *, upstream: UpstreamClient | None = None,
                 api_keys: ApiKeys | None = None, protect_metrics: bool = False,
                 max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
                 batch_instances: int = DEFAULT_INSTANCES,
                 allowed_origins: Iterable[str] = ()) -> None:
        self.router = router
        self.origins = Origins(allowed_origins)
        self.upstream = upstream or UpstreamClient()
        self.api_keys = api_keys
        self.protect_metrics = protect_metrics
        self.max_body_bytes = max_body_bytes
        self._limits = FunctionLimits.of_function(max_body_bytes)
        self._lambda_limits = FunctionLimits.of_function(max_body_bytes, on_lambda=True)
        self.metrics = GatewayMetrics()
        self.batching = GatewayBatching(self.upstream, self.metrics, instances=batch_instances,
                                        limits=(self._limits, self._lambda_limits))
        self.statistics = GatewayStatistics(router, self.upstream, self.metrics)
        self._keys_watch: asyncio.Task[None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path: str = scope["path"]
        method: str = scope["method"]
        try:
            origin = self.origins.check(scope)  # a browser's request: refused unless allowed
            if origin is not None:
                if self.origins.is_preflight(scope):
                    await self.origins.answer_preflight(origin, send)
                    return
                send = self.origins.marking(origin, send)
            if path == "/v2/models/stats" and method == "GET":
                self._authorize(scope)
                await _send_json(send, 200, {"model_stats": await self.statistics.all_models()})
            elif path.startswith("/v2/models/"):
                self._authorize(scope)
                await self._proxy(scope, receive, send)
            elif path == "/v2" and method == "GET":
                await _send_json(send, 200, server_metadata())
            elif path == "/v2/health/live" and method == "GET":
                await _send_json(send, 200, {"live": True})
            elif path == "/v2/health/ready" and method == "GET":
                ready = self.router.loaded
                await _send_json(send, 200 if ready else 503, {"ready": ready})
            elif path == "/metrics" and method == "GET":
                if self.protect_metrics:
                    self._authorize(scope)
                await self._send_metrics(send)
            elif path == "/v2/models" and method == "GET":
                self._authorize(scope)
                await _send_json(send, 200, {"models": self._index()})
            elif path == "/v2/repository/index" and method == "POST":
                self._authorize(scope)
                await _send_json(send, 200, [
                    {"name": m["name"], "version": str(v), "state": "READY"}
                    for m in self._index() for v in m["versions"]
                ])
            else:
                await _send_json(send, 404, {"error": f"no route for {method} {path}"})
        except NoApiKey as exc:  # RFC 9110 11.6.1: a 401 says which scheme to use
            await _send_json(send, exc.status_code, {"error": exc.message},
                             [(b"www-authenticate", b'Bearer realm="modelfn-gateway"')])
        except ModelfnError as exc:
            await _send_json(send, exc.status_code, {"error": exc.message})
        except ClientDisconnect:
            EDGE.client_disconnects += 1
            logger.debug("client disconnected from %s", path)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.router.start()
                except Exception as exc:  # report it as lifespan wants, then let it stop
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                if self.api_keys is not None and self.api_keys.path is not None:
                    self._keys_watch = asyncio.create_task(self._watch_keys(self.api_keys))
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._keys_watch is not None:
                    self._keys_watch.cancel()
                    await asyncio.gather(self._keys_watch, return_exceptions=True)
                await self.router.stop()
                await self.batching.stop()
                await self.upstream.close()
                offload.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _watch_keys(self, keys: ApiKeys) -> None:
        """Re-read the API keys file when it changes, as often as the routes."""
        while True:
            await asyncio.sleep(self.router.reload_s)
            await asyncio.to_thread(keys.refresh)

    def _authorize(self, scope: Scope) -> None:
        if self.api_keys is None:
            return
        authorization = api_key = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                authorization = value.decode("latin-1")
            elif name == b"x-api-key":
                api_key = value.decode("latin-1")
        self.api_keys.check(authorization, api_key)

    def _index(self) -> list[dict[str, Any]]:
        return [
            {"name": model, "target": routes.target, "versions": sorted(routes.versions),
             "split": {str(v): p for v, p in sorted(routes.split.items())}}
            for model, routes in sorted(self.router.tables.items())
        ]

    async def _send_metrics(self, send: Send) -> None:
        body = self.metrics.render().encode()
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", METRICS_CONTENT_TYPE.encode()),
            (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    async def _proxy(self, scope: Scope, receive: Receive, send: Send) -> None:
        parts = scope["path"].split("/")  # '', 'v2', 'models', m, ['versions', v], ...
        if len(parts) < 4 or not parts[3]:
            raise InvalidInput(f"no model named in {scope['path']}")
        model = parts[3]
        version = parts[5] if len(parts) > 5 and parts[4] == "versions" else None
        if version == "":  # .../versions//infer names no version: not "any version"
            raise ModelNotFound(model, "''")
        upstream = await self.router.resolve_fresh(model, version)
        whole = len(parts) == (7 if version is not None else 5)  # .../infer, .../stats
        # HEAD goes on as GET (the gateway's client reads whole answers); the server sends
        # the answer's head alone, with the length GET's body has
        method = "GET" if scope["method"] == "HEAD" else scope["method"]
        if method == "GET" and parts[-1] == "stats" and whole:
            own = (self.statistics.version(upstream) if version is not None
                   else await self.statistics.model(model))
            if own is not None:
                await _send_json(send, 200, {"model_stats": own})
                return
        if upstream.protocol == "grpc":
            raise GrpcOnly(upstream)
        headers = {name.decode("latin-1"): value.decode("latin-1")
                   for name, value in scope["headers"]}
        limits = self._lambda_limits if upstream.on_lambda else self._limits
        infer = method == "POST" and parts[-1] == "infer" and whole
        # the function's own limits, from Content-Length before reading (413 before any of
        # it) and while reading
        length, limit = limits.infer(headers.get(HEADER_LENGTH)) if infer else (None,
                                                                                 limits.body)
        declared = headers.get("content-length")
        try:
            body = await read_body(receive, None if declared is None else declared.encode(),
                                   limit)
        except PayloadTooLarge as exc:
            raise (limits.too_large(exc.size, length) if infer else exc) from None
        if infer and upstream.batched:
            coding = headers.get("content-encoding")
            plain = body if coding is None else limits.inflated(body, request_coding(coding),
                                                                length)
            if await self._infer_batched(upstream, length, plain, receive, send,
                                         headers.get("accept-encoding")):
                return
        query = scope.get("query_string", b"")
        target = scope["raw_path"].decode("latin-1") if scope.get("raw_path") else scope["path"]
        if query:
            target += "?" + query.decode("latin-1")
        response = await self.upstream.send(upstream, method, target, headers, body,
                                             self.metrics.route(model, upstream.label))
        try:
            await self._relay(response, send)
        finally:
            await response.aclose()

    async def _infer_batched(self, upstream: Upstream, length: int | None, body: bytes,
                             receive: Receive, send: Send, accept: str | None) -> bool:
        """Answer an infer request through a batch, in the coding ``accept`` asks for;
        False when it must be forwarded alone."""
        stats = self.metrics.route(upstream.model, upstream.label)
        try:
            answer = await _unless_gone(self.batching.version(upstream), body, length, receive)
        except ModelfnError as exc:
            stats.codes[exc.status_code] += 1
            raise
        if answer is None:
            return False
        content, answer_headers = answer
        if accept is not None:
            content, answer_headers = compressed(content, answer_headers,
                                                 response_coding(accept.encode("latin-1")))
        stats.codes[200] += 1
        raw = [(k.encode(), v.encode()) for k, v in answer_headers.items()]
        raw.append((b"content-length", str(len(content)).encode()))
        await send({"type": "http.response.start", "status": 200, "headers": raw})
        await send({"type": "http.response.body", "body": content})
        return True

    @staticmethod
    async def _relay(response: UpstreamResponse, send: Send) -> None:
        headers = [(name.lower(), value) for name, value in response.raw_headers
                   if name.decode("latin-1").lower() not in _NOT_RELAYED]
        await send({"type": "http.response.start", "status": response.status_code,
                    "headers": headers})
        await send({"type": "http.response.body", "body": await response.aread()})


async def _disconnected(receive: Receive) -> None:
    """Returns when the client hangs up (its body was read whole before)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def _unless_gone(version: BatchedVersion, body: bytes, header_length: int | None,
                       receive: Receive) -> tuple[bytes, dict[str, str]] | None:
    """``version.infer``, given up when the client hangs up first: the batcher withdraws
    the request if it is still queued (its rows never go to the function) and counts it
    CANCELED; the gateway counts a client disconnect, and no answer."""
    infer = asyncio.ensure_future(version.infer(body, header_length))
    gone = asyncio.ensure_future(_disconnected(receive))
    try:
        await asyncio.wait((infer, gone), return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        infer.cancel()
        raise
    finally:
        gone.cancel()
    if not infer.done():  # the client left first
        infer.cancel()
        await asyncio.gather(infer, gone, return_exceptions=True)
        raise ClientDisconnect()
    return infer.result()
