"""The gateway's gRPC port: KServe V2 gRPC routed by model and version, passed through.

Per-model RPCs (``ModelInfer``, ``ModelMetadata``, ``ModelReady``, ``ModelConfig``,
``ModelStatistics`` for one model) go where the routing table sends the same REST
request: a pinned version to its URL, an unpinned one to the URL that applies the split;
the version is read as the function reads it (``std::stol``, as Triton), so "01" is 1.
Only functions deployed with ``--protocol grpc`` speak gRPC (Knative's ``h2c`` port);
a model whose function speaks REST, as every Lambda function URL does (they carry
HTTP/1.1 only), gets UNIMPLEMENTED saying so. ``ServerLive``, ``ServerReady``,
``ServerMetadata`` and ``RepositoryIndex`` are the gateway's own, as over REST.

A cold function is retried as over REST: a call that never reached it, or an UNAVAILABLE
answer, is sent again with jittered backoff until the cold-start budget is spent (but not
an UNAVAILABLE "Request timeout expired": the request's queue timeout is final). API
keys travel as metadata (``authorization: Bearer <key>`` or ``x-api-key``).
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import TYPE_CHECKING

import grpc

from modelfn.gateway.identity import server_metadata
from modelfn.gateway.upstream import DEFAULT_BUDGET_S, FIRST_BACKOFF_S, MAX_BACKOFF_S
from modelfn.net.grpc_relay import channel_for, forwarded, relay_handler, request_model, unary
from modelfn.protocol.grpc import inference_pb2 as pb
from modelfn.protocol.grpc.server import DEFAULT_MAX_MESSAGE_BYTES
from modelfn.protocol.grpc.service import model_version
from modelfn.runtime.errors import ModelfnError, ModelNotFound, RequestTimeout

if TYPE_CHECKING:
    from modelfn.gateway.app import Gateway
    from modelfn.gateway.router import Upstream
    from modelfn.net.grpc_relay import Metadata

#: the HTTP status each gRPC status is counted under in the gateway's metrics
_COUNTED_AS = {
    grpc.StatusCode.OK: 200, grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.UNAUTHENTICATED: 401, grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.NOT_FOUND: 404, grpc.StatusCode.RESOURCE_EXHAUSTED: 413,
    grpc.StatusCode.UNIMPLEMENTED: 501, grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}


class NotGrpc(ModelfnError):
    """The model's function does not speak gRPC."""

    status_code = 501

    def __init__(self, upstream: Upstream, target: str) -> None:
        which = (f"version {upstream.version}" if upstream.version is not None
                 else "the versions its traffic goes to")
        why = ("a Lambda function URL carries HTTP/1.1 only" if target == "lambda"
               else "deploy it with --protocol grpc to serve gRPC")
        super().__init__(f"model '{upstream.model}' ({which}) is served over V2 REST, not "
                         f"gRPC ({why}): send the request to the gateway's REST port")


class GatewayGrpc:
    """The gRPC side of ``gateway``: its router, metrics, API keys and cold budget."""

    def __init__(self, gateway: Gateway, *, budget_s: float = DEFAULT_BUDGET_S,
                 timeout_s: float = 300.0,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                 rng: random.Random | None = None) -> None:
        self.gateway = gateway
        self.budget_s = budget_s
        self.timeout_s = timeout_s
        self.max_message_bytes = max_message_bytes
        self._rng = rng or random.Random()
        self._channels: dict[str, grpc.aio.Channel] = {}

    def server(self) -> grpc.aio.Server:
        """A ``grpc.aio`` server (on the running loop) with the relay; bind it, start it."""
        server = grpc.aio.server(options=[
            ("grpc.max_receive_message_length", self.max_message_bytes),
            ("grpc.max_send_message_length", self.max_message_bytes),
            ("grpc.so_reuseport", 0),
        ])
        server.add_generic_rpc_handlers((relay_handler(self.forward, local={
            "ServerLive": self._server_live, "ServerReady": self._server_ready,
            "ServerMetadata": self._server_metadata, "RepositoryIndex": self._repository_index,
        }),))
        return server

    async def close(self) -> None:
        channels, self._channels = self._channels, {}
        await asyncio.gather(*(c.close() for c in channels.values()))

    # -- the gateway's own RPCs --------------------------------------------------------

    async def _server_live(self, request: bytes, metadata: Metadata) -> bytes:
        return pb.ServerLiveResponse(live=True).SerializeToString()

    async def _server_ready(self, request: bytes, metadata: Metadata) -> bytes:
        return pb.ServerReadyResponse(ready=self.gateway.router.loaded).SerializeToString()

    async def _server_metadata(self, request: bytes, metadata: Metadata) -> bytes:
        return pb.ServerMetadataResponse(**server_metadata()).SerializeToString()

    async def _repository_index(self, request: bytes, metadata: Metadata) -> bytes:
        self._authorize(metadata)
        return pb.RepositoryIndexResponse(models=[
            pb.RepositoryIndexResponse.ModelIndex(name=model, version=str(version),
                                                  state="READY")
            for model, routes in sorted(self.gateway.router.tables.items())
            for version in sorted(routes.versions)
        ]).SerializeToString()

    def _authorize(self, metadata: Metadata) -> None:
        keys = self.gateway.api_keys
        if keys is None:
            return
        found = {k: v if isinstance(v, str) else v.decode("latin-1") for k, v in metadata
                 if k in ("authorization", "x-api-key")}
        keys.check(found.get("authorization"), found.get("x-api-key"))

    # -- passed through ----------------------------------------------------------------

    async def forward(self, method: str, request: bytes, metadata: Metadata,
                      deadline_s: float | None) -> bytes:
        self._authorize(metadata)
        name, version = request_model(request)
        if not name:
            raise _NoModel(method)
        router = self.gateway.router
        # the version as the function reads it (std::stol, as Triton): "01" is version 1
        try:
            upstream = await router.resolve_fresh(name, model_version(version))
        except ModelNotFound:
            if method == "ModelReady":  # Triton answers it, as the function does: not ready
                return pb.ModelReadyResponse(ready=False).SerializeToString()
            raise
        if upstream.protocol != "grpc":
            routes = router.tables.get(name)
            raise NotGrpc(upstream, routes.target if routes is not None else "")
        stats = self.gateway.metrics.route(name, upstream.label)
        started = time.perf_counter()
        try:
            answer = await self._call(upstream, method, request, forwarded(metadata),
                                      deadline_s)
        except grpc.aio.AioRpcError as exc:
            stats.codes[_COUNTED_AS.get(exc.code(), 500)] += 1
            raise
        except ModelfnError as exc:
            stats.codes[exc.status_code] += 1
            raise
        finally:
            stats.latency.observe(time.perf_counter() - started)
        stats.codes[200] += 1
        return answer

    async def _call(self, upstream: Upstream, method: str, request: bytes, metadata: Metadata,
                    deadline_s: float | None) -> bytes:
        channel = self._channels.get(upstream.url)
        if channel is None:
            channel = self._channels[upstream.url] = channel_for(
                upstream.url, max_message_bytes=self.max_message_bytes)
        started = time.monotonic()
        budget_end = started + self.budget_s
        caller_end = started + deadline_s if deadline_s is not None else None
        backoff = FIRST_BACKOFF_S
        retries = 0
        try:
            while True:
                now = time.monotonic()
                timeout = self.timeout_s if caller_end is None else min(self.timeout_s,
                                                                         caller_end - now)
                try:
                    return await unary(channel, method, request, metadata, max(timeout, 0.001),
                                       where=upstream.url)
                except grpc.aio.AioRpcError as exc:
                    if (exc.code() is not grpc.StatusCode.UNAVAILABLE
                            or exc.details() == RequestTimeout.MESSAGE):  # final, not cold
                        raise
                    now = time.monotonic()
                    if now + backoff > budget_end or (caller_end is not None
                                                      and now + backoff > caller_end):
                        raise
                retries += 1
                await asyncio.sleep(backoff * (0.5 + self._rng.random() / 2))
                backoff = min(backoff * 2, MAX_BACKOFF_S)
        finally:
            if retries:
                route_stats = self.gateway.metrics.route(upstream.model, upstream.label)
                route_stats.retries += retries
                route_stats.cold_wait_s += time.monotonic() - started


class _NoModel(ModelfnError):
    status_code = 400

    def __init__(self, method: str) -> None:
        super().__init__(f"{method} names no model: the gateway routes by model name")
