"""Which browser pages may call the gateway: none, unless their origins are allowed.

A browser sends ``Origin`` with every cross-site request, including the "simple" ones it
sends without asking first (a ``text/plain`` POST from any page the user visits, to a
gateway on 127.0.0.1). So a request that names an origin not allowed is refused with 403
before it reaches a function, whatever its method or path; requests without ``Origin``
(tritonclient, curl, other servers) are not browsers' and go on. A preflight
(``OPTIONS`` with ``Access-Control-Request-Method``) from an allowed origin is answered
here, naming that origin, the methods and the headers V2 uses; one from another origin
gets the 403. Answers to an allowed origin carry ``Access-Control-Allow-Origin`` (that
origin, never ``*``) and ``Vary: Origin``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from modelfn.runtime.errors import ModelfnError

if TYPE_CHECKING:
    from collections.abc import Iterable

    from starlette.types import Message, Scope, Send

_METHODS = b"GET, POST, HEAD"
_HEADERS = b"authorization, x-api-key, content-type, inference-header-content-length"
#: how long a browser may keep a preflight's answer, in seconds
_MAX_AGE = b"600"


class OriginRefused(ModelfnError):
    status_code = 403

    def __init__(self, origin: str) -> None:
        super().__init__(f"requests from the browser origin '{origin}' are refused: the "
                         "gateway allows no browser origins unless given --allow-origin")


class Origins:
    def __init__(self, allowed: Iterable[str] = ()) -> None:
        self.allowed = frozenset(o.rstrip("/").encode("latin-1") for o in allowed)

    def check(self, scope: Scope) -> bytes | None:
        """The request's ``Origin`` when it is allowed, None when it names none; a request
        from another origin is ``OriginRefused``."""
        for name, value in scope["headers"]:
            if name == b"origin":
                if value in self.allowed:
                    return bytes(value)
                raise OriginRefused(value.decode("latin-1"))
        return None

    @staticmethod
    def is_preflight(scope: Scope) -> bool:
        return scope["method"] == "OPTIONS" and any(
            name == b"access-control-request-method" for name, _ in scope["headers"])

    @staticmethod
    async def answer_preflight(origin: bytes, send: Send) -> None:
        await send({"type": "http.response.start", "status": 204, "headers": [
            (b"access-control-allow-origin", origin), (b"vary", b"Origin"),
            (b"access-control-allow-methods", _METHODS),
            (b"access-control-allow-headers", _HEADERS),
            (b"access-control-max-age", _MAX_AGE), (b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})

    @staticmethod
    def marking(origin: bytes, send: Send) -> Send:
        """``send`` adding the allowed origin to the answer's headers."""
        async def marked(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [
                    *message.get("headers", ()), (b"access-control-allow-origin", origin),
                    (b"vary", b"Origin")]}
            await send(message)
        return marked


def exposure_warning(host: str, keyed: bool) -> str | None:
    """A warning when a gateway without API keys listens beyond this machine."""
    import ipaddress

    if keyed:
        return None
    try:
        loopback = ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if loopback:
        return None
    return (f"the gateway listens on {host} WITHOUT API keys: anyone who can reach this "
            "address can call every routed model (and the functions' signed URLs through "
            "it); give --api-keys, or listen on 127.0.0.1")
