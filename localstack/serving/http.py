"""HTTP/1.1 on raw asyncio streams: the serving plane's data path.

The ingress parses only what a proxy must (the request line, headers, body framing)
and streams bodies through unchanged, chunked or sized, so a request costs one head
parse each way and no copies of tensors. Upstream connections to an instance are kept
alive in a small per-instance pool, as Knative's queue-proxy keeps them to its pod.
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import orjson

from modelfn.net.headers import HOP_BY_HOP, latin1
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
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_REASONS = {200: b"OK", 404: b"Not Found", 400: b"Bad Request", 431: b"Header Too Large",
            502: b"Bad Gateway", 503: b"Service Unavailable", 504: b"Gateway Timeout",
            505: b"HTTP Version Not Supported"}


#: HTTP/2's connection preface (RFC 9113 3.4) as ``read_head`` sees it: a first line,
#: an empty header block, then the rest
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
H2_PREFACE_LINE = (b"PRI", b"*", b"HTTP/2.0")
H2_PREFACE_REST = b"SM\r\n\r\n"


class BadGateway(ModelfnError):
    """The instance closed the connection or answered something that is not HTTP."""

    status_code = 502


class InstanceGone(BadGateway):
    """The instance refused the connection, or dropped it before any answer: it died.
    ``replay`` holds the whole request when it can be sent to another instance."""

    def __init__(self, message: str, replay: bytes | None) -> None:
        super().__init__(message)
        self.replay = replay


class BadRequest(ModelfnError):
    status_code = 400


@dataclass(slots=True)
class Head:
    """A parsed request or response head: the first line, and the header block to forward
    (hop-by-hop headers already removed, each line ending in CRLF)."""

    first: tuple[bytes, bytes, bytes]  # (method, target, version) or (version, status, reason)
    headers: bytes
    length: int | None  # content-length, when the body is sized
    chunked: bool
    close: bool  # the sender wants the connection closed after this message
    expect: bool = False  # a request's ``Expect: 100-continue``: send CONTINUE, then read


_FLAGS = re.IGNORECASE | re.MULTILINE
_HEADER_LINES = re.compile(rb"(?:[!#$%&'*+.^_`|~0-9A-Za-z-]+:[^\r\n]*\r\n)*")
_HOP_LINE = re.compile(rb"^(?:" + b"|".join(sorted(NOT_FORWARDED)) + rb")[ \t]*:[^\r\n]*\r\n",
                       _FLAGS)
_LENGTH = re.compile(rb"^content-length[ \t]*:[ \t]*([^\r\n]*?)[ \t]*\r$", _FLAGS)
_CHUNKED = re.compile(rb"^transfer-encoding[ \t]*:[^\r\n]*chunked[ \t]*\r$", _FLAGS)
_CONNECTION = re.compile(rb"^connection[ \t]*:([^\r\n]*)\r$", _FLAGS)
_EXPECT = re.compile(rb"^expect[ \t]*:[ \t]*100-continue[ \t]*\r$", _FLAGS)
#: a status that ends a response (RFC 9110 15): three digits, not 1xx
_FINAL_STATUS = re.compile(rb"[2-5][0-9][0-9]")


async def read_head(reader: asyncio.StreamReader) -> Head | None:
    """The next message head on ``reader``, or None when the peer closed cleanly first.

    The header block is checked and searched with compiled patterns (one C-level pass
    each) rather than split into Python objects: a proxy needs only the framing."""
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial.strip():
            return None
        raise BadRequest("the connection closed in the middle of a message head") from exc
    except asyncio.LimitOverrunError as exc:
        raise BadRequest(f"message head larger than {MAX_HEAD_BYTES} bytes") from exc
    end = raw.find(b"\r\n")
    parts = raw[:end].split(b" ", 2)
    if len(parts) < 2:
        raise BadRequest(f"malformed first line {raw[:min(end, 80)]!r}")
    first = (parts[0], parts[1], parts[2] if len(parts) > 2 else b"")
    block = raw[end + 2:-2]
    if _HEADER_LINES.fullmatch(block) is None:
        raise BadRequest("malformed header line in " + repr(block[:200]))
    length: int | None = None
    if (sized := _LENGTH.search(block)) is not None:
        if not sized.group(1).isdigit():
            raise BadRequest(f"bad content-length {sized.group(1)[:40]!r}")
        length = int(sized.group(1))
    chunked = _CHUNKED.search(block) is not None
    connection = _CONNECTION.search(block)
    hops = connection is not None or _HOP_LINE.search(block) is not None
    tokens = connection.group(1).lower() if connection is not None else b""
    version = first[0] if first[0].startswith(b"HTTP/") else first[2]
    close = b"close" in tokens or (version == b"HTTP/1.0" and b"keep-alive" not in tokens)
    # only an HTTP/1.1 client may be sent a 1xx (RFC 9110 10.1.1, 15.2)
    expect = hops and version != b"HTTP/1.0" and _EXPECT.search(block) is not None
    return Head(first, _HOP_LINE.sub(b"", block) if hops else block,
                None if chunked else length, chunked, close, expect)


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
                raise BadRequest(f"bad chunk size line {size_line[:40]!r}") from None
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
    reason = _REASONS.get(status, b"Error")
    return (b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%s\r\n"
            % (status, reason, len(body), b"connection: close\r\n" if close else b"")) + body


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
    method, target, _ = request.first
    small = replay is not None or (request.length is not None and request.length <= CHUNK)
    # the client holds its body back until told to send it
    held = replay is None and request.expect and (request.chunked or bool(request.length))
    if replay is not None:
        head = replay
    else:
        head = b"%s %s HTTP/1.1\r\n%s\r\n" % (method, target, request.headers)
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
    except (OSError, asyncio.IncompleteReadError, BadRequest) as exc:
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
        response = await read_head(reader)
        while response is not None and response.first[1][:1] == b"1" \
                and response.first[1] != b"101":
            response = await read_head(reader)
    except (OSError, asyncio.IncompleteReadError, BadRequest) as exc:
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
    if _FINAL_STATUS.fullmatch(response.first[1]) is None:  # 101 or not a status at all
        raise BadGateway(f"the instance at {pool.host}:{pool.port} answered with status "
                         f"{response.first[1][:20]!r}")
    return response


async def _relay(method: bytes, response: Head, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter, client: asyncio.StreamWriter, pool: UpstreamPool,
                 keep_alive: bool) -> bool:
    """Stream the answer ``response`` heads to ``client``; whether the client connection
    may be reused. The instance connection goes back to the pool once read to its end."""
    status = response.first[1]
    bodyless = method == b"HEAD" or status in (b"204", b"304")
    sized = bodyless or response.chunked or response.length is not None
    reuse = keep_alive and sized
    out = b"%s %s %s\r\n%s%s\r\n" % (
        response.first[0], status, response.first[2], response.headers,
        b"" if reuse else b"connection: close\r\n")
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
            except BadRequest as exc:
                writer.write(error_response(400, exc.message, close=True))
                break
            if head is not None and head.first == H2_PREFACE_LINE:
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
