"""A loaded model version: config, backend, batcher and statistics together.

This is the engine's unit: arrays in, arrays out. Everything a request needs is resolved
here once at load, so serving one is ``submit`` (answered by callback) or ``infer``
(awaited) into the batcher; the wire formats (``modelfn.protocol``) decode requests into
arrays before and encode outputs after.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from modelfn.runtime.batching import Batcher
from modelfn.runtime.errors import ModelNotReady
from modelfn.runtime.stats import ModelStats

if TYPE_CHECKING:
    import numpy as np

    from modelfn.runtime.backends.base import Backend
    from modelfn.runtime.batch_request import Answer, RequestContext
    from modelfn.runtime.config import ModelConfig

State = Literal["LOADING", "READY", "UNAVAILABLE", "UNLOADING"]


@dataclass(eq=False)  # one object per loaded version: compared and hashed by identity
class ModelVersion:
    name: str
    version: int
    config: ModelConfig
    state: State = "LOADING"
    reason: str = ""
    backend: Backend | None = None
    batcher: Batcher | None = None
    #: the outputs' class labels, for the classification extension
    labels: dict[str, list[str]] = field(default_factory=dict)
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

    @property
    def wants_context(self) -> bool:
        """Requests should carry their ``RequestContext`` (id, parameters, requested
        outputs): the backend sees each request (Triton's Python backend)."""
        return self.backend is not None and self.backend.per_request

    @property
    def text_strings(self) -> bool:
        """BYTES tensors reach the backend as ``str``, not ``bytes``."""
        return self.backend is not None and self.backend.text_strings

    def start(self, backend: Backend, *, inline_rows: int = 0,
              labels: dict[str, list[str]] | None = None, queue_delay: bool = True) -> None:
        """Serve through ``backend``: build the batcher, mark ready.

        Batches of at most ``inline_rows`` rows run on the event loop instead of a worker
        thread; ``labels`` are the outputs' class labels for the classification extension.
        """
        self.backend = backend
        self.labels = labels or {}
        if backend.per_request:  # its batches go to the worker threads (its workers)
            inline_rows = 0
        batching = self.config.dynamic_batching
        if batching is not None and not queue_delay:  # nothing more can come: never wait
            batching = replace(batching, max_queue_delay_microseconds=0)
        self.batcher = Batcher(
            backend.run_requests if backend.per_request else backend.run,
            instances=backend.instance_count,
            max_batch_size=self.config.max_batch_size,
            policy=batching,
            stats=self.stats,
            name=f"{self.name}:{self.version}",
            inline_rows=inline_rows,
            padded_sizes=backend.padded_batch_sizes,
            per_request=backend.per_request,
        )
        self.inline_rows = inline_rows
        self.batcher.start()
        self.state = "READY"

    def submit(self, inputs: dict[str, np.ndarray], rows: int, timeout_us: int | None = None,
               context: RequestContext | None = None) -> Answer:
        """Queue one request of ``rows`` rows (1 when the model does not batch): the
        ``Answer`` its own outputs, or its failure, will settle on the event loop. Its
        caller gives the callback (``Answer.then``) and cancels it if it goes away.
        Refusals (not ready, too many rows, a full queue) raise here; failures in the
        batcher are counted by the batcher itself."""
        return self._batcher().submit(inputs, rows, timeout_us, context)

    async def infer(self, inputs: dict[str, np.ndarray], rows: int,
                    timeout_us: int | None = None, context: RequestContext | None = None
                    ) -> dict[str, np.ndarray]:
        """``submit`` for a caller that awaits the outputs (a task of its own: the ASGI
        app, gRPC): cancelled, the request leaves the queue or its batch counts it
        CANCELED. No callback and no second future: the batcher settles the request's."""
        return await self._batcher().infer(inputs, rows, timeout_us, context)

    def _batcher(self) -> Batcher:
        batcher = self.batcher
        if self.state != "READY" or batcher is None:
            raise ModelNotReady(self.name, self.version, self.reason)
        return batcher

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
            if self.backend.per_request:  # its workers finalize: the loop serves on meanwhile
                await asyncio.to_thread(self.backend.close)
            else:
                self.backend.close()
        self.state = "UNAVAILABLE"
        self.reason = "unloaded"

