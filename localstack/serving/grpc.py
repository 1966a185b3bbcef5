"""gRPC through a route's URL: Knative's ``h2c``, on the local platform.

A route URL is one loopback port that speaks HTTP/1.1. A connection that opens with
HTTP/2's preface instead (gRPC clients send it first, h2c with prior knowledge) is
spliced to that URL's ``GrpcIngress``: a ``grpc.aio`` relay on a private loopback port,
made the first time the URL sees one. The relay routes each call, not each connection,
as Knative's ingress does: an unpinned call draws a revision by the split, the
activator holds it while the revision scales from zero, and its answer or status comes
back unchanged. grpcio is imported only then.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

import grpc

from modelfn.localstack.serving.http import CHUNK, H2_PREFACE
from modelfn.localstack.serving.instance import GRPC_MAX_MESSAGE_BYTES, HOST
from modelfn.net.grpc_relay import relay_handler

if TYPE_CHECKING:
    from modelfn.net.grpc_relay import Forward

log = logging.getLogger("modelfn.serving")

#: seconds calls in flight get to finish when a URL stops serving
DRAIN_S = 5.0


class GrpcIngress:
    """One URL's gRPC side: ``await GrpcIngress.start(forward)``, then ``splice`` each
    h2c connection to it; ``close`` when the URL goes away."""

    def __init__(self, server: grpc.aio.Server, port: int) -> None:
        self.server = server
        self.port = port
        self._splices: set[asyncio.Task[None]] = set()

    @classmethod
    async def start(cls, forward: Forward) -> GrpcIngress:
        server = grpc.aio.server(options=[
            ("grpc.max_receive_message_length", GRPC_MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", GRPC_MAX_MESSAGE_BYTES),
            ("grpc.so_reuseport", 0),
        ])
        server.add_generic_rpc_handlers((relay_handler(forward),))
        port = server.add_insecure_port(f"{HOST}:0")
        await server.start()
        return cls(server, port)

    async def splice(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Carry one client connection (its preface already read) to the relay and back."""
        try:
            up_reader, up_writer = await asyncio.open_connection(HOST, self.port)
        except OSError as exc:
            log.warning("the gRPC relay on port %d refused a connection: %s", self.port, exc)
            return
        up_writer.write(H2_PREFACE)
        task = asyncio.current_task()
        assert task is not None
        self._splices.add(task)
        try:
            await asyncio.gather(_pump(reader, up_writer), _pump(up_reader, writer))
        finally:
            self._splices.discard(task)
            up_writer.close()

    async def close(self) -> None:
        await self.server.stop(DRAIN_S)
        for task in list(self._splices):
            task.cancel()


async def _pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """Copy until ``source`` ends, then end ``sink``'s sending side."""
    try:
        while data := await source.read(CHUNK):
            sink.write(data)
            await sink.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if sink.can_write_eof():
                sink.write_eof()
