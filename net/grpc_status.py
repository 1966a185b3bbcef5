"""KServe V2 gRPC's service name, and a ``ModelfnError`` as the gRPC status that carries it.

What the function's gRPC service (``modelfn.protocol.grpc.service``) and the relays in
front of it (``grpc_relay``) answer alike: the status Triton sends for each error,
INVALID_ARGUMENT (400), NOT_FOUND (404), UNAVAILABLE (503), RESOURCE_EXHAUSTED (a message
over the size limits), UNIMPLEMENTED (501) and INTERNAL (anything else), with a message cut
to what gRPC clients accept.
"""

from __future__ import annotations

import grpc

from modelfn.runtime.errors import ModelfnError, ResponseTooLarge

SERVICE = "inference.GRPCInferenceService"

#: errors whose gRPC status their HTTP status does not tell (a 500 there)
_STATUS_BY_CLASS: dict[type[ModelfnError], grpc.StatusCode] = {
    ResponseTooLarge: grpc.StatusCode.RESOURCE_EXHAUSTED,
}
_STATUS_BY_HTTP: dict[int, grpc.StatusCode] = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.NOT_FOUND,
    413: grpc.StatusCode.RESOURCE_EXHAUSTED,
    501: grpc.StatusCode.UNIMPLEMENTED,
    503: grpc.StatusCode.UNAVAILABLE,
}


def status_of(exc: ModelfnError) -> grpc.StatusCode:
    """The gRPC status that carries ``exc``."""
    found = _STATUS_BY_CLASS.get(type(exc))
    return found if found is not None else _STATUS_BY_HTTP.get(exc.status_code,
                                                               grpc.StatusCode.INTERNAL)


#: the most bytes of a status message sent: gRPC clients refuse trailers over 16 KiB (and
#: then report RESOURCE_EXHAUSTED instead of the status), and a message repeats names and
#: versions as the client sent them, of any length
STATUS_DETAILS_MAX = 4096


def status_details(text: str) -> str:
    """``text`` as a status message: cut to ``STATUS_DETAILS_MAX`` bytes of UTF-8."""
    data = text.encode()
    if len(data) <= STATUS_DETAILS_MAX:
        return text
    return data[:STATUS_DETAILS_MAX - 3].decode(errors="ignore") + "..."
