"""The HTTP edge: what a connection may cost the server before the app sees a request.

uvicorn's httptools protocol, bounded the way common servers bound it:

- a request head (request line and headers) over ``MODELFN_MAX_HEADER_BYTES`` (16 KiB, as
  Node and many proxies default) or with more than ``MODELFN_MAX_HEADERS`` fields (100) is
  answered 431 and the connection closed, before the parser has buffered more than one
  read past the limit;
- a head that has not arrived ``MODELFN_HEAD_TIMEOUT_S`` (10 s) after the connection opened
  or the previous response went out (a slowloris, or a connection opened and left idle) is
  answered 408 and closed; uvicorn's keep-alive timeout still closes idle keep-alive
  connections sooner;
- a body that stalls for ``MODELFN_BODY_TIMEOUT_S`` (30 s) between two reads closes the
  connection: the app sees the client as gone.

Each of these is counted (``runtime.stats.EDGE``, served on ``/metrics``) and logged at
debug: an attacker must not be able to fill the log.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import TYPE_CHECKING, Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from modelfn.runtime.stats import EDGE

if TYPE_CHECKING:
    from asyncio import TimerHandle

log = logging.getLogger("modelfn.edge")

MAX_HEADER_BYTES = 16 * 1024
MAX_HEADERS = 100
HEAD_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 30.0


def _setting(name: str, default: float) -> float:
    value = os.environ.get(name)
    try:
        return float(value) if value else default
    except ValueError:
        raise SystemExit(f"modelfn: {name}={value!r} is not a number") from None


class _HeadTooLarge(Exception):
    pass


def _response(status: int, reason: str, message: str) -> bytes:
    body = f'{{"error":"{message}"}}'.encode()
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n").encode() + body


class _Sweeper:
    """One timer per process, not one per request: every ``SWEEP_S`` it closes the
    connections whose head or body is overdue. A request only stamps the loop's clock."""

    def __init__(self) -> None:
        self.connections: set[BoundedHttpToolsProtocol] = set()
        self._timer: TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def add(self, connection: BoundedHttpToolsProtocol) -> None:
        self.connections.add(connection)
        loop = asyncio.get_running_loop()
        if self._timer is None or self._loop is not loop:  # a server on a new loop
            self._loop = loop
            self._timer = loop.call_later(SWEEP_S, self._sweep)

    def discard(self, connection: BoundedHttpToolsProtocol) -> None:
        self.connections.discard(connection)

    def _sweep(self) -> None:
        self._timer = None
        loop = asyncio.get_running_loop()
        now = time.monotonic()
        for connection in list(self.connections):
            connection.check(now)
        if self.connections:
            self._timer = loop.call_later(SWEEP_S, self._sweep)


SWEEP_S = 0.25


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with bounded heads and timeouts on slow clients."""

    max_header_bytes = int(_setting("MODELFN_MAX_HEADER_BYTES", MAX_HEADER_BYTES))
    max_headers = int(_setting("MODELFN_MAX_HEADERS", MAX_HEADERS))
    head_timeout_s = _setting("MODELFN_HEAD_TIMEOUT_S", HEAD_TIMEOUT_S)
    body_timeout_s = _setting("MODELFN_BODY_TIMEOUT_S", BODY_TIMEOUT_S)
    sweeper = _Sweeper()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True  # waiting for (the rest of) a request head
        self._in_body = False
        self._since = 0.0  # when the head began to be awaited, or the body last moved
        self._head_bytes = 0
        self._header_count = 0
        self._too_large = ""
        self._begun = self._answered = 0  # requests parsed and answered on this connection
        self._completed_in_feed = False

    _now = staticmethod(time.monotonic)  # the sweeper compares with the loop's clock, the same

    def check(self, now: float) -> None:
        """Close this connection if its head or body is overdue (the sweeper asks)."""
        if self.transport is None or self.transport.is_closing():
            return
        if self._in_head and now - self._since > self.head_timeout_s:
            EDGE.head_timeouts += 1
            log.debug("%s: no request head within %g s; closing", self.client,
                      self.head_timeout_s)
            self.transport.write(_response(408, "Request Timeout",
                                           "no complete request head in time"))
            self.transport.close()
        elif self._in_body and now - self._since > self.body_timeout_s:
            EDGE.body_timeouts += 1
            log.debug("%s: the request body stalled for %g s; closing", self.client,
                      self.body_timeout_s)
            self.transport.close()  # the app sees the client as gone

    # connection -----------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._since = self._now()
        self.sweeper.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.sweeper.discard(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._unset_keepalive_if_required()
        self._completed_in_feed = False
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:  # as uvicorn does
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        except httptools.HttpParserError:
            if self._too_large:
                self._refuse_head()
            else:
                EDGE.bad_requests += 1
                log.debug("%s: invalid HTTP request", self.client)
                self.send_400_response("Invalid HTTP request received.")
            return
        if self._in_head:
            if self.parser is not None and not self._completed_in_feed:
                self._head_bytes += len(data)  # all of it went to a head still incomplete
                if self._head_bytes > self.max_header_bytes:
                    self._too_large = (f"the request head exceeds {self.max_header_bytes} "
                                       "bytes")
                    self._refuse_head()
        elif self._in_body:
            self._since = self._now()

    def _refuse_head(self) -> None:
        EDGE.heads_too_large += 1
        log.debug("%s: %s", self.client, self._too_large)
        self.transport.write(_response(431, "Request Header Fields Too Large",
                                       self._too_large))
        self.transport.close()

    # parser callbacks -----------------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._begun += 1
        if not self._in_head:  # a pipelined request behind one still being answered
            self._in_head, self._since = True, self._now()
        self._in_body = False
        self._head_bytes = self._header_count = 0

    # on_url and on_header run per header on the hot path: they do the parent's work
    # inline rather than pay for a super() call each

    def on_url(self, url: bytes) -> None:
        self._head_bytes += len(url)
        if self._head_bytes > self.max_header_bytes:
            self._too_large = f"the request head exceeds {self.max_header_bytes} bytes"
            raise _HeadTooLarge
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        self._head_bytes += len(name) + len(value)
        if self._header_count > self.max_headers or self._head_bytes > self.max_header_bytes:
            self._too_large = (f"the request has more than {self.max_headers} header fields"
                               if self._header_count > self.max_headers else
                               f"the request head exceeds {self.max_header_bytes} bytes")
            raise _HeadTooLarge
        name = name.lower()
        if name == b"expect" and value.lower() == b"100-continue":
            self.expect_100_continue = True
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self._in_head, self._in_body = False, True
        self._since = self._now()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._in_body = False
        self._completed_in_feed = True
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._answered += 1
        if self._answered == self._begun:
            self._in_head, self._since = True, self._now()  # idle until the next head
            self._head_bytes = 0
