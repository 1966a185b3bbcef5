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

from modelfn.runtime.errors import ModelfnError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    Handler = Callable[["Head", asyncio.StreamReader, asyncio.StreamWriter], Awaitable[bool]]
    H2Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]

#: hop-by-hop headers a proxy does not forward (RFC 9110 7.6.1); body framing
#: (content-length, transfer-encoding) is forwarded with the body it frames
HOP_BY_HOP = frozenset({
    b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer", b"upgrade",
    b"proxy-authenticate", b"proxy-authorization",
})
#: the largest request or response head accepted
MAX_HEAD_BYTES = 64 * 1024
#: an idle upstream connection older than this is not reused (uvicorn closes them at 5 s)
UPSTREAM_IDLE_S = 4.0
#: bytes per read when copying a body
CHUNK = 64 * 1024
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


_FLAGS = re.IGNORECASE | re.MULTILINE
_HEADER_LINES = re.compile(rb"(?:[!#$%&'*+.^_`|~0-9A-Za-z-]+:[^\r\n]*\r\n)*")
_HOP_LINE = re.compile(rb"^(?:" + b"|".join(sorted(HOP_BY_HOP)) + rb")[ \t]*:[^\r\n]*\r\n",
                       _FLAGS)
_LENGTH = re.compile(rb"^content-length[ \t]*:[ \t]*([^\r\n]*?)[ \t]*\r$", _FLAGS)
_CHUNKED = re.compile(rb"^transfer-encoding[ \t]*:[^\r\n]*chunked[ \t]*\r$", _FLAGS)
_CONNECTION = re.compile(rb"^connection[ \t]*:([^\r\n]*)\r$", _FLAGS)


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
    return Head(first, _HOP_LINE.sub(b"", block) if hops else block,
                None if chunked else length, chunked, close)


async def copy_body(head: Head, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    *, until_eof: bool = False) -> None:
    """Copy the body ``head`` frames from ``reader`` to ``writer``, framing included."""
    if head.chunked:
        while True:
            size_line = await reader.readuntil(b"\r\n")
            writer.write(size_line)
            size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
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
    instance is dead) or ``TimeoutError`` only before anything was written to the client."""
    method, target, _ = request.first
    small = replay is not None or (request.length is not None and request.length <= CHUNK)
    if replay is not None:
        head = replay
    else:
        head = b"%s %s HTTP/1.1\r\n%s\r\n" % (method, target, request.headers)
        if small:  # head and body in one write: one syscall, one packet
            head += await body.readexactly(request.length) if request.length else b""
    try:
        reader, writer = await pool.connect()
    except OSError as exc:
        raise InstanceGone(f"the instance at {pool.host}:{pool.port} refused the connection: "
                           f"{exc!r}", head if small else None) from exc
    writer.write(head)
    expired: asyncio.TimerHandle | None = None
    try:
        if not small:
            await copy_body(request, body, writer)
        # a timer that aborts the connection is much cheaper than asyncio.timeout()
        expired = asyncio.get_running_loop().call_later(timeout_s, writer.transport.abort)
        try:
            response = await read_head(reader)
        finally:
            expired.cancel()
    except (OSError, asyncio.IncompleteReadError, BadRequest) as exc:
        writer.close()
        if expired is not None and expired.when() <= asyncio.get_running_loop().time():
            raise TimeoutError from exc
        if isinstance(exc, ConnectionError):  # reset before any answer: the instance died
            raise InstanceGone(f"the instance at {pool.host}:{pool.port} dropped the "
                               f"connection: {exc!r}", head if small else None) from exc
        raise BadGateway(f"the instance at {pool.host}:{pool.port} failed: {exc!r}") from exc
    if response is None and expired is not None \
            and expired.when() <= asyncio.get_running_loop().time():
        writer.close()
        raise TimeoutError
    if response is None:
        writer.close()
        raise InstanceGone(f"the instance at {pool.host}:{pool.port} closed the connection",
                           head if small else None)
    status = response.first[1]
    bodyless = method == b"HEAD" or status in (b"204", b"304") or status.startswith(b"1")
    sized = bodyless or response.chunked or response.length is not None
    reuse = keep_alive and sized
    out = b"%s %s %s\r\n%s%s\r\n" % (
        response.first[0], status, response.first[2], response.headers,
        b"" if reuse else b"connection: close\r\n")
    try:
        if bodyless:
            client.write(out)
        elif response.length is not None and response.length <= CHUNK:
            client.write(out + await reader.readexactly(response.length))
        else:
            client.write(out)
            await copy_body(response, reader, client, until_eof=not sized)
        await client.drain()
    except BaseException:  # either side failed mid-body: this connection is spoiled
        writer.close()
        raise
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
