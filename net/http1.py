"""HTTP/1.1 on the wire: one head codec, and the pooled client the gateway calls with.

**The head codec.** A head is parsed whole (the bytes up to and including the empty line)
by a fresh httptools parser that is never fed a body: the caller frames the body itself
from what the head says (``length``, ``chunked``), so a proxy streams bodies through
unchanged. The header block is kept as the lines to send on (``name: value`` CRLF, in
order, the sender's spelling), less the names the caller drops (hop-by-hop ones,
``modelfn.net.headers``). A head httptools refuses is ``MalformedHead``: a bad first line,
a bad header line, a bad or repeated ``content-length``, ``transfer-encoding`` with
``content-length``, or a request's ``transfer-encoding`` that does not end in ``chunked``
(RFC 9112 6.3). Heads are written in one piece (``encode_request_head``,
``encode_response_head``).

**The client** (``Http1Client``). The gateway sends one whole request (its body already
read) and wants one whole answer, thousands of times a second, to a handful of origins.
General clients (aiohttp, httpx) pay for what it does not need, several times its CPU per
call (see bench/RESULTS.md). This one writes the request in a single ``write`` on a
kept-alive connection and parses the whole answer, body included, with httptools (the
parser uvicorn uses).

- Connections are pooled per origin (scheme, host, port) and reused while the function
  keeps them alive. A reused connection that the function closed in the meantime (its
  keep-alive timeout) fails before any answer arrives; the request is then sent once more
  on a new connection, which is safe because only whole, idempotent requests go through.
- ``https`` origins use the default TLS context (SNI and certificate checks on).
- Errors: ``ConnectError`` (no connection), ``ConnectionLost`` (the connection ended
  before a whole answer), ``TimeoutError`` (no whole answer in ``timeout_s``); all are
  ``OSError`` subclasses or ``TimeoutError``, the retryable kind for the caller.
- Interim answers (``100 Continue``, ``103 Early Hints``) are read past: the call's
  answer is the final one that follows, never the interim one.
- Not supported, because functions never need them from the gateway: ``HEAD`` requests
  (an answer's length would be ambiguous), sending ``Expect: 100-continue`` (the body
  goes with the head), HTTP/2.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
from collections import defaultdict, deque
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, cast
from urllib.parse import urlsplit

import httptools

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

#: ``HTTP/1.1 <status> <reason>`` CRLF for every status Python knows
STATUS_LINES = {int(s): b"HTTP/1.1 %d %s\r\n" % (s, s.phrase.encode()) for s in HTTPStatus}


class MalformedHead(ValueError):
    """Bytes that are not an HTTP/1.x message head; the message says what is wrong."""


@dataclass(slots=True)
class Head:
    """A parsed request or response head."""

    method: bytes  # a request's; b"" in a response
    target: bytes  # a request's; b"" in a response
    status: int  # a response's; 0 in a request
    reason: bytes  # a response's; b"" in a request
    version: bytes  # b"HTTP/1.1", b"HTTP/1.0"
    headers: bytes  # the header lines kept, each ``name: value`` CRLF
    length: int | None  # content-length, when the body is sized (never with ``chunked``)
    chunked: bool
    close: bool  # the sender wants the connection closed after this message
    expect: bool  # ``Expect: 100-continue`` from an HTTP/1.1 sender


class _Parts:
    """httptools' callbacks for one head: what the ``Head`` is built from."""

    __slots__ = ("complete", "connection", "drop", "expect", "length", "lines", "status",
                 "target", "te")

    def __init__(self, drop: frozenset[bytes]) -> None:
        self.drop = drop
        self.lines: list[bytes] = []
        self.target = b""
        self.status = b""
        self.length: int | None = None
        self.te = b""
        self.connection = b""
        self.expect = False
        self.complete = False

    def on_url(self, url: bytes) -> None:
        self.target += url

    def on_status(self, status: bytes) -> None:
        self.status += status

    def on_header(self, name: bytes, value: bytes) -> None:
        lower = name.lower()
        if lower == b"content-length":
            self.length = int(value)  # digits only: httptools checked
        elif lower == b"transfer-encoding":
            self.te = value.lower()
        elif lower == b"connection":
            self.connection += b"," + value.lower()
        elif lower == b"expect":
            self.expect = value.rstrip().lower() == b"100-continue"
        if lower not in self.drop:
            self.lines.append(b"%s: %s\r\n" % (name, value))

    def on_headers_complete(self) -> None:
        self.complete = True


def _feed(parser: httptools.HttpRequestParser | httptools.HttpResponseParser, parts: _Parts,
          raw: bytes) -> None:
    try:
        parser.feed_data(raw)
    except httptools.HttpParserUpgrade:
        pass  # a request's ``upgrade`` (a hop-by-hop header): the head is whole
    except httptools.HttpParserError as exc:
        switched = parts.complete and isinstance(parser, httptools.HttpResponseParser) \
            and parser.get_status_code() == 101  # httptools stops after a 101's whole head
        if not switched:
            raise MalformedHead(_what(raw, str(exc))) from None
    if not parts.complete:
        raise MalformedHead("the head does not end with an empty line")


#: words in httptools' errors about a header line rather than the first line
_ABOUT_HEADERS = ("header", "content-length", "transfer-encoding")


def _what(raw: bytes, reason: str) -> str:
    end = raw.find(b"\r\n")
    if any(word in reason.lower() for word in _ABOUT_HEADERS):
        return f"malformed header line in {raw[end + 2:end + 202]!r}: {reason}"
    return f"malformed first line {raw[:min(end, 80)]!r}: {reason}"


def _head(parts: _Parts, version: str, *, method: bytes = b"", status: int = 0) -> Head:
    chunked = parts.te.rstrip().endswith(b"chunked")
    tokens = parts.connection
    http_version = b"HTTP/" + version.encode()
    close = b"close" in tokens or (http_version == b"HTTP/1.0" and b"keep-alive" not in tokens)
    return Head(method, parts.target, status, parts.status, http_version, b"".join(parts.lines),
                None if chunked else parts.length, chunked, close,
                parts.expect and http_version != b"HTTP/1.0")


def parse_request_head(raw: bytes, drop: frozenset[bytes] = frozenset()) -> Head:
    """The request head ``raw`` (up to and including its empty line); header lines whose
    lower-case name is in ``drop`` are left out of ``headers``."""
    parts = _Parts(drop)
    parser = httptools.HttpRequestParser(parts)
    _feed(parser, parts, raw)
    return _head(parts, parser.get_http_version(), method=parser.get_method())


def parse_response_head(raw: bytes, drop: frozenset[bytes] = frozenset()) -> Head:
    """The response head ``raw`` (up to and including its empty line); header lines whose
    lower-case name is in ``drop`` are left out of ``headers``."""
    parts = _Parts(drop)
    parser = httptools.HttpResponseParser(parts)
    _feed(parser, parts, raw)
    return _head(parts, parser.get_http_version(), status=parser.get_status_code())


def encode_request_head(method: bytes, target: bytes, headers: bytes) -> bytes:
    """``method target HTTP/1.1``, the header lines ``headers`` (each ending in CRLF), and
    the empty line."""
    return b"%s %s HTTP/1.1\r\n%s\r\n" % (method, target, headers)


def status_line(status: int, reason: bytes | None = None) -> bytes:
    """``HTTP/1.1 <status> <reason>`` CRLF: the standard reason unless ``reason`` is given."""
    if reason is None:
        line = STATUS_LINES.get(status)
        if line is not None:
            return line
        reason = b""
    return b"HTTP/1.1 %d %s\r\n" % (status, reason)


def encode_response_head(status: int, headers: bytes, reason: bytes | None = None) -> bytes:
    """The status line, the header lines ``headers`` (each ending in CRLF), and the empty
    line."""
    return status_line(status, reason) + headers + b"\r\n"


#: idle connections kept per origin; more are closed when they come back
MAX_IDLE = 256
_DEFAULT_PORTS = {"http": 80, "https": 443}


class ConnectError(ConnectionError):
    """No connection to the origin (refused, unreachable, TLS failed)."""


class ConnectionLost(ConnectionError):
    """The connection ended before a whole answer arrived."""


@dataclass(frozen=True, slots=True)
class Origin:
    scheme: str
    host: str
    port: int

    @property
    def host_header(self) -> str:
        """What ``Host`` says (and what SigV4 signs): the port only when not the default."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if _DEFAULT_PORTS.get(self.scheme) == self.port else f"{host}:{self.port}"


@functools.lru_cache(maxsize=1024)
def split_url(url: str) -> tuple[Origin, str]:
    """``(origin, path with query)`` of an absolute http(s) URL."""
    parts = urlsplit(url)
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    port = parts.port or _DEFAULT_PORTS[parts.scheme]
    return Origin(parts.scheme, parts.hostname, port), target


class Headers:
    """An answer's headers: in order as sent (``raw``), and looked up case-insensitively."""

    __slots__ = ("_index", "raw")

    def __init__(self, raw: list[tuple[bytes, bytes]]) -> None:
        self.raw = raw
        self._index: dict[str, str] | None = None

    def get(self, name: str, default: str | None = None) -> str | None:
        if self._index is None:
            self._index = {k.decode("latin-1").lower(): v.decode("latin-1")
                           for k, v in self.raw}
        return self._index.get(name.lower(), default)

    def __iter__(self) -> Iterator[tuple[bytes, bytes]]:
        return iter(self.raw)


@dataclass(slots=True)
class Reply:
    """A whole final answer."""

    status: int
    headers: Headers
    body: bytes


class _Connection(asyncio.Protocol):
    """One kept-alive connection: one request at a time, its answer parsed by httptools."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.waiter: asyncio.Future[Reply] | None = None
        self.answered_bytes = 0  # of the answer in progress
        self._headers: list[tuple[bytes, bytes]] = []
        self._body: list[bytes] = []
        self.closed = False

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast("asyncio.Transport", transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self.answered_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            self.close()  # what is left on it is not an answer to anything
            self._fail(ConnectionLost(f"unparseable answer: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(ConnectionLost(f"the connection closed: {exc or 'by the function'}"))

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        status = self.parser.get_status_code()
        if status < 200:
            self._headers, self._body = [], []
            if status != 101:  # an interim answer (100, 103): the answer follows it
                return
            # a switch of protocol nobody asked for: whatever follows is not an answer
            self.close()
            self._fail(ConnectionLost("the function switched protocols (101)"))
            return
        waiter, self.waiter = self.waiter, None
        answer = Reply(status, Headers(self._headers), b"".join(self._body))
        self._headers, self._body = [], []
        if not self.parser.should_keep_alive():
            self.close()
        if waiter is not None and not waiter.done():
            waiter.set_result(answer)

    # use
    def send(self, data: bytes) -> asyncio.Future[Reply]:
        assert self.transport is not None
        self.waiter = asyncio.get_running_loop().create_future()
        self.answered_bytes = 0
        self.transport.write(data)
        return self.waiter

    def _fail(self, exc: Exception) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class Http1Client:
    """Pooled HTTP/1.1 requests with whole bodies, for one event loop."""

    def __init__(self, *, connect_timeout_s: float = 5.0) -> None:
        self.connect_timeout_s = connect_timeout_s
        self._idle: defaultdict[Origin, deque[_Connection]] = defaultdict(deque)
        self._tls: ssl.SSLContext | None = None

    async def _connect(self, origin: Origin) -> _Connection:
        loop = asyncio.get_running_loop()
        tls = None
        if origin.scheme == "https":
            tls = self._tls = self._tls or ssl.create_default_context()
        try:
            _, connection = await asyncio.wait_for(
                loop.create_connection(_Connection, origin.host, origin.port, ssl=tls),
                self.connect_timeout_s)
        except TimeoutError:
            raise ConnectError(f"no connection to {origin.host_header} within "
                               f"{self.connect_timeout_s:g} s") from None
        except OSError as exc:
            raise ConnectError(f"cannot connect to {origin.host_header}: {exc}") from exc
        return connection

    def _pooled(self, origin: Origin) -> _Connection | None:
        idle = self._idle[origin]
        while idle:
            connection = idle.pop()
            if not connection.closed:
                return connection
        return None

    def _release(self, origin: Origin, connection: _Connection) -> None:
        idle = self._idle[origin]
        if connection.closed or len(idle) >= MAX_IDLE:
            connection.close()
        else:
            idle.append(connection)

    async def request(self, method: str, url: str, headers: Mapping[str, str], body: bytes,
                      timeout_s: float) -> Reply:
        """Send one request and read its whole answer within ``timeout_s``."""
        origin, target = split_url(url)
        lines = [f"host: {origin.host_header}\r\ncontent-length: {len(body)}\r\n"]
        lines += [f"{name}: {value}\r\n" for name, value in headers.items()
                  if name.lower() not in ("host", "content-length")]
        data = encode_request_head(method.encode(), target.encode(),
                                   "".join(lines).encode("latin-1")) + body
        async with asyncio.timeout(timeout_s):
            connection = self._pooled(origin)
            if connection is not None:
                try:
                    answer = await connection.send(data)
                except ConnectionLost:
                    connection.close()
                    if connection.answered_bytes:  # part of an answer came: not a stale one
                        raise
                    # closed by the function while idle: once more, on a new connection
                except BaseException:  # cancelled or timed out: its answer may still come
                    connection.close()
                    raise
                else:
                    self._release(origin, connection)
                    return answer
            connection = await self._connect(origin)
            try:
                answer = await connection.send(data)
            except BaseException:
                connection.close()
                raise
            self._release(origin, connection)
            return answer

    def close(self) -> None:
        for idle in self._idle.values():
            while idle:
                idle.pop().close()
        self._idle.clear()
