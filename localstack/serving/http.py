"""HTTP/1.1 on raw asyncio streams: the serving plane's data path.

The ingress parses only heads (``modelfn.net.http1``: the first line, the headers to
forward, the body's framing) and streams bodies through unchanged, chunked or sized, so a
request costs one head parse each way and no copies of tensors. Upstream connections to
an instance are kept alive in a small per-instance pool, as Knative's queue-proxy keeps
them to its pod.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import orjson

from modelfn.net.headers import HOP_BY_HOP, latin1
from modelfn.net.http1 import (
    Head,
    MalformedHead,
    encode_request_head,
    encode_response_head,
    parse_request_head,
    parse_response_head,
)
from modelfn.runtime.errors import ModelfnError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    Handler = Callable[["Head", asyncio.StreamReader, asyncio.StreamWriter], Awaitable[bool]]
    H2Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]

#: the ingress answers a client's ``Expect: 100-continue`` itself (RFC 9110 10.1.1) and
#: sends the instance the body at once, so the instance has nothing to expect
_ANSWERED_HERE = frozenset({"expect"})
#: header lines not forwarded: the connection's and what the ingress answered; body framing
#: (content-length, transfer-encoding) is forwarded with the body it frames
NOT_FORWARDED = latin1(HOP_BY_HOP | _ANSWERED_HERE)
#: the largest request or response head accepted
MAX_HEAD_BYTES = 64 * 1024
#: an idle upstream connection older than this is not reused (uvicorn closes them at 5 s)
UPSTREAM_IDLE_S = 4.0
#: bytes per read when copying a body
CHUNK = 64 * 1024
#: the interim answer to a client's ``Expect: 100-continue``
CONTINUE = encode_response_head(100, b"")


#: HTTP/2's connection preface (RFC 9113 3.4) as ``read_head`` sees it: a head of its own
#: (``H2_PREFACE_HEAD``, which ``read_head`` answers with ``H2_PREFACE_SEEN``), then the rest
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
H2_PREFACE_HEAD = b"PRI * HTTP/2.0\r\n\r\n"
H2_PREFACE_REST = b"SM\r\n\r\n"
H2_PREFACE_SEEN = Head(b"PRI", b"*", 0, b"", b"HTTP/2.0", b"", None, False, False, False)


class BadGateway(ModelfnError):
    """The instance closed the connection or answered something that is not HTTP."""

    status_code = 502


class InstanceGone(BadGateway):
    """The instance refused the connection, or dropped it before any answer: it died.
    ``replay`` holds the whole request when it can be sent to another instance."""

    def __init__(self, message: str, replay: bytes | None) -> None:
        super().__init__(message)
        self.replay = replay


class MalformedMessage(ModelfnError):
    """A message (a client's request, or an instance's answer) that is not HTTP/1.1."""

    status_code = 400


async def read_head(reader: asyncio.StreamReader, *, response: bool = False) -> Head | None:
    """The next request head on ``reader`` (a response head with ``response``), less the
    header lines not forwarded, or None when the peer closed cleanly first."""
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial.strip():
            return None
        raise MalformedMessage("the connection closed in the middle of a message head") from exc
    except asyncio.LimitOverrunError as exc:
        raise MalformedMessage(f"message head larger than {MAX_HEAD_BYTES} bytes") from exc
    try:
        if response:
            return parse_response_head(raw, NOT_FORWARDED)
        if raw == H2_PREFACE_HEAD:
            return H2_PREFACE_SEEN
        return parse_request_head(raw, NOT_FORWARDED)
    except MalformedHead as exc:
        raise MalformedMessage(str(exc)) from exc


async def copy_body(head: Head, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    *, until_eof: bool = False) -> None:
    """Copy the body ``head`` frames from ``reader`` to ``writer``, framing included."""
    if head.chunked:
        while True:
            size_line = await reader.readuntil(b"\r\n")
            writer.write(size_line)
            try:
                size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
            except ValueError:
                raise MalformedMessage(f"bad chunk size line {size_line[:40]!r}") from None
            if size == 0:
                while True:  # trailers, then the empty line
                    line = await reader.readuntil(b"\r\n")
                    writer.write(line)
                    if line == b"\r\n":
                        break
                break
            writer.write(await reader.readexactly(size + 2))
            await writer.drain()
    elif head.length is not None:
        left = head.length
        if left <= CHUNK:  # the common case: one read, no drain until the end
            if left:
                writer.write(await reader.readexactly(left))
            left = 0
        while left:
            data = await reader.read(min(left, CHUNK))
            if not data:
                raise asyncio.IncompleteReadError(b"", left)
            writer.write(data)
            left -= len(data)
            if left:
                await writer.drain()
    elif until_eof:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    await writer.drain()


def error_response(status: int, message: str, *, close: bool = False) -> bytes:
    """A V2 ``{"error": ...}`` response, whole."""
    return json_response(status, {"error": message}, close=close)


def json_response(status: int, document: object, *, close: bool = False) -> bytes:
    body = orjson.dumps(document)
    return encode_response_head(status, b"content-type: application/json\r\ncontent-length: %d"
                                b"\r\n%s" % (len(body), b"connection: close\r\n" if close else b"")
                                ) + body


class UpstreamPool:
    """Keep-alive connections to one instance (``host:port``)."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter, float]] = []

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        now = time.monotonic()
        while self._idle:
            reader, writer, since = self._idle.pop()
            if now - since < UPSTREAM_IDLE_S and not writer.is_closing() and not reader.at_eof():
                return reader, writer
            writer.close()
        return await asyncio.open_connection(self.host, self.port, limit=MAX_HEAD_BYTES)

    def release(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._idle.append((reader, writer, time.monotonic()))

    def close(self) -> None:
        for _, writer, _ in self._idle:
            writer.close()
        self._idle.clear()


async def forward(request: Head, body: asyncio.StreamReader, client: asyncio.StreamWriter,
                  pool: UpstreamPool, *, timeout_s: float, keep_alive: bool,
                  replay: bytes | None = None) -> bool:
    """Send ``request`` (its body read from ``body``, or the whole request already in
    ``replay``) to the pool's instance and stream the answer to ``client``. Returns whether
    the client connection may be reused. Raises ``BadGateway`` (``InstanceGone`` when the
    instance is dead) or ``TimeoutError`` only before anything but ``100 Continue`` was
    written to the client.

    A client that sent ``Expect: 100-continue`` is told ``100 Continue`` just before its
    body is read; the instance gets the request without ``Expect``, and any 1xx interim
    answer it sends anyway is read and dropped, never taken for the answer. A connection
    goes back to the pool only after a whole, final answer was read from it."""
    method = request.method
    small = replay is not None or (request.length is not None and request.length <= CHUNK)
    # the client holds its body back until told to send it
    held = replay is None and request.expect and (request.chunked or bool(request.length))
    if replay is not None:
        head = replay
    else:
        head = encode_request_head(method, request.target, request.headers)
        if small and request.length:  # head and body in one write: one syscall, one packet
            if held:
                client.write(CONTINUE)
            head += await body.readexactly(request.length)
    try:
        reader, writer = await pool.connect()
    except OSError as exc:
        raise InstanceGone(f"the instance at {pool.host}:{pool.port} refused the connection: "
                           f"{exc!r}", head if small else None) from exc
    try:  # from here on, a connection not read to the end of a final answer is closed
        writer.write(head)
        if not small:
            if held:
                client.write(CONTINUE)
            await _send_body(request, body, writer, pool)
        response = await _read_answer(reader, writer, pool, timeout_s, head if small else None)
        return await _relay(method, response, reader, writer, client, pool, keep_alive)
    except BaseException:
        writer.close()
        raise


async def _send_body(request: Head, body: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     pool: UpstreamPool) -> None:
    """Copy a request body too large to send with its head (it is not kept for a replay)."""
    try:
        await copy_body(request, body, writer)
    except (OSError, asyncio.IncompleteReadError, MalformedMessage) as exc:
        if isinstance(exc, ConnectionError):  # reset before any answer: the instance died
            raise InstanceGone(f"the instance at {pool.host}:{pool.port} dropped the "
                               f"connection: {exc!r}", None) from exc
        raise BadGateway(f"the instance at {pool.host}:{pool.port} failed: {exc!r}") from exc


async def _read_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                       pool: UpstreamPool, timeout_s: float, replay: bytes | None) -> Head:
    """The head of the instance's final answer, past any 1xx interim ones (RFC 9110 15.2)."""
    loop = asyncio.get_running_loop()
    # a timer that aborts the connection is much cheaper than asyncio.timeout()
    expired = loop.call_later(timeout_s, writer.transport.abort)
    try:
        response = await read_head(reader, response=True)
        while response is not None and 100 <= response.status < 200 and response.status != 101:
            response = await read_head(reader, response=True)
    except (OSError, asyncio.IncompleteReadError, MalformedMessage) as exc:
        if expired.when() <= loop.time():
            raise TimeoutError from exc
        if isinstance(exc, ConnectionError):  # reset before any answer: the instance died
            raise InstanceGone(f"the instance at {pool.host}:{pool.port} dropped the "
                               f"connection: {exc!r}", replay) from exc
        raise BadGateway(f"the instance at {pool.host}:{pool.port} failed: {exc!r}") from exc
    finally:
        expired.cancel()
    if response is None and expired.when() <= loop.time():
        raise TimeoutError
    if response is None:
        raise InstanceGone(f"the instance at {pool.host}:{pool.port} closed the connection",
                           replay)
    if not 200 <= response.status < 600:  # 101, or not a status HTTP defines
        raise BadGateway(f"the instance at {pool.host}:{pool.port} answered with status "
                         f"{response.status}")
    return response


async def _relay(method: bytes, response: Head, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter, client: asyncio.StreamWriter, pool: UpstreamPool,
                 keep_alive: bool) -> bool:
    """Stream the answer ``response`` heads to ``client``; whether the client connection
    may be reused. The instance connection goes back to the pool once read to its end."""
    bodyless = method == b"HEAD" or response.status in (204, 304)
    sized = bodyless or response.chunked or response.length is not None
    reuse = keep_alive and sized
    out = encode_response_head(response.status, response.headers if reuse else
                               response.headers + b"connection: close\r\n", response.reason)
    if bodyless:
        client.write(out)
    elif response.length is not None and response.length <= CHUNK:
        client.write(out + await reader.readexactly(response.length))
    else:
        client.write(out)
        await copy_body(response, reader, client, until_eof=not sized)
    await client.drain()
    if sized and not response.close:
        pool.release(reader, writer)
    else:
        writer.close()
    return reuse


async def serve_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                           handle: Handler, h2: H2Handler | None = None) -> None:
    """Serve requests on one client connection until either side closes it. A connection
    that opens with HTTP/2's preface (h2c with prior knowledge, as gRPC clients open
    theirs) is handed to ``h2`` whole, preface included; without ``h2`` it gets a 505."""
    try:
        while True:
            try:
                head = await read_head(reader)
            except MalformedMessage as exc:
                writer.write(error_response(400, exc.message, close=True))
                break
            if head is H2_PREFACE_SEEN:
                if h2 is None or await reader.readexactly(len(H2_PREFACE_REST)) \
                        != H2_PREFACE_REST:
                    writer.write(error_response(505, "this URL speaks HTTP/1.1 only",
                                                close=True))
                    break
                await h2(reader, writer)
                break
            if head is None or not await handle(head, reader, writer) or head.close:
                break
    except (OSError, asyncio.IncompleteReadError):
        pass  # the client went away
    finally:
        writer.close()
