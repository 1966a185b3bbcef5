"""The gateway batches for functions that run one request at a time (Lambda).

A Lambda execution environment runs one invocation at a time, so behind a function URL the
function's own batcher never sees two requests. For an upstream whose instances take one
request at a time (``concurrency`` 1 in the routing table) and whose model batches
(``max_batch_size`` > 0), the gateway batches instead, with the runtime's ``Batcher`` and
``ModelCodec``:

- the version's config (names, datatypes, non-batch shapes, ``max_batch_size`` and the
  dynamic-batching policy) comes with its route: ``deploy`` writes it into the routing
  table from the config the version was pushed with, so the function is never asked for
  it (a table without one is not batched: see ``Upstream.batched``);
- each infer request is decoded (JSON or binary) against it: a request that does not fit
  fails alone with 400, before it is queued;
- requests with equal non-batch shapes are coalesced up to ``max_batch_size`` under the
  model's own policy (work-conserving; Triton's delay, preferred sizes, queue limit and
  timeouts when the config sets them), at most ``instances`` batches in flight per version;
- a batch is one invocation: one binary-extension request asking for every output in
  binary. The answer is split by rows, and each caller gets its own rows encoded as it
  asked (JSON or binary, the outputs it named);
- a function's error answer fails its own batch only: each of its callers gets the
  function's status and message;
- Triton's statistics of the version (``ModelStats``, kept in ``GatewayMetrics.models``) are
  counted here, per caller as Triton counts them: the batcher counts each caller's success
  or failure (queue full and timeouts REJECTED, a caller gone CANCELED, a failed
  invocation BACKEND) and each invocation as one execution of its rows; a request that
  fails to decode counts as OTHER. A function behind the gateway sees only invocations, so
  its own statistics count batches, not callers.

Classification of an output with class labels needs the label file, which only the
function has: such a request is forwarded alone, as it came (``infer`` returns None), and
counted in the function's statistics, not the gateway's.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from modelfn.gateway.limits import DEFAULT_MAX_BODY_BYTES, FunctionLimits, InvocationTooLarge
from modelfn.protocol import offload
from modelfn.protocol.codec import HEADER_LENGTH, ModelCodec
from modelfn.protocol.dataplane import count_encoding_failure, decode_counted
from modelfn.runtime.batching import Batcher
from modelfn.runtime.config import ModelConfig, config_from_json
from modelfn.runtime.errors import ConfigError, InvalidInput, ModelfnError

if TYPE_CHECKING:
    import numpy.typing as npt

    from modelfn.gateway.metrics import GatewayMetrics, RouteStats
    from modelfn.gateway.router import Upstream
    from modelfn.gateway.upstream import UpstreamClient
    from modelfn.runtime.stats import ModelStats

    Arrays = dict[str, npt.NDArray[Any]]

#: batches in flight per batched version unless the gateway is told otherwise
DEFAULT_INSTANCES = 8
#: the limits of functions, and of Lambda functions, behind a gateway with its default limit
DEFAULT_LIMITS = (FunctionLimits.of_function(DEFAULT_MAX_BODY_BYTES),
                  FunctionLimits.of_function(DEFAULT_MAX_BODY_BYTES, on_lambda=True))


class FunctionFailed(ModelfnError):
    """A function's own error answer to a batch: its status and V2 message, for each caller."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status


class BadFunctionAnswer(ModelfnError):
    """The function answered with something that is not what its config promises."""

    status_code = 502


class BadRouteConfig(ModelfnError):
    """The config a routing table holds for a version is not a model configuration."""

    status_code = 502


def function_error(status: int, body: bytes) -> FunctionFailed:
    """A function's error answer (its status and V2 body) as the gateway's error."""
    try:
        message = orjson.loads(body)["error"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        message = None
    if not isinstance(message, str):
        message = body[:500].decode(errors="replace") or f"HTTP {status}"
    return FunctionFailed(status, message)


async def function_json(client: UpstreamClient, upstream: Upstream, target: str
                        ) -> tuple[Any, str]:
    """GET ``target`` from a version's function: its JSON answer and where it came from.
    An error answer is the function's error; a body that is not JSON is
    ``BadFunctionAnswer``."""
    response = await client.send(upstream, "GET", target, {}, b"")
    try:
        body = await response.aread()
    finally:
        await response.aclose()
    if response.status_code != 200:
        raise function_error(response.status_code, body)
    where = f"{upstream.url.rstrip('/')}{target}"
    try:
        return orjson.loads(body), where
    except orjson.JSONDecodeError as exc:
        raise BadFunctionAnswer(f"{where} did not answer JSON: {exc}") from None


def _rows(inputs: Arrays) -> int:
    first = next(iter(inputs.values()), None)
    return 0 if first is None or first.ndim == 0 else int(first.shape[0])


def _served(config: ModelConfig) -> ModelConfig:
    """The config as the gateway speaks it: the client's shapes both ways (the function
    applies any ``reshape`` for its backend)."""
    return replace(config, inputs=[replace(t, reshape=None) for t in config.inputs],
                   outputs=[replace(t, reshape=None) for t in config.outputs])


class BatchedVersion:
    """One version the gateway batches for: its codec, its batcher, its invocations."""

    def __init__(self, upstream: Upstream, client: UpstreamClient, stats: RouteStats,
                 model_stats: ModelStats, *, instances: int, limits: FunctionLimits) -> None:
        self.upstream = upstream
        self._limits = limits
        self._client = client
        self._stats = stats
        self.stats = model_stats
        self._instances = instances
        base = f"/v2/models/{upstream.model}/versions/{upstream.version}"
        self._infer_target = f"{base}/infer"
        self._version = str(upstream.version)
        self._ready: tuple[ModelCodec, Batcher] | None = None
        self._labelled: frozenset[str] = frozenset()

    async def infer(self, body: bytes, header_length: int | None
                    ) -> tuple[bytes, dict[str, str]] | None:
        """One caller's infer request through a batch: the response body and headers, or
        None when the request must go to the function as it is."""
        codec, batcher = self._ready or self._load()
        start = time.perf_counter_ns()
        request = await decode_counted(codec, self.stats, body, header_length,
                                       offload.OFFLOAD_BYTES, start)
        if self._labelled and request.outputs is not None and any(
                o.classification and o.name in self._labelled for o in request.outputs):
            return None
        # failures inside the batcher are counted by the batcher itself
        outputs = await batcher.infer(request.inputs, request.batch_size, request.timeout_us)
        try:
            return codec.encode(request, outputs, self._version)
        except ModelfnError as exc:
            count_encoding_failure(self.stats, exc, start)
            raise

    async def stop(self) -> None:
        """Run what is queued, then stop."""
        if self._ready is not None:
            await self._ready[1].stop()

    # ---- the version's config, from its route --------------------------------------------

    def _load(self) -> tuple[ModelCodec, Batcher]:
        """The codec and batcher of the route's config, made on first use (in the loop)."""
        model, version = self.upstream.model, self._version
        try:
            config = config_from_json(self.upstream.config,
                                      f"the routing table of '{model}' (version {version})")
        except ConfigError as exc:
            raise BadRouteConfig(exc.message) from None
        self._labelled = frozenset(t.name for t in config.outputs if t.label_filename)
        batcher = Batcher(self._invoke, instances=self._instances,
                          max_batch_size=config.max_batch_size, policy=config.dynamic_batching,
                          stats=self.stats, name=f"{model}:{version}")
        batcher.start()
        self._ready = (ModelCodec(_served(config)), batcher)
        return self._ready

    # ---- one batch, one invocation ---------------------------------------------------------

    async def _invoke(self, instance: int, inputs: Arrays) -> Arrays:
        """The batcher's ``run``: the batch as one request to the function, its answer as
        arrays (split back per caller by the batcher). A batch whose request the function
        could not take in one invocation (Lambda's payload limit) is split by rows into
        invocations that fit, one after the other, their answers joined."""
        assert self._ready is not None
        codec = self._ready[0]
        body, headers = codec.encode_request(inputs)
        if not self._limits.invocation_fits(len(body)):
            rows = _rows(inputs)
            if rows > 1 and codec.tensors.batching:
                half = rows // 2
                first = await self._invoke(instance, {k: a[:half] for k, a in inputs.items()})
                second = await self._invoke(instance, {k: a[half:] for k, a in inputs.items()})
                return {k: np.concatenate((first[k], second[k])) for k in first}
            raise InvocationTooLarge(len(body))
        return await self._send(codec, inputs, body, headers)

    async def _send(self, codec: ModelCodec, inputs: Arrays, body: bytes,
                    headers: dict[str, str]) -> Arrays:
        """One invocation with ``body``, ``inputs`` encoded."""
        stats = self._stats
        first: np.ndarray[Any, Any] | None = next(iter(inputs.values()), None)
        batched = codec.tensors.batching and first is not None
        stats.batch_size.observe(first.shape[0] if batched and first is not None else 1)
        response = await self._client.send(self.upstream, "POST", self._infer_target,
                                           headers, body, stats, stats.invocations)
        try:
            content = await response.aread()
        finally:
            await response.aclose()
        if response.status_code != 200:
            raise function_error(response.status_code, content)
        length = response.headers.get(HEADER_LENGTH)
        try:
            return codec.decode_response(content, int(length) if length is not None else None)
        except (InvalidInput, ValueError) as exc:
            message = exc.message if isinstance(exc, ModelfnError) else str(exc)
            raise BadFunctionAnswer(f"model '{self.upstream.model}' version {self._version} at "
                                    f"{self.upstream.url} answered a batch with a response "
                                    f"that does not fit its config: {message}") from None


class GatewayBatching:
    """The versions the gateway batches for, made on first use and replaced when the routing
    table points a version somewhere else."""

    def __init__(self, client: UpstreamClient, metrics: GatewayMetrics, *,
                 instances: int = DEFAULT_INSTANCES,
                 limits: tuple[FunctionLimits, FunctionLimits] = DEFAULT_LIMITS) -> None:
        """``limits``: of other functions and of Lambda functions."""
        if instances < 1:
            raise ValueError(f"at least one batch must be allowed in flight, not {instances}")
        self._client = client
        self._metrics = metrics
        self.instances = instances
        self._limits = limits
        self._versions: dict[tuple[str, int | None], BatchedVersion] = {}
        self._retiring: set[asyncio.Task[None]] = set()

    def version(self, upstream: Upstream) -> BatchedVersion:
        key = (upstream.model, upstream.version)
        found = self._versions.get(key)
        if found is None or found.upstream != upstream:
            if found is not None:  # its queue drains to where it was going
                task = asyncio.get_running_loop().create_task(found.stop())
                self._retiring.add(task)
                task.add_done_callback(self._retiring.discard)
            stats = self._metrics.route(upstream.model, upstream.label)
            model_stats = self._metrics.model(upstream.model, upstream.label)
            found = self._versions[key] = BatchedVersion(
                upstream, self._client, stats, model_stats, instances=self.instances,
                limits=self._limits[1] if upstream.on_lambda else self._limits[0])
        return found

    async def stop(self) -> None:
        versions, self._versions = list(self._versions.values()), {}
        await asyncio.gather(*(v.stop() for v in versions), *self._retiring,
                             return_exceptions=True)
