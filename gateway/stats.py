"""Triton's statistics extension where the gateway batches.

A function behind a version the gateway batches for (Lambda) sees one invocation per
batch, and a stats request reaches one of its execution environments, whichever: its
own numbers count batches, not callers, and only that environment's. The gateway counts
those versions as Triton does (``batching``), so it answers for them itself:

- ``GET /v2/models/{m}/versions/{v}/stats`` of a batched version: the gateway's record;
  any other version's goes to its function, as before;
- ``GET /v2/models/{m}/stats`` of a model with a batched version: every routed version of
  the model, batched ones from the gateway's record and the others from their functions
  (one call per version, at its pinned URL); a model with none goes to its function;
- ``GET /v2/models/stats``: every routed version of every model, the same way.

Versions whose function speaks V2 gRPC only (``--protocol grpc``) cannot be asked over
REST and are left out of the merged answers; ask the gateway's gRPC port for them, model
by model. A function that fails to answer fails the merged answer with its status.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from modelfn.gateway.batching import BadFunctionAnswer, function_json

if TYPE_CHECKING:
    from modelfn.gateway.metrics import GatewayMetrics
    from modelfn.gateway.router import Router, Upstream
    from modelfn.gateway.upstream import UpstreamClient

Stats = list[dict[str, Any]]


class GatewayStatistics:
    def __init__(self, router: Router, client: UpstreamClient, metrics: GatewayMetrics
                 ) -> None:
        self._router = router
        self._client = client
        self._metrics = metrics

    def version(self, upstream: Upstream) -> Stats | None:
        """One version's statistics, or None when its function answers for it."""
        if not upstream.batched:
            return None
        return [self._metrics.model(upstream.model, upstream.label).to_json()]

    async def model(self, model: str) -> Stats | None:
        """Every routed version of ``model``, or None when none is batched (its function
        answers for the model, as it always did)."""
        upstreams = self._router.pinned(model)
        if not any(u.batched for u in upstreams):
            return None
        return await self._merged(upstreams)

    async def all_models(self) -> Stats:
        return await self._merged(self._router.pinned())

    async def _merged(self, upstreams: list[Upstream]) -> Stats:
        parts = await asyncio.gather(*(self._of(u) for u in upstreams
                                       if u.batched or u.protocol == "http"))
        return [stats for part in parts for stats in part]

    async def _of(self, upstream: Upstream) -> Stats:
        local = self.version(upstream)
        if local is not None:
            return local
        target = f"/v2/models/{upstream.model}/versions/{upstream.version}/stats"
        doc, where = await function_json(self._client, upstream, target)
        stats = doc.get("model_stats") if isinstance(doc, dict) else None
        if not isinstance(stats, list):
            raise BadFunctionAnswer(f"{where} answered without Triton's 'model_stats' list")
        return stats
