"""KServe V2 gRPC passed through unparsed: what the gateway and the local ingress share.

A relay serves ``inference.GRPCInferenceService`` with every message left as bytes: it
reads only the model name and version at the head of a request (``request_model``), lets
its owner decide where the call goes (``Forward``), and sends the upstream's answer, or
its status, details and trailing metadata, back unchanged. Tensors are never decoded,
so a relay costs a copy of the message, not a parse of it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import grpc

from modelfn.net.grpc_status import SERVICE, status_details, status_of
from modelfn.net.headers import HOP_BY_HOP
from modelfn.runtime.errors import ModelfnError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping, Sequence

    Metadata = Sequence[tuple[str, str | bytes]]
    #: (method, request, metadata to send on, seconds left of the caller's deadline)
    Forward = Callable[[str, bytes, Metadata, float | None], Awaitable[bytes]]
    Local = Callable[[bytes, Metadata], Awaitable[bytes]]

log = logging.getLogger("modelfn.grpc.relay")

#: the service's streaming RPC: relays carry unary calls only
STREAMING = frozenset({"ModelStreamInfer"})
#: the RPCs of the V2 service a modelfn function serves: any other (shared memory, model
#: load and unload, log and trace settings, an unknown name) is UNIMPLEMENTED at the relay,
#: as the function would answer it, and never forwarded as if it named a model
SERVED = frozenset({"ServerLive", "ServerReady", "ServerMetadata", "ModelReady",
                    "ModelMetadata", "ModelInfer", "ModelConfig", "ModelStatistics",
                    "RepositoryIndex"})
#: the caller's credentials with the relay, never the upstream's
_CREDENTIALS = frozenset({"authorization", "x-api-key"})
#: caller metadata that describes the caller's connection or client, or its credentials
_NOT_FORWARDED = HOP_BY_HOP | _CREDENTIALS | {"user-agent", "content-type", "host"}


def request_model(request: bytes) -> tuple[str, str]:
    """Fields 1 and 2 of a request message: (model name, version) of every per-model RPC.

    Reads the protobuf wire format just far enough: encoders write fields in number
    order, so the two strings come first and the tensors behind them are skipped, never
    parsed. A message that is not protobuf is a ``BadMessage``."""
    name = version = ""
    position, end = 0, len(request)
    while position < end:
        key, position = _varint(request, position)
        number, wire = key >> 3, key & 7
        if wire == 2:  # length-delimited
            size, position = _varint(request, position)
            if position + size > end:
                raise BadMessage("a field runs past the end of the message")
            if number in (1, 2):
                try:
                    text = request[position:position + size].decode()
                except UnicodeDecodeError:
                    raise BadMessage(f"field {number} is not UTF-8 text") from None
                if number == 1:
                    name = text
                else:
                    version = text
            position += size
        elif wire == 0:
            _, position = _varint(request, position)
        elif wire in (1, 5):
            position += 8 if wire == 1 else 4
        else:
            raise BadMessage(f"wire type {wire} is not protobuf's")
        if number > 2 and name:
            break
    return name, version


def _varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while position < len(data):
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
        shift += 7
        if shift > 63:
            break
    raise BadMessage("a varint runs past the end of the message")


class BadMessage(ModelfnError):
    status_code = 400

    def __init__(self, message: str) -> None:
        super().__init__(f"the request is not a V2 gRPC message: {message}")


def forwarded(metadata: Metadata | None) -> list[tuple[str, str | bytes]]:
    """The caller's metadata an upstream should see: not pseudo-headers, not gRPC's own,
    not the caller's credentials with the relay."""
    return [(k, v) for k, v in metadata or ()
            if not k.startswith((":", "grpc-")) and k not in _NOT_FORWARDED]


class NotGrpcServer(ModelfnError):
    """The upstream answered in HTTP/1.x: it serves V2 REST, not gRPC."""

    status_code = 501

    def __init__(self, where: str) -> None:
        super().__init__(f"the function at {where} answered in HTTP/1.x, not gRPC: it serves "
                         "V2 REST (a function serves gRPC when deployed with --protocol grpc)")


async def unary(channel: grpc.aio.Channel, method: str, request: bytes, metadata: Metadata,
                timeout: float | None, *, where: str) -> bytes:
    """Call ``method`` on ``channel`` (to ``where``) with the message as bytes; the answer
    as bytes. Raises ``grpc.aio.AioRpcError`` with the upstream's status, or
    ``NotGrpcServer`` when what answered speaks HTTP/1.x."""
    call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
        f"/{SERVICE}/{method}")
    try:
        answer: bytes = await call(request, metadata=metadata, timeout=timeout)
    except grpc.aio.AioRpcError as exc:
        if "http1.x server" in (exc.details() or ""):
            raise NotGrpcServer(where) from None
        raise
    return answer


def channel_for(url: str, *, max_message_bytes: int) -> grpc.aio.Channel:
    """A channel to a function URL: ``http://host[:port]`` is h2c (port 80 when none),
    ``https://`` TLS (443); the URL's host is the ``:authority``, as Knative routes by."""
    scheme, _, rest = url.partition("://")
    host = rest.split("/", 1)[0]
    if ":" not in host.rsplit("]", 1)[-1]:
        host += ":443" if scheme == "https" else ":80"
    options = [("grpc.max_receive_message_length", max_message_bytes),
               ("grpc.max_send_message_length", max_message_bytes)]
    if scheme == "https":
        return grpc.aio.secure_channel(host, grpc.ssl_channel_credentials(), options=options)
    return grpc.aio.insecure_channel(host, options=options)


def is_unreached(error: grpc.aio.AioRpcError) -> bool:
    """Whether the call never reached a server: refused, reset before an answer."""
    return error.code() is grpc.StatusCode.UNAVAILABLE and any(
        words in (error.details() or "").lower()
        for words in ("connect", "refused", "reset", "socket closed", "unreachable"))


def relay_handler(forward: Forward, *,
                  local: Mapping[str, Local] | None = None) -> grpc.GenericRpcHandler:
    """A handler for every RPC of the V2 service: ``local`` ones answered by the relay
    itself, the others passed to ``forward``; streaming RPCs, and those a function does not
    serve, are UNIMPLEMENTED."""
    answered = dict(local or {})
    made: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}  # gRPC asks once per call

    class _Handler(grpc.GenericRpcHandler):
        def service(self, details: grpc.HandlerCallDetails
                    ) -> grpc.RpcMethodHandler[Any, Any] | None:
            path: str = details.method
            found = made.get(path)
            if found is not None:
                return found
            service, _, method = path.lstrip("/").partition("/")
            if service != SERVICE or method not in SERVED:
                return None  # gRPC answers UNIMPLEMENTED
            handler: grpc.RpcMethodHandler[Any, Any] = grpc.unary_unary_rpc_method_handler(
                _relayed(method, forward, answered.get(method)))
            made[path] = handler
            return handler

    return _Handler()


def _relayed(method: str, forward: Forward, own: Local | None
             ) -> Callable[[bytes, grpc.aio.ServicerContext[Any, Any]], Awaitable[bytes]]:
    async def handle(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        metadata = tuple(context.invocation_metadata() or ())
        try:
            if own is not None:
                return await own(request, metadata)
            return await forward(method, request, metadata, context.time_remaining())
        except grpc.aio.AioRpcError as exc:  # the upstream's own answer, passed on
            trailing = exc.trailing_metadata()
            if trailing:
                context.set_trailing_metadata(forwarded(list(trailing)))
            await context.abort(exc.code(), status_details(exc.details() or ""))
        except ModelfnError as exc:
            await context.abort(status_of(exc), status_details(exc.message))
        except Exception as exc:
            log.exception("relaying %s failed", method)
            await context.abort(grpc.StatusCode.INTERNAL,
                                f"internal error: {type(exc).__name__}: {exc}")
        raise AssertionError("not reached: abort raises")

    return handle
