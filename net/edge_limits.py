"""The HTTP edge's bounds and clocks: the limits a connection is held to, and the sweeper
that closes the connections past their time (``edge.py`` says what each limit does)."""

from __future__ import annotations

import asyncio
import os
import time
from typing import TYPE_CHECKING, Protocol

from modelfn.net.http1 import encode_response_head

if TYPE_CHECKING:
    from asyncio import TimerHandle


class Swept(Protocol):
    """A connection the sweeper watches."""

    def check(self, now: float) -> None:
        """Close the connection if its head or body is overdue, or it idled too long."""


MAX_HEADER_BYTES = 16 * 1024
#: a body of binary tensors this large is read into one buffer past the parser (see
#: ``edge.BoundedHttpToolsProtocol._fill``); a smaller one arrives in one or two reads anyway
BUFFERED_BODY_MIN = 256 * 1024
MAX_HEADERS = 100
MAX_PIPELINED = 256
HEAD_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 30.0


def setting(name: str, default: float) -> float:
    """The number the environment sets as ``name``, else ``default``."""
    value = os.environ.get(name)
    try:
        return float(value) if value else default
    except ValueError:
        raise SystemExit(f"modelfn: {name}={value!r} is not a number") from None


def refusal(status: int, reason: str, message: str) -> bytes:
    """A whole answer that refuses a request and closes the connection."""
    body = f'{{"error":"{message}"}}'.encode()
    headers = b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n"
    return encode_response_head(status, headers % len(body), reason.encode()) + body


class Sweeper:
    """One timer per process, not one per request: every ``SWEEP_S`` it closes the
    connections whose head or body is overdue. A request only stamps the loop's clock."""

    def __init__(self) -> None:
        self.connections: set[Swept] = set()
        self._timer: TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def add(self, connection: Swept) -> None:
        self.connections.add(connection)
        loop = asyncio.get_running_loop()
        if self._timer is None or self._loop is not loop:  # a server on a new loop
            self._loop = loop
            self._timer = loop.call_later(SWEEP_S, self._sweep)

    def discard(self, connection: Swept) -> None:
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
