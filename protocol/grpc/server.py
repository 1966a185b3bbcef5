"""The gRPC server: ``create_server(repository)`` is gRPC's ``create_app``.

A ``grpc.aio`` server runs on the event loop that creates it, so made on uvicorn's loop
it serves beside the REST app with the same batchers (``handlers.http`` does that).
Message sizes are bounded both ways: a request over ``max_receive_bytes`` is refused by
gRPC itself with RESOURCE_EXHAUSTED before it is read whole, and an answer over
``max_send_bytes`` gets RESOURCE_EXHAUSTED saying so instead of the answer.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
import weakref
from typing import TYPE_CHECKING, Any

import grpc

from modelfn.protocol.grpc.service import InferenceService
from modelfn.runtime.errors import ConfigError, ModelfnError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from modelfn.runtime.repository import Repository

log = logging.getLogger("modelfn.grpc")

#: 64 MiB each way by default, REST's body limit (gRPC's own default is 4 MiB received)
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
#: gRPC's message lengths are C ints
MAX_MESSAGE_BYTES = 2**31 - 1


def create_server(repository: Repository, *,
                  max_receive_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                  max_send_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> grpc.aio.Server:
    """The V2 gRPC service over an already-loaded repository, on the running loop."""
    for what, value in (("max receive", max_receive_bytes), ("max send", max_send_bytes)):
        if not 0 < value <= MAX_MESSAGE_BYTES:
            raise ConfigError(f"the gRPC {what} message length must be 1 to "
                              f"{MAX_MESSAGE_BYTES} bytes, not {value}")
    server = grpc.aio.server(options=[
        ("grpc.max_receive_message_length", max_receive_bytes),
        ("grpc.max_send_message_length", max_send_bytes),
        # one listener per port: a second server on the same port must fail, not share it
        ("grpc.so_reuseport", 0),
    ])
    service = InferenceService(repository, max_send_bytes=max_send_bytes)
    server.add_generic_rpc_handlers((service.handler(),))
    _SERVICES[server] = service
    return server


#: each server's service, which stamps when a call last reached a handler
_SERVICES: weakref.WeakKeyDictionary[grpc.aio.Server, InferenceService] = (
    weakref.WeakKeyDictionary())
#: a stopping server settles once no call has reached a handler for this long ...
SETTLE_S = 0.2
#: ... or after this long under steady load
SETTLE_MAX_S = 2.0


async def stop_draining(server: grpc.aio.Server, drain_s: float) -> None:
    """Stop ``server``, letting the calls it has received finish within ``drain_s``. grpc
    core cancels the calls it holds but has not handed to a handler yet when the server
    stops (49 of 50 calls that arrived just before a SIGTERM were CANCELLED), so the
    server first settles: it goes on handing calls over until none has come for
    ``SETTLE_S`` (at most ``SETTLE_MAX_S``); then those finish within the drain."""
    service = _SERVICES.get(server)
    if service is not None:
        began = time.monotonic()
        while (time.monotonic() - began < SETTLE_MAX_S
               and time.monotonic() - max(service.last_call, began) < SETTLE_S):
            await asyncio.sleep(SETTLE_S / 8)
    await server.stop(drain_s)


def listen(server: grpc.aio.Server, host: str, port: int) -> int:
    """Bind ``host:port`` (0: any free port) without TLS; returns the port."""
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        bound = server.add_insecure_port(address)
    except RuntimeError as exc:
        raise ConfigError(f"cannot listen for gRPC on {address}: {exc}") from None
    if not bound:  # older grpcio says so by returning 0
        raise ConfigError(f"cannot listen for gRPC on {address} (is the port in use?)")
    return bound


def beside_uvicorn(config: Any, create: Callable[[], grpc.aio.Server], host: str, port: int,
                   *, drain_s: float, stopped: Callable[[], Awaitable[None]] | None = None
                   ) -> Any:
    """A ``uvicorn.Server`` for ``config`` that also serves the gRPC server ``create()``
    makes on ``host:port``, on uvicorn's event loop. gRPC listens first (a port it cannot
    have stops the process, status 3, before REST listens); on shutdown both drain at
    once, then ``stopped()`` runs (what both fed, such as batchers, stops last). If REST
    cannot start (uvicorn exits, status 3, on a port it cannot have), gRPC and
    ``stopped()`` are stopped before that exit goes on, while the loop still runs."""
    import uvicorn

    class WithGrpc(uvicorn.Server):
        grpc: grpc.aio.Server | None = None

        async def startup(self, sockets: Any = None) -> None:
            server = create()
            try:
                bound = listen(server, host, port)
            except ModelfnError as exc:
                log.error("%s", exc.message)
                sys.exit(3)
            await server.start()
            self.grpc = server
            log.info("KServe V2 gRPC on %s:%d", host, bound)
            try:
                await super().startup(sockets)
            except BaseException:  # uvicorn's sys.exit: the loop closes right after
                log.error("REST did not start: stopping gRPC")
                await self._stop_grpc()
                raise

        async def shutdown(self, sockets: Any = None) -> None:
            stopping = None
            if self.grpc is not None:
                stopping = asyncio.ensure_future(stop_draining(self.grpc, drain_s))
            await super().shutdown(sockets)
            if stopping is not None:
                await stopping
            if stopped is not None:
                await stopped()

        async def _stop_grpc(self) -> None:
            """Stop gRPC and what it fed, as ``shutdown`` does, when uvicorn never served."""
            server, self.grpc = self.grpc, None
            if server is not None:
                await stop_draining(server, drain_s)
            if stopped is not None:
                await stopped()

    return WithGrpc(config)
