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

It also takes the infer route's shortcut. A ``POST /v2/models/{m}[/versions/{v}]/infer``
with a ``Content-Length`` no larger than the JSON limit, nothing in flight before it on the
connection, no query, no percent-escapes, no ``Expect`` and no upgrade, is answered without
the ASGI machinery: the parser's callbacks collect the body (a body of binary tensors of
``BUFFERED_BODY_MIN`` or more goes straight from each read into one buffer, past the
parser); once it is whole it is decoded and queued (``InferEndpoint.submit``), and the
batcher's callback writes the answer,
head and body, in one write. No scope is finished, no ``RequestResponseCycle``,
``asyncio.Event``, task, ``receive`` or ``send`` is made or called. Errors are rendered by
the app's own handlers, so every answer is the one the ASGI path gives; any other request
takes that path, unchanged.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from functools import partial
from typing import TYPE_CHECKING, Any

import httptools
from uvicorn.protocols.http.httptools_impl import (
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)

from modelfn.handlers.busy_poll import BusyPoll
from modelfn.runtime.app import HANG_UP, V2App, infer_params
from modelfn.runtime.protocol import HEADER_LENGTH
from modelfn.runtime.stats import EDGE

if TYPE_CHECKING:
    from asyncio import TimerHandle
    from collections.abc import Coroutine

    import numpy as np
    from starlette.types import Scope

    from modelfn.runtime.batch_request import Answer
    from modelfn.runtime.model import ModelVersion
    from modelfn.runtime.tensors import InferRequest

log = logging.getLogger("modelfn.edge")

MAX_HEADER_BYTES = 16 * 1024
#: a body of binary tensors this large is read into one buffer past the parser (see
#: ``BoundedHttpToolsProtocol._fill``); a smaller one arrives in one or two reads anyway
BUFFERED_BODY_MIN = 256 * 1024
MAX_HEADERS = 100
MAX_PIPELINED = 256
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


class _PipelineTooDeep(Exception):
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
#: how long a refused connection may go on sending before it is closed anyway
LINGER_S = 2.0

_HEADER_LENGTH = HEADER_LENGTH.encode()
#: an answer larger than this goes out as two writes (head, body) rather than be copied
_ONE_WRITE_MAX = 64 * 1024


_ROUTES: dict[bytes, dict[str, str] | None] = {}
#: request targets remembered (at most this many, this long: 256 KiB in all); any other
#: is parsed every time
_ROUTES_MAX = 1024
_ROUTE_MAX_BYTES = 256


def _infer_route(url: bytes) -> dict[str, str] | None:
    """``infer_params`` of a request target the shortcut may take: a plain ASCII path with
    no query, fragment or percent-escape (the ASGI path unquotes and splits those). A
    function serves a handful of models, so the answer is remembered per target."""
    try:
        return _ROUTES[url]
    except KeyError:
        pass
    params = None
    if (url.endswith(b"/infer") and url.isascii() and b"?" not in url and b"%" not in url
            and b"#" not in url):
        params = infer_params(url.decode())
    if len(_ROUTES) < _ROUTES_MAX and len(url) <= _ROUTE_MAX_BYTES:
        _ROUTES[url] = params
    return params


class _DefaultHeaders:
    """The server's default headers (``date``, ``server``) as lines of a head, formatted
    once per list: uvicorn replaces the list when the date changes, once a second."""

    def __init__(self) -> None:
        self._source: list[tuple[bytes, bytes]] | None = None
        self._lines = b""

    def lines(self, headers: list[tuple[bytes, bytes]]) -> bytes:
        if headers is not self._source:
            self._lines = b"".join([b"%s: %s\r\n" % pair for pair in headers])
            self._source = headers
        return self._lines


_DEFAULT_HEADERS = _DefaultHeaders()


def _lines(headers: dict[str, str]) -> list[bytes]:
    """An answer's headers as the lines of its head."""
    return [f"{name}: {value}\r\n".encode() for name, value in headers.items()]


def _parser(protocol: HttpToolsProtocol) -> httptools.HttpRequestParser:
    """A request parser for ``protocol``, set up as uvicorn sets up its own."""
    parser = httptools.HttpRequestParser(protocol)
    parser.set_dangerous_leniencies(lenient_data_after_close=True)
    return parser


class _NoEvent:
    """uvicorn sets its cycle's event when the connection is lost: nobody waits on ours."""

    def set(self) -> None:
        pass


class _Shortcut:
    """An infer request on the shortcut. It stands where uvicorn keeps its
    ``RequestResponseCycle`` (``protocol.cycle``), so uvicorn's own bookkeeping applies to
    it unchanged: a request pipelined behind it waits in uvicorn's queue, a graceful
    shutdown lets it finish and closes (``keep_alive``), a lost connection marks it
    ``disconnected``."""

    __slots__ = ("scope", "url", "params", "header_length", "keep_alive", "parts", "buffer",
                 "length", "started", "disconnected", "response_complete", "answer")
    message_event = _NoEvent()

    def __init__(self, scope: Scope, url: bytes, params: dict[str, str],
                 header_length: bytes | None, keep_alive: bool, length: int) -> None:
        self.scope, self.url, self.params = scope, url, params
        self.header_length, self.keep_alive = header_length, keep_alive
        self.parts: list[bytes] = []
        #: a large body of binary tensors is appended to one buffer as it arrives, by
        #: ``data_received`` itself past the first read (``BoundedHttpToolsProtocol._fill``);
        #: it grows with what arrived, as the parts do: a client that declares 16 MiB and
        #: sends none of it costs nothing
        self.buffer = (bytearray() if length >= BUFFERED_BODY_MIN
                       and header_length is not None and header_length != b"0" else None)
        self.length = length
        self.started = self.disconnected = self.response_complete = False
        #: its place in the batcher, once queued; or the task that decodes it in the helper
        #: process and then queues it: either is cancelled when the client hangs up
        self.answer: Answer | asyncio.Task[None] | None = None


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with bounded heads and timeouts on slow clients."""

    max_header_bytes = int(_setting("MODELFN_MAX_HEADER_BYTES", MAX_HEADER_BYTES))
    max_headers = int(_setting("MODELFN_MAX_HEADERS", MAX_HEADERS))
    head_timeout_s = _setting("MODELFN_HEAD_TIMEOUT_S", HEAD_TIMEOUT_S)
    body_timeout_s = _setting("MODELFN_BODY_TIMEOUT_S", BODY_TIMEOUT_S)
    max_pipelined = int(_setting("MODELFN_MAX_PIPELINED", MAX_PIPELINED))
    sweeper = _Sweeper()
    #: keeps the loop polling after each request (``busy_poll_protocol``); None: it sleeps
    busy_poll: BusyPoll | None = None

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
        self._earlier: list[RequestResponseCycle | _Shortcut] = []
        #: every request answered and nothing received since: idle under keep-alive, whose
        #: timeout the sweeper keeps rather than a timer made and cancelled per request
        self._kept_alive = False
        self._idle_at = 0.0  # since when
        app = self.app  # the app as uvicorn calls it: wrapped (trace logging) is not V2App
        shortcut = (isinstance(app, V2App) and not self.root_path
                    and self.limit_concurrency is None)
        self._v2: V2App | None = app if shortcut else None
        self._json_limit = app.infer.limits.json if shortcut else 0

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
        for cycle in (*self._earlier, self.cycle):
            if cycle is not None and not cycle.response_complete:
                self._hung_up(cycle)
        super().connection_lost(exc)

    def _hung_up(self, cycle: RequestResponseCycle | _Shortcut) -> None:
        """The client left before ``cycle`` was answered: its request is withdrawn. On the
        shortcut the request leaves the queue (or the batch it is in counts it CANCELED, not
        a success); on the ASGI app's path its hook does the same (``HANG_UP``)."""
        if type(cycle) is _Shortcut:
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
            if type(cycle) is _Shortcut and cycle.buffer is not None:
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

    def _fill(self, cycle: _Shortcut, buffer: bytearray, data: bytes) -> bytes | None:
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
        self.parser = _parser(self)
        self.on_message_complete()
        if take == len(data) or not cycle.keep_alive:
            return None  # after a closing request nothing is read, as the old parser had it
        return data[take:]

    def _refuse_head(self) -> None:
        EDGE.heads_too_large += 1
        log.debug("%s: %s", self.client, self._too_large)
        self.transport.write(_response(431, "Request Header Fields Too Large",
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
        shortcut = self._shortcut() if self._v2 is not None else None
        if shortcut is None:
            super().on_headers_complete()
        else:
            self.cycle = shortcut  # type: ignore[assignment]
        if earlier is not None and not earlier.response_complete:
            # pipelined behind a request still being answered: uvicorn forgets that one
            self._earlier.append(earlier)  # until it is answered (on_response_complete)

    def on_body(self, body: bytes) -> None:
        cycle: object = self.cycle
        if type(cycle) is _Shortcut:
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
        if type(cycle) is _Shortcut:
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

    # the infer route's shortcut ---------------------------------------------------------------

    def _shortcut(self) -> _Shortcut | None:
        """The request just parsed, on the shortcut; None: it takes the ASGI path."""
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            return None  # pipelined behind an answer in progress: uvicorn queues it
        url = self.url
        if self.expect_100_continue or self.parser.get_method() != b"POST":
            return None
        params = _infer_route(url)
        if params is None:
            return None
        declared = header_length = None
        for name, value in self.headers:
            if name == b"content-length":
                declared = value
            elif name == _HEADER_LENGTH:
                header_length = value
            elif name == b"transfer-encoding" or name == b"upgrade":
                return None
        if declared is None or not declared.isdigit() or int(declared) > self._json_limit:
            return None  # the ASGI path refuses an oversize body before reading it
        keep_alive = (self.parser.get_http_version() != "1.0"
                      and self.parser.should_keep_alive())
        return _Shortcut(self.scope, url, params, header_length, keep_alive,  # type: ignore[arg-type]
                         int(declared))

    def _submit(self, cycle: _Shortcut) -> None:
        """Decode and queue the request now; its answer is written from the batcher's
        callback. A request too large to decode on the loop, and every failure, goes through
        a task instead (the app's error handlers are coroutines)."""
        v2 = self._v2
        assert v2 is not None
        parts = cycle.parts
        body: bytes | bytearray
        if cycle.buffer is not None:
            body = cycle.buffer
        else:
            body = parts[0] if len(parts) == 1 else b"".join(parts)
        try:
            submitted = v2.infer.submit(cycle.params, body, cycle.header_length)
        except Exception as exc:
            self._task(self._fail(cycle, exc))
            return
        if submitted is None:
            cycle.answer = self._task(self._infer(cycle, body))
            return
        model, request, answer, start = submitted
        cycle.answer = answer
        answer.then(partial(self._outputs, cycle, model, request, start))

    def _outputs(self, cycle: _Shortcut, model: ModelVersion, request: InferRequest,
                 start: int, outcome: dict[str, np.ndarray] | Exception) -> None:
        """Write the answer, called by the batcher as it resolves the batch."""
        if isinstance(outcome, Exception):
            self._task(self._fail(cycle, outcome))
            return
        try:
            content, headers = model.encode(request, outcome, start)
        except Exception as exc:
            self._task(self._fail(cycle, exc))
            return
        self._write(cycle, 200, _lines(headers), content)

    async def _infer(self, cycle: _Shortcut, body: bytes | bytearray) -> None:
        v2 = self._v2
        assert v2 is not None
        try:
            content, headers = await v2.infer.infer(cycle.params, body, cycle.header_length)
        except Exception as exc:
            await self._fail(cycle, exc)
            return
        self._write(cycle, 200, _lines(headers), content)

    async def _fail(self, cycle: _Shortcut, exc: Exception) -> None:
        """Answer as the app's handler for ``exc`` does on the ASGI path."""
        v2 = self._v2
        assert v2 is not None
        scope = cycle.scope
        scope.update(method="POST", path=cycle.url.decode(), raw_path=cycle.url,
                     query_string=b"", path_params=cycle.params, app=v2)
        response, unexpected = await v2.failure(scope, exc)
        if unexpected:
            cycle.keep_alive = False  # as uvicorn closes after an app's exception
        self._write(cycle, response.status_code,
                    [b"%s: %s\r\n" % pair for pair in response.raw_headers
                     if pair[0] != b"content-length"], bytes(response.body))

    def _task(self, coroutine: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = self.loop.create_task(coroutine)
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)  # a graceful shutdown waits for it
        return task

    def _write(self, cycle: _Shortcut, status: int, lines: list[bytes], content: bytes) -> None:
        """The answer, head and body in one write (two for a large body)."""
        if cycle.disconnected or self.transport.is_closing():
            return
        if self.flow.write_paused:  # the client reads slowly: wait for room first
            self._task(self._write_later(cycle, status, lines, content))
            return
        head = [STATUS_LINE[status]]
        head.append(_DEFAULT_HEADERS.lines(self.server_state.default_headers))
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

    async def _write_later(self, cycle: _Shortcut, status: int, lines: list[bytes],
                           content: bytes) -> None:
        if not self.transport.is_closing():
            await self.flow.drain()
        if self.flow.write_paused:  # the connection was lost while waiting
            return
        self._write(cycle, status, lines, content)


def busy_poll_protocol(window_us: int) -> type[BoundedHttpToolsProtocol]:
    """The bounded protocol, its loop polling for ``window_us`` after each request's
    arrival and answer (``handlers/busy_poll.py``); the plain one for 0."""
    if window_us == 0:
        return BoundedHttpToolsProtocol
    return type("BusyPolledHttpToolsProtocol", (BoundedHttpToolsProtocol,),
                {"busy_poll": BusyPoll(window_us / 1e6)})
