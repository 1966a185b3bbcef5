"""The one protocol-neutral path of an infer request: decode, submit arrays, encode.

REST (``rest``, and the HTTP edge's fast path through it), gRPC (``grpc.service``) and
the Lambda handler (through the REST app) all serve a request here: its body is decoded
against the model version's tensors, its input arrays go to the model version
(``ModelVersion.submit``, with every other request of that version), and its outputs are
encoded in the wire format it came in. A failure is counted once in the model's
statistics: a request that cannot be decoded here, one the batcher refuses or fails in
the batcher, an answer that cannot be encoded here.

Each model version's ``ModelCodec`` is made once, when the data plane first sees it ready.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, TypeVar

from modelfn.protocol import offload
from modelfn.protocol.codec import ModelCodec
from modelfn.runtime.batch_request import RequestContext
from modelfn.runtime.errors import BackendError, InvalidInput, ModelfnError, ModelNotReady

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy as np

    from modelfn.protocol.tensors import InferRequest, ModelTensors
    from modelfn.runtime.batch_request import Answer
    from modelfn.runtime.model import ModelVersion
    from modelfn.runtime.repository import Repository
    from modelfn.runtime.stats import ModelStats

    Outputs = dict[str, np.ndarray]

R = TypeVar("R")


class DataPlane:
    """Infer requests to the model versions of one repository, whatever their wire."""

    def __init__(self, repository: Repository, *, offload_bytes: int | None = None) -> None:
        """``offload_bytes``: a REST body whose JSON part is larger is decoded in the helper
        process (``offload``); None: never."""
        self.repository = repository
        self.offload_bytes = offload_bytes
        self._codecs: dict[ModelVersion, ModelCodec] = {}
        for model in repository.all_versions():
            if model.ready:
                self._codecs[model] = _codec(model)

    def model(self, name: str, version: str | None = None) -> ModelVersion:
        return self.repository.get(name, version)

    def codec(self, model: ModelVersion) -> ModelCodec:
        """``model``'s V2 codec; refused (503) while the version is not ready."""
        if not model.ready:
            raise ModelNotReady(model.name, model.version, model.reason)
        codec = self._codecs.get(model)
        if codec is None:
            codec = self._codecs[model] = _codec(model)
        return codec

    def offloaded(self, body: bytes | bytearray, header_length: int | None) -> bool:
        """Whether a REST body is decoded in the helper process rather than inline."""
        limit = self.offload_bytes
        return limit is not None and (len(body) if header_length is None
                                      else header_length) > limit

    # REST: a V2 body, bytes in and bytes out ------------------------------------------------

    def submit(self, model: ModelVersion, body: bytes | bytearray, header_length: int | None
               ) -> tuple[InferRequest, Answer, int]:
        """A REST request decoded on the calling thread and queued, without a coroutine
        (the HTTP edge's fast path): the request, the ``Answer`` its outputs will settle
        and its start time, for ``encode``. Bad input and refusals raise here."""
        codec = self.codec(model)
        start = time.perf_counter_ns()
        request = decode_inline(codec, model.stats, body, header_length, start)
        answer = model.submit(request.inputs, request.batch_size, request.timeout_us,
                              context_of(request) if model.wants_context else None)
        return request, answer, start

    async def infer(self, model: ModelVersion, body: bytes | bytearray,
                    header_length: int | None) -> tuple[bytes, dict[str, str]]:
        """A REST request, whatever its size: the answer's body and headers."""
        codec = self.codec(model)
        start = time.perf_counter_ns()
        request = await decode_counted(codec, model.stats, body, header_length,
                                       self.offload_bytes, start)
        outputs = await model.infer(request.inputs, request.batch_size, request.timeout_us,
                                    context_of(request) if model.wants_context else None)
        return self.encode(model, request, outputs, start)

    def encode(self, model: ModelVersion, request: InferRequest, outputs: Outputs, start: int
               ) -> tuple[bytes, dict[str, str]]:
        """The answer's body and headers for ``request``'s outputs."""
        try:
            return self._codecs[model].encode(request, outputs, model.version_str)
        except ModelfnError as exc:
            count_encoding_failure(model.stats, exc, start)
            raise

    # any other wire (gRPC) --------------------------------------------------------------------

    async def infer_with(
        self,
        model: ModelVersion,
        decode: Callable[[ModelTensors], InferRequest],
        encode: Callable[[ModelTensors, InferRequest, Outputs], R],
    ) -> R:
        """One request in another wire format: ``decode`` builds it against the model's
        tensors, the model version runs it with every other request, ``encode`` answers it.
        Failures are counted as a REST request's are."""
        tensors = self.codec(model).tensors
        start = time.perf_counter_ns()
        try:
            request = decode(tensors)
        except InvalidInput:
            model.stats.record_failure("OTHER", time.perf_counter_ns() - start)
            raise
        outputs = await model.infer(request.inputs, request.batch_size, request.timeout_us,
                                    context_of(request) if model.wants_context else None)
        try:
            return encode(tensors, request, outputs)
        except ModelfnError as exc:
            count_encoding_failure(model.stats, exc, start)
            raise


def context_of(request: InferRequest) -> RequestContext:
    """What a per-request backend sees of ``request`` besides its tensors."""
    outputs = () if request.outputs is None else tuple(o.name for o in request.outputs)
    return RequestContext(request.id or "", request.parameters, outputs)


def _codec(model: ModelVersion) -> ModelCodec:
    return ModelCodec(model.config, model.labels, text_strings=model.text_strings)


async def decode_counted(codec: ModelCodec, stats: ModelStats, body: bytes | bytearray,
                         header_length: int | None, offload_bytes: int | None,
                         start: int) -> InferRequest:
    """A request decoded, a JSON part larger than ``offload_bytes`` in the helper process
    (None: never), since parsing holds the GIL; a refusal counts as the model's failure.
    Every V2 REST request is decoded here or in ``decode_inline``: a function's and the
    gateway's batching for Lambda."""
    json_size = len(body) if header_length is None else header_length
    if offload_bytes is None or json_size <= offload_bytes:
        return decode_inline(codec, stats, body, header_length, start)
    try:
        codec.check_structure(memoryview(body)[:json_size])
        return await offload.decode(codec, body, header_length)
    except InvalidInput:
        stats.record_failure("OTHER", time.perf_counter_ns() - start)
        raise


def decode_inline(codec: ModelCodec, stats: ModelStats, body: bytes | bytearray,
                  header_length: int | None, start: int) -> InferRequest:
    """``decode_counted`` on the calling thread (the HTTP edge's fast path, a small body)."""
    try:
        return codec.decode(body, header_length)
    except InvalidInput:
        stats.record_failure("OTHER", time.perf_counter_ns() - start)
        raise


def count_encoding_failure(stats: ModelStats, exc: ModelfnError, start: int) -> None:
    """An answer that could not be encoded, counted. The batcher counted the request a
    success when the model answered. Outputs that do not fit the config (``BackendError``)
    make it the model's failure; an answer the client asked for in a form it cannot take
    (BYTES that are not UTF-8 as JSON, an answer over the size limit) stays the model's
    success, as Triton counts it."""
    if isinstance(exc, BackendError):
        stats.fail_a_success("BACKEND", time.perf_counter_ns() - start)
