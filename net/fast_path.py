"""The HTTP edge's fast-path hook: how an application answers requests without ASGI.

The edge (``edge.py``) parses every request; an application may take some of them off
the ASGI path by registering a ``FastPath`` when the server is built. For each request
head the edge asks it whether the request is its (``claim``); a claimed request's body
is read whole by the edge and handed over (``answer``), and the application answers
through the ``Exchange`` the edge gives it: status, header lines and content in one
write, from a callback or from a task the edge tracks. Its errors are answered the same
way. Every request not claimed takes the ASGI path unchanged.

``HANG_UP`` is the other half of the contract, for the ASGI path: an application leaves
a callable under that scope key, and the edge calls it when the client hangs up before
the answer (``Answer.cancel``'s counterpart for a request in an ASGI task).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Coroutine
    from typing import Any

#: the scope key where an ASGI request leaves the callable that withdraws it, for the edge
#: to call when the client hangs up first
HANG_UP = "modelfn.hang_up"

C = TypeVar("C")


class Pending(Protocol):
    """Work the edge cancels when the client hangs up before its answer."""

    def cancel(self) -> bool: ...


class Exchange(Protocol):
    """One claimed request's way back to its client."""

    def respond(self, status: int, lines: list[bytes], content: bytes, *,
                close: bool = False) -> None:
        """Write the answer: ``lines`` are its header lines (``b"name: value\\r\\n"``, no
        content-length, which the edge adds); ``close`` closes the connection after it."""

    def spawn(self, coroutine: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run ``coroutine`` in a task the server's graceful shutdown waits for."""


class FastPath(Protocol[C]):
    """An application's requests answered past the ASGI machinery."""

    @property
    def app(self) -> object:
        """The ASGI app the fast path answers for: taken only while uvicorn calls that app
        unwrapped (with trace logging, say, every request takes the ASGI path)."""

    @property
    def header(self) -> bytes:
        """The one request header, lowercase, whose value ``claim`` and ``answer`` get."""

    def claim(self, method: bytes, url: bytes, length: int, header: bytes | None,
              accept: bytes | None) -> C | None:
        """The request whose head this is, if the fast path takes it (with a
        ``Content-Length`` of ``length``, no transfer or content coding, upgrade or
        ``Expect``); None: the ASGI path. ``accept`` is its ``Accept-Encoding``, for the
        answer's coding. Called for every head: it must be cheap and raise nothing."""

    def bulk(self, claim: C, header: bytes | None) -> bool:
        """Whether a large body of ``claim`` is raw data, best gathered into one buffer as
        it arrives rather than through the parser (asked only of a large body)."""

    def answer(self, claim: C, header: bytes | None, body: bytes | bytearray,
               exchange: Exchange) -> Pending | None:
        """Answer the claimed request whose whole ``body`` has arrived, now or later through
        ``exchange``: what to cancel if the client hangs up first, if anything."""
