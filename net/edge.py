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
  connection: the app sees the client as gone. Neither clock runs while the server itself
  has stopped reading (a request pipelined behind one still being answered): a stall the
  server causes is not the client's;
- more than ``MODELFN_MAX_PIPELINED`` (256) requests pipelined and not yet answered close
  the connection: a client that sends without ever reading its answers would otherwise
  make the server queue every request it parses, without bound.

The end of a client's input (a FIN) ends the connection, as uvicorn has it: a client that
closed its socket cannot be told from one that only half-closed it (``shutdown(SHUT_WR)``),
and requests of a client that hung up are withdrawn rather than run (as Go's and nginx's
servers treat it); a half-closing client gets no answer.

Each of these is counted (``runtime.stats.EDGE``, served on ``/metrics``) and logged at
debug: an attacker must not be able to fill the log.

It also takes an application's fast path (``fast_path.FastPath``, registered when the
server is built: the V2 REST adapter's infer route). A request whose head the fast path
claims (a ``Content-Length`` body, nothing in flight before it on the connection, no
``Expect``, transfer or content coding, or upgrade) is answered without the ASGI machinery: the
parser's callbacks collect the body (a large body of raw data, ``BUFFERED_BODY_MIN`` or
more, goes straight from each read into one buffer, past the parser); once it is whole
the fast path has it, and answers, head and body, in one write, through the request's
``Exchange``: from its own callback, or from a task the edge tracks. No scope is
finished, no ``RequestResponseCycle``, ``asyncio.Event``, task, ``receive`` or ``send``
is made or called on the way. Any other request takes the ASGI path, unchanged.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from modelfn.net.busy_poll import BusyPoll
from modelfn.net.edge_exchange import DEFAULT_HEADERS, Shortcut, request_parser
from modelfn.net.edge_limits import (
    BODY_TIMEOUT_S,
    BUFFERED_BODY_MIN,
    HEAD_TIMEOUT_S,
    LINGER_S,
    MAX_HEADER_BYTES,
    MAX_HEADERS,
    MAX_PIPELINED,
    Sweeper,
    refusal,
    setting,
)
from modelfn.net.fast_path import HANG_UP
from modelfn.net.http1 import status_line
from modelfn.runtime.stats import EDGE

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Coroutine

    from modelfn.net.fast_path import FastPath

log = logging.getLogger("modelfn.edge")

#: an answer larger than this goes out as two writes (head, body) rather than be copied
_ONE_WRITE_MAX = 64 * 1024


class _HeadTooLarge(Exception):
    pass


class _PipelineTooDeep(Exception):
    pass


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with bounded heads and timeouts on slow clients."""

    max_header_bytes = int(setting("MODELFN_MAX_HEADER_BYTES", MAX_HEADER_BYTES))
    max_headers = int(setting("MODELFN_MAX_HEADERS", MAX_HEADERS))
    head_timeout_s = setting("MODELFN_HEAD_TIMEOUT_S", HEAD_TIMEOUT_S)
    body_timeout_s = setting("MODELFN_BODY_TIMEOUT_S", BODY_TIMEOUT_S)
    max_pipelined = int(setting("MODELFN_MAX_PIPELINED", MAX_PIPELINED))
    sweeper = Sweeper()
    #: keeps the loop polling after each request (``edge_protocol``); None: it sleeps
    busy_poll: BusyPoll | None = None
    #: the application's fast path (``edge_protocol``); None: every request goes by ASGI
    fast_path: FastPath[Any] | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True  # waiting for (the rest of) a request head
        self._in_body = False
        self._since = 0.0  # when the head began to be awaited, or the body last moved
        self._head_bytes = 0  # of the head being read: its fields, as the callbacks see them
        self._head_raw = 0  # ... and the bytes of the reads it has filled whole
        self._header_count = 0
        self._too_large = ""
        self._begun = self._answered = 0  # requests parsed and answered on this connection
        self._completed_in_feed = False
        self._lingering = False  # refused: the answer is out, the rest of its input discarded
        self._too_deep = False  # more requests pipelined unanswered than max_pipelined
        #: requests parsed before ``self.cycle`` and not answered when it was parsed
        self._earlier: list[RequestResponseCycle | Shortcut] = []
        #: every request answered and nothing received since: idle under keep-alive, whose
        #: timeout the sweeper keeps rather than a timer made and cancelled per request
        self._kept_alive = False
        self._idle_at = 0.0  # since when
        fast = self.fast_path  # for the app as uvicorn calls it: wrapped (trace logging), not
        taken = (fast is not None and self.app is fast.app and not self.root_path
                 and self.limit_concurrency is None)
        self._fast: FastPath[Any] | None = fast if taken else None
        self._fast_header = fast.header if fast is not None else b""

    _now = staticmethod(time.monotonic)  # the sweeper compares with the loop's clock, the same

    def check(self, now: float) -> None:
        """Close this connection if its head or body is overdue, or it has been idle
        between requests longer than the keep-alive timeout (the sweeper asks)."""
        if self.transport is None or self.transport.is_closing() or self._lingering:
            return
        if self.flow.read_paused:  # the server holds the input back: the clocks wait
            self._since = now
            return
        if self._kept_alive and now - self._idle_at > self.timeout_keep_alive:
            self.transport.close()  # as uvicorn's keep-alive timer does
        elif self._in_head and now - self._since > self.head_timeout_s:
            EDGE.head_timeouts += 1
            log.debug("%s: no request head within %g s; closing", self.client,
                      self.head_timeout_s)
            self.transport.write(refusal(408, "Request Timeout",
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
        for cycle in (*self._earlier, self.cycle):
            if cycle is not None and not cycle.response_complete:
                self._hung_up(cycle)
        super().connection_lost(exc)

    def _hung_up(self, cycle: RequestResponseCycle | Shortcut) -> None:
        """The client left before ``cycle`` was answered: its request is withdrawn. On the
        fast path what it left pending is cancelled (a request leaves the batcher's queue,
        or the batch it is in counts it CANCELED, not a success); on the ASGI app's path its
        hook does the same (``HANG_UP``)."""
        if isinstance(cycle, Shortcut):
            EDGE.client_disconnects += 1
            log.debug("%s: the client disconnected before its answer", self.client)
            if cycle.answer is not None:
                cycle.answer.cancel()
            return
        # uvicorn marks only the cycle it points at, the last one parsed: one pipelined past
        # would write its answer into the closed transport, which uvloop refuses (an
        # "Exception in ASGI application")
        cycle.disconnected = True
        cycle.message_event.set()
        hang_up = cycle.scope.get(HANG_UP)
        if callable(hang_up):  # an infer request: withdrawn, counted by the app
            hang_up()

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            return  # what a refused client still sends, discarded
        if self.busy_poll is not None:
            self.busy_poll.touch(self.loop)
        self._kept_alive = False
        self._unset_keepalive_if_required()
        self._completed_in_feed = False
        if self._in_body:
            cycle: object = self.cycle
            if type(cycle) is Shortcut and cycle.buffer is not None:
                rest = self._fill(cycle, cycle.buffer, data)
                if rest is None:
                    return
                data = rest
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
            elif self._too_deep:
                EDGE.pipelines_too_deep += 1
                log.debug("%s: more than %d requests pipelined unanswered; closing",
                          self.client, self.max_pipelined)
                self._lingering = True  # nothing more is read or timed
                self.transport.close()  # the answers already written still go out
            else:
                EDGE.bad_requests += 1
                log.debug("%s: invalid HTTP request", self.client)
                self.send_400_response("Invalid HTTP request received.")
            return
        if self._in_head:
            if self.parser is not None and not self._completed_in_feed:
                # all of it went to a head still incomplete. Counted apart from what the
                # callbacks count (whole fields only, once each): a field split between two
                # reads is in both, and their sum counted a head in 1448-byte segments twice
                self._head_raw += len(data)
                if self._head_raw > self.max_header_bytes:
                    self._too_large = (f"the request head exceeds {self.max_header_bytes} "
                                       "bytes")
                    self._refuse_head()
        elif self._in_body:
            self._since = self._now()

    def _fill(self, cycle: Shortcut, buffer: bytearray, data: bytes) -> bytes | None:
        """A large binary body's next bytes, appended to its buffer without the parser: the
        parser would copy them into a bytes object per read, and the reads would be joined
        once more, into a fresh allocation (page faults) on a body of megabytes; a growing
        ``bytearray`` is reallocated in place or remapped, not copied.
        Once the body is whole the request is complete, and a fresh parser takes what
        follows it (a pipelined request): the old one still counts the body's bytes. What
        follows a request that closes the connection (``Connection: close``, HTTP/1.0) is
        dropped, as uvicorn's parser drops it (``lenient_data_after_close``): the fresh one
        would not know the connection is closing. Returns what follows the body, None when
        nothing is to be read."""
        take = min(len(data), cycle.length - len(buffer))
        buffer += data if take == len(data) else memoryview(data)[:take]
        if len(buffer) < cycle.length:
            self._since = self._now()  # the body clock
            return None
        self.parser = request_parser(self)
        self.on_message_complete()
        if take == len(data) or not cycle.keep_alive:
            return None  # after a closing request nothing is read, as the old parser had it
        return data[take:]

    def _refuse_head(self) -> None:
        EDGE.heads_too_large += 1
        log.debug("%s: %s", self.client, self._too_large)
        self.transport.write(refusal(431, "Request Header Fields Too Large",
                                       self._too_large))
        self._close_lingering()

    def _close_lingering(self) -> None:
        """Close after a refusal without resetting a client that is still sending its head:
        closing a socket with unread data sends a reset, and the client's stack may then
        drop the answer before it is read. So stop writing (FIN), discard what still
        arrives for up to ``LINGER_S``, and close when the client does or then."""
        self._lingering = True
        self._in_head = self._in_body = False
        transport = self.transport
        if not transport.can_write_eof():
            transport.close()
            return
        transport.write_eof()
        self.loop.call_later(LINGER_S, transport.close)

    # parser callbacks -----------------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self._begun - self._answered >= self.max_pipelined:
            self._too_deep = True
            raise _PipelineTooDeep  # stops the parser; data_received closes
        super().on_message_begin()
        self._begun += 1
        if not self._in_head:  # a pipelined request behind one still being answered
            self._in_head, self._since = True, self._now()
        self._in_body = False
        self._head_bytes = self._head_raw = self._header_count = 0

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
        self._head_bytes = self._head_raw = 0
        earlier = self.cycle
        shortcut = self._shortcut() if self._fast is not None else None
        if shortcut is None:
            super().on_headers_complete()
        else:
            self.cycle = shortcut  # type: ignore[assignment]
        if earlier is not None and not earlier.response_complete:
            # pipelined behind a request still being answered: uvicorn forgets that one
            self._earlier.append(earlier)  # until it is answered (on_response_complete)

    def on_body(self, body: bytes) -> None:
        cycle: object = self.cycle
        if type(cycle) is Shortcut:
            buffer = cycle.buffer
            if buffer is None:
                cycle.parts.append(body)  # at most the Content-Length checked above
            else:
                buffer += body
        else:
            super().on_body(body)

    def on_message_complete(self) -> None:
        self._in_body = False
        self._completed_in_feed = True
        cycle: object = self.cycle
        if type(cycle) is Shortcut:
            cycle.started = True
            self._submit(cycle)
        else:
            super().on_message_complete()
            if self._answered == self._begun:  # answered (a 413) before its body was read
                self._await_head()

    def on_response_complete(self) -> None:
        if self.pipeline or self.transport.is_closing():
            super().on_response_complete()  # uvicorn starts the next request pipelined
        else:  # uvicorn's, without arming its keep-alive timer (the sweeper keeps it)
            self.server_state.total_requests += 1
            self.flow.resume_reading()
            self._kept_alive, self._idle_at = True, self._now()
        if self.busy_poll is not None:
            self.busy_poll.touch(self.loop)
        self._answered += 1
        if self._earlier:  # a request answered is not kept (its body) for a hang-up
            self._earlier = [c for c in self._earlier if not c.response_complete]
        # an answer written while its body still arrives (a 413 sent early) leaves the
        # rest of that body to the parser: it is not the next request's head
        if self._answered == self._begun and not self._in_body:
            self._await_head()

    def _await_head(self) -> None:
        """Every request is answered and read whole: idle until the next head."""
        self._in_head, self._since = True, self._now()
        self._head_bytes = self._head_raw = 0

    # the application's fast path ------------------------------------------------------------

    def _shortcut(self) -> Shortcut | None:
        """The request just parsed, on the fast path; None: it takes the ASGI path."""
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            return None  # pipelined behind an answer in progress: uvicorn queues it
        if self.expect_100_continue:
            return None
        fast = self._fast
        assert fast is not None
        wanted = self._fast_header
        declared = header = accept = None
        for name, value in self.headers:
            if name == b"content-length":
                declared = value
            elif name == wanted:
                header = value
            elif name == b"accept-encoding":
                accept = value
            elif (name == b"transfer-encoding" or name == b"content-encoding"
                  or name == b"upgrade"):
                return None  # a coded body is the app's to decode, on the ASGI path
        if declared is None or not declared.isdigit():
            return None
        length = int(declared)
        claim = fast.claim(self.parser.get_method(), self.url, length, header, accept)
        if claim is None:
            return None
        keep_alive = (self.parser.get_http_version() != "1.0"
                      and self.parser.should_keep_alive())
        bulk = length >= BUFFERED_BODY_MIN and fast.bulk(claim, header)
        return Shortcut(self, claim, header, keep_alive, length, bulk)

    def _submit(self, cycle: Shortcut) -> None:
        """Hand the whole body to the fast path, which answers through ``cycle``."""
        fast = self._fast
        assert fast is not None
        parts = cycle.parts
        body: bytes | bytearray
        if cycle.buffer is not None:
            body = cycle.buffer
        else:
            body = parts[0] if len(parts) == 1 else b"".join(parts)
        cycle.answer = fast.answer(cycle.claim, cycle.header, body, cycle)

    def _task(self, coroutine: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = self.loop.create_task(coroutine)
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)  # a graceful shutdown waits for it
        return task

    def _write(self, cycle: Shortcut, status: int, lines: list[bytes], content: bytes) -> None:
        """The answer, head and body in one write (two for a large body)."""
        if cycle.disconnected or self.transport.is_closing():
            return
        if self.flow.write_paused:  # the client reads slowly: wait for room first
            self._task(self._write_later(cycle, status, lines, content))
            return
        head = [status_line(status)]
        head.append(DEFAULT_HEADERS.lines(self.server_state.default_headers))
        head += lines
        head.append(b"content-length: %d\r\n" % len(content))
        if not cycle.keep_alive:
            head.append(b"connection: close\r\n")
        head.append(b"\r\n")
        if len(content) <= _ONE_WRITE_MAX:
            head.append(content)
            self.transport.write(b"".join(head))
        else:
            self.transport.write(b"".join(head))
            self.transport.write(content)
        cycle.response_complete = True
        if not cycle.keep_alive:
            self.transport.close()
        self.on_response_complete()

    async def _write_later(self, cycle: Shortcut, status: int, lines: list[bytes],
                           content: bytes) -> None:
        if not self.transport.is_closing():
            await self.flow.drain()
        if self.flow.write_paused:  # the connection was lost while waiting
            return
        self._write(cycle, status, lines, content)


def edge_protocol(busy_poll_us: int = 0, fast_path: FastPath[Any] | None = None
                  ) -> type[BoundedHttpToolsProtocol]:
    """The bounded protocol, answering ``fast_path``'s requests past ASGI when given, its
    loop polling for ``busy_poll_us`` after each request's arrival and answer when not 0
    (``busy_poll.py``); the plain one without either."""
    if busy_poll_us == 0 and fast_path is None:
        return BoundedHttpToolsProtocol
    attributes: dict[str, Any] = {"fast_path": fast_path}
    if busy_poll_us:
        attributes["busy_poll"] = BusyPoll(busy_poll_us / 1e6)
    return type("EdgeHttpToolsProtocol", (BoundedHttpToolsProtocol,), attributes)
