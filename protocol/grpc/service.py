"""``inference.GRPCInferenceService`` over a repository: the RPCs, and errors as status.

Each RPC answers from the same repository, model versions and batchers as the REST
app, so REST and gRPC requests to one model version share its batches and its
statistics. Errors are the ``ModelfnError`` the REST app renders, sent as the gRPC
status Triton sends for them: INVALID_ARGUMENT (400), NOT_FOUND (404), UNAVAILABLE
(503: not ready, queue full, and "Request timeout expired" when the request's queue
timeout passes, as Triton's dynamic batcher says it), RESOURCE_EXHAUSTED (a message
over the size limits), UNIMPLEMENTED (501) and INTERNAL (anything else). Only the
client's own gRPC deadline gives DEADLINE_EXCEEDED, and gRPC itself sends that. RPCs
modelfn does not serve (streaming, shared memory, model load and unload, trace and log
settings) get gRPC's own UNIMPLEMENTED.

A model version is named as Triton reads it, with ``std::stol``: leading
whitespace, a sign and then decimal digits, the rest ignored, so "01" is version 1; no
digits or a negative number is INVALID_ARGUMENT in Triton's words, and an empty string
is the newest ready version. ModelReady answers ``ready: false`` for a model or version
it does not know, as Triton does, not NOT_FOUND.
"""

from __future__ import annotations

import logging
import re
import time
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf import json_format

from modelfn.net.grpc_status import SERVICE, status_details, status_of
from modelfn.protocol.dataplane import DataPlane
from modelfn.protocol.grpc import codec
from modelfn.protocol.grpc import inference_pb2 as pb
from modelfn.protocol.server_metadata import EXTENSIONS, modelfn_version, server_name
from modelfn.runtime.errors import InvalidInput, ModelfnError, ModelNotFound, ResponseTooLarge
from modelfn.runtime.names import VERSION_DIGITS_MAX

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    import numpy as np
    from google.protobuf.message import Message

    from modelfn.protocol.tensors import InferRequest, ModelTensors
    from modelfn.runtime.repository import Repository

log = logging.getLogger("modelfn.grpc")

#: what ``std::stol`` reads of a string: whitespace, an optional sign, decimal digits
_STOL = re.compile(r"[ \t\n\v\f\r]*([+-]?[0-9]+)")
_LONG = range(-(2**63), 2**63)


def model_version(text: str) -> str | None:
    """A request's ``version`` string as Triton reads it (``GetModelVersionFromString``):
    the version it names as the repository spells it, or None (empty: the newest)."""
    if not text:
        return None
    read = _STOL.match(text)
    digits = read.group(1).lstrip("+-").lstrip("0") if read else ""
    # past 19 digits no long holds it (and int() raises past 4,300)
    number = int(read.group(1)) if read and len(digits) <= VERSION_DIGITS_MAX else None
    if number is None or number not in _LONG:  # std::stol throws: no number, or too long
        raise InvalidInput(f"failed to get model version from specified version string "
                           f"'{text}' (details: stol), version should be an integral value > 0")
    if number < 0:
        raise InvalidInput(f"invalid model version specified '{text}' , version should be an "
                           "integral value > 0")
    return str(number)


def _guarded(name: str, method: Callable[[Any], Awaitable[Message]], service: InferenceService
             ) -> Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Awaitable[Message]]:
    """``method`` as an RPC handler whose errors become the matching gRPC status; each call
    is stamped on ``service.last_call``."""

    async def handle(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Message:
        service.last_call = time.monotonic()
        try:
            return await method(request)
        except ModelfnError as exc:
            code = status_of(exc)
            if code is grpc.StatusCode.INTERNAL:
                log.error("%s: %s", name, exc.message)
            await context.abort(code, status_details(exc.message))
        except Exception as exc:
            log.exception("%s failed", name)
            await context.abort(grpc.StatusCode.INTERNAL,
                                f"internal error: {type(exc).__name__}: {exc}")

    return handle


class InferenceService:
    """The RPCs, each a coroutine from request message to response message."""

    def __init__(self, repository: Repository, *, max_send_bytes: int) -> None:
        self.repository = repository
        self.dataplane = DataPlane(repository)
        self.max_send_bytes = max_send_bytes
        #: when a call last reached a handler (``server.stop_draining`` waits for a lull)
        self.last_call = float("-inf")

    async def server_live(self, request: pb.ServerLiveRequest) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    async def server_ready(self, request: pb.ServerReadyRequest) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=self.repository.ready)

    async def model_ready(self, request: pb.ModelReadyRequest) -> pb.ModelReadyResponse:
        version = model_version(request.version)
        try:
            model = self.repository.get(request.name, version)
        except ModelNotFound:
            return pb.ModelReadyResponse(ready=False)
        return pb.ModelReadyResponse(ready=model.ready)

    async def server_metadata(self, request: pb.ServerMetadataRequest
                              ) -> pb.ServerMetadataResponse:
        return pb.ServerMetadataResponse(name=server_name(), version=modelfn_version(),
                                         extensions=EXTENSIONS)

    async def model_metadata(self, request: pb.ModelMetadataRequest
                             ) -> pb.ModelMetadataResponse:
        body = self.repository.metadata(request.name, model_version(request.version))
        return json_format.ParseDict(body, pb.ModelMetadataResponse())

    async def model_infer(self, request: pb.ModelInferRequest) -> pb.ModelInferResponse:
        model = self.repository.get(request.model_name, model_version(request.model_version))
        version, limit = model.version_str, self.max_send_bytes

        def answer(tensors: ModelTensors, decoded: InferRequest,
                   outputs: dict[str, np.ndarray]) -> pb.ModelInferResponse:
            # refused while encoding: counted as any answer that cannot be encoded is
            # (dataplane.count_encoding_failure), once
            response = codec.encode(tensors, decoded, outputs, version)
            size = response.ByteSize()
            if size > limit:
                raise ResponseTooLarge(size, limit)
            return response

        return await self.dataplane.infer_with(
            model, lambda tensors: codec.decode(tensors, request), answer)

    async def model_config(self, request: pb.ModelConfigRequest) -> pb.ModelConfigResponse:
        model = self.repository.get(request.name, model_version(request.version))
        config = json_format.ParseDict(model.config.to_json(), pb.ModelConfig())
        return pb.ModelConfigResponse(config=config)

    async def model_statistics(self, request: pb.ModelStatisticsRequest
                               ) -> pb.ModelStatisticsResponse:
        models = self.repository.select(request.name or None, model_version(request.version))
        return pb.ModelStatisticsResponse(model_stats=[
            json_format.ParseDict(m.stats.to_json(), pb.ModelStatistics()) for m in models
        ])

    async def repository_index(self, request: pb.RepositoryIndexRequest
                               ) -> pb.RepositoryIndexResponse:
        return pb.RepositoryIndexResponse(models=[
            pb.RepositoryIndexResponse.ModelIndex(**entry)
            for entry in self.repository.index(ready=request.ready)
        ])

    def handler(self) -> grpc.GenericRpcHandler:
        """The service's method table, for ``grpc.aio.Server.add_generic_rpc_handlers``."""
        table: dict[str, tuple[Callable[[Any], Awaitable[Message]], type[Message]]] = {
            "ServerLive": (self.server_live, pb.ServerLiveRequest),
            "ServerReady": (self.server_ready, pb.ServerReadyRequest),
            "ModelReady": (self.model_ready, pb.ModelReadyRequest),
            "ServerMetadata": (self.server_metadata, pb.ServerMetadataRequest),
            "ModelMetadata": (self.model_metadata, pb.ModelMetadataRequest),
            "ModelInfer": (self.model_infer, pb.ModelInferRequest),
            "ModelConfig": (self.model_config, pb.ModelConfigRequest),
            "ModelStatistics": (self.model_statistics, pb.ModelStatisticsRequest),
            "RepositoryIndex": (self.repository_index, pb.RepositoryIndexRequest),
        }
        return grpc.method_handlers_generic_handler(SERVICE, {
            name: grpc.unary_unary_rpc_method_handler(
                _guarded(name, method, self),
                request_deserializer=request_type.FromString,
                response_serializer=_serialize,
            )
            for name, (method, request_type) in table.items()
        })


def _serialize(message: Message) -> bytes:
    return message.SerializeToString()
