"""A loaded model version: config, backend, batcher, codec and statistics together.

This is what the app finds for ``/v2/models/{m}/versions/{v}``; everything a
request needs is resolved here once at load, so the hot path is
``codec.decode -> batcher.infer -> codec.encode``. REST requests come through
``infer``; any other wire format (gRPC) through ``infer_with``, into the same batcher.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from modelfn.runtime import offload
from modelfn.runtime.batching import Batcher
from modelfn.runtime.errors import BackendError, InvalidInput, ModelfnError, ModelNotReady
from modelfn.runtime.protocol import ModelCodec
from modelfn.runtime.stats import ModelStats

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy as np

    from modelfn.runtime.backends.base import Backend
    from modelfn.runtime.batch_request import Answer
    from modelfn.runtime.config import ModelConfig
    from modelfn.runtime.tensors import InferRequest, ModelTensors

State = Literal["LOADING", "READY", "UNAVAILABLE", "UNLOADING"]
R = TypeVar("R")


@dataclass
class ModelVersion:
    name: str
    version: int
    config: ModelConfig
    state: State = "LOADING"
    reason: str = ""
    backend: Backend | None = None
    batcher: Batcher | None = None
    codec: ModelCodec | None = None
    #: batches of at most this many rows run on the event loop thread (cheaper than a
    #: handoff to the worker thread); 0: none
    inline_rows: int = 0
    stats: ModelStats = field(init=False)
    #: seconds spent per load phase: session, warmup
    phases: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.stats = ModelStats(self.name, str(self.version))
        self.version_str = str(self.version)

    @property
    def ready(self) -> bool:
        return self.state == "READY"

    def start(self, backend: Backend, *, inline_rows: int = 0,
              labels: dict[str, list[str]] | None = None, queue_delay: bool = True) -> None:
        """Serve through ``backend``: build the codec and the batcher, mark ready.

        Batches of at most ``inline_rows`` rows run on the event loop instead of a worker
        thread; ``labels`` are the outputs' class labels for the classification extension.
        """
        self.backend = backend
        self.codec = ModelCodec(self.config, labels, text_strings=backend.text_strings)
        batching = self.config.dynamic_batching
        if batching is not None and not queue_delay:  # nothing more can come: never wait
            batching = replace(batching, max_queue_delay_microseconds=0)
        self.batcher = Batcher(
            backend.run,
            instances=backend.instance_count,
            max_batch_size=self.config.max_batch_size,
            policy=batching,
            stats=self.stats,
            name=f"{self.name}:{self.version}",
            inline_rows=inline_rows,
            padded_sizes=backend.padded_batch_sizes,
        )
        self.inline_rows = inline_rows
        self.batcher.start()
        self.state = "READY"

    async def infer(self, body: bytes | bytearray, header_length: int | None,
                    offload_bytes: int | None = None) -> tuple[bytes, dict[str, str]]:
        """One V2 infer request, bytes in and bytes out. A JSON part larger than
        ``offload_bytes`` is decoded in the helper process (None: never)."""
        codec, batcher = self._serving()
        start = time.perf_counter_ns()
        request = await decode_counted(codec, self.stats, body, header_length, offload_bytes,
                                       start)
        # failures inside the batcher are counted by the batcher itself
        outputs = await batcher.infer(request.inputs, request.batch_size, request.timeout_us)
        return self.encode(request, outputs, start)

    def submit(self, body: bytes | bytearray, header_length: int | None
               ) -> tuple[InferRequest, Answer, int]:
        """``infer`` without a coroutine, for the HTTP edge's shortcut (a body never sent to
        the helper process): the decoded request, the answer its outputs will settle and
        the start time that ``encode`` takes. Bad input and refusals raise here."""
        codec, batcher = self._serving()
        start = time.perf_counter_ns()
        request = decode_inline(codec, self.stats, body, header_length, start)
        answer = batcher.submit(request.inputs, request.batch_size, request.timeout_us)
        return request, answer, start

    def encode(self, request: InferRequest, outputs: dict[str, np.ndarray], start: int
               ) -> tuple[bytes, dict[str, str]]:
        """The answer's body and headers for ``request``'s outputs."""
        assert self.codec is not None
        try:
            return self.codec.encode(request, outputs, self.version_str)
        except ModelfnError as exc:
            count_encoding_failure(self.stats, exc, start)
            raise

    def _serving(self) -> tuple[ModelCodec, Batcher]:
        if self.state != "READY" or self.codec is None or self.batcher is None:
            raise ModelNotReady(self.name, self.version, self.reason)
        return self.codec, self.batcher

    async def infer_with(
        self,
        decode: Callable[[ModelTensors], InferRequest],
        encode: Callable[[ModelTensors, InferRequest, dict[str, np.ndarray]], R],
    ) -> R:
        """One request in another wire format: ``decode`` builds it against the model's
        tensors, the batcher runs it with every other request, ``encode`` answers it.
        Failures are counted as ``infer`` counts them."""
        codec, batcher = self._serving()
        start = time.perf_counter_ns()
        try:
            request = decode(codec.tensors)
        except InvalidInput:
            self.stats.record_failure("OTHER", time.perf_counter_ns() - start)
            raise
        # failures inside the batcher are counted by the batcher itself
        outputs = await batcher.infer(request.inputs, request.batch_size, request.timeout_us)
        try:
            return encode(codec.tensors, request, outputs)
        except ModelfnError as exc:
            count_encoding_failure(self.stats, exc, start)
            raise

    def metadata(self) -> dict[str, Any]:
        lead = [-1] if self.config.batching else []
        return {
            "name": self.name,
            "versions": [self.version_str],
            "platform": self.config.platform,
            "inputs": [
                {"name": t.name, "datatype": t.datatype.v2, "shape": lead + list(t.dims)}
                for t in self.config.inputs
            ],
            "outputs": [
                {"name": t.name, "datatype": t.datatype.v2, "shape": lead + list(t.dims)}
                for t in self.config.outputs
            ],
        }

    async def stop(self) -> None:
        self.state = "UNLOADING"
        if self.batcher is not None:
            await self.batcher.stop()
        if self.backend is not None:
            self.backend.close()
        self.state = "UNAVAILABLE"
        self.reason = "unloaded"


async def decode_counted(codec: ModelCodec, stats: ModelStats, body: bytes | bytearray,
                         header_length: int | None, offload_bytes: int | None,
                         start: int) -> InferRequest:
    """A request decoded, a JSON part larger than ``offload_bytes`` in the helper process
    (None: never), since parsing holds the GIL; a refusal counts as the model's failure.
    Every V2 REST request is decoded here or in ``ModelVersion.submit``: a function's and
    the gateway's batching for Lambda."""
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
    """``decode_counted`` on the calling thread (the HTTP edge's shortcut, a small body)."""
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
