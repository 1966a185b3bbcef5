"""A small pooled HTTP/1.1 client for the gateway's calls to functions.

The gateway sends one whole request (its body already read) and wants one whole answer,
thousands of times a second, to a handful of origins. General clients pay for what it does
not need: aiohttp spent about 160 µs of CPU per call here, httpx several times that. This
one writes the request in a single ``write`` on a kept-alive connection and parses the
answer with httptools (the parser uvicorn uses), about 45 µs per call.

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
from typing import TYPE_CHECKING, cast
from urllib.parse import urlsplit

import httptools

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

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
class Answer:
    status: int
    headers: Headers
    body: bytes


class _Connection(asyncio.Protocol):
    """One kept-alive connection: one request at a time, its answer parsed by httptools."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.waiter: asyncio.Future[Answer] | None = None
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
        answer = Answer(status, Headers(self._headers), b"".join(self._body))
        self._headers, self._body = [], []
        if not self.parser.should_keep_alive():
            self.close()
        if waiter is not None and not waiter.done():
            waiter.set_result(answer)

    # use
    def send(self, data: bytes) -> asyncio.Future[Answer]:
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
                      timeout_s: float) -> Answer:
        """Send one request and read its whole answer within ``timeout_s``."""
        origin, target = split_url(url)
        lines = [f"{method} {target} HTTP/1.1", f"host: {origin.host_header}",
                 f"content-length: {len(body)}"]
        lines += [f"{name}: {value}" for name, value in headers.items()
                  if name.lower() not in ("host", "content-length")]
        data = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
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
