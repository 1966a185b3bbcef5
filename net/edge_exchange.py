"""A request on the HTTP edge's fast path and what answering it takes: the ``Exchange`` the
edge gives the application (``fast_path.py``), the server's default header lines, and a
request parser set up as uvicorn sets up its own."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import httptools

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Coroutine

    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    from modelfn.net.edge import BoundedHttpToolsProtocol
    from modelfn.net.fast_path import Pending


class DefaultHeaders:
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


DEFAULT_HEADERS = DefaultHeaders()


def request_parser(protocol: HttpToolsProtocol) -> httptools.HttpRequestParser:
    """A request parser for ``protocol``, set up as uvicorn sets up its own."""
    parser = httptools.HttpRequestParser(protocol)
    parser.set_dangerous_leniencies(lenient_data_after_close=True)
    return parser


class _NoEvent:
    """uvicorn sets its cycle's event when the connection is lost: nobody waits on ours."""

    def set(self) -> None:
        pass


class Shortcut:
    """A request on the fast path, and its ``Exchange``. It stands where uvicorn keeps its
    ``RequestResponseCycle`` (``protocol.cycle``), so uvicorn's own bookkeeping applies to
    it unchanged: a request pipelined behind it waits in uvicorn's queue, a graceful
    shutdown lets it finish and closes (``keep_alive``), a lost connection marks it
    ``disconnected``."""

    __slots__ = ("protocol", "claim", "header", "keep_alive", "parts", "buffer", "length",
                 "started", "disconnected", "response_complete", "answer")
    message_event = _NoEvent()

    def __init__(self, protocol: BoundedHttpToolsProtocol, claim: object,
                 header: bytes | None, keep_alive: bool, length: int, bulk: bool) -> None:
        self.protocol, self.claim, self.header = protocol, claim, header
        self.keep_alive = keep_alive
        self.parts: list[bytes] = []
        #: a large body of raw data is appended to one buffer as it arrives, by
        #: ``data_received`` itself past the first read (``edge.BoundedHttpToolsProtocol._fill``);
        #: it grows with what arrived, as the parts do: a client that declares 16 MiB and
        #: sends none of it costs nothing
        self.buffer = bytearray() if bulk else None
        self.length = length
        self.started = self.disconnected = self.response_complete = False
        #: what the fast path left to cancel when the client hangs up (its place in a
        #: queue, a task), once the body has been handed over
        self.answer: Pending | None = None

    def respond(self, status: int, lines: list[bytes], content: bytes, *,
                close: bool = False) -> None:
        if close:
            self.keep_alive = False
        self.protocol._write(self, status, lines, content)

    def spawn(self, coroutine: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        return self.protocol._task(coroutine)
