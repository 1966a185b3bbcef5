"""Which function answers a request: the routing table, reloaded when ``deploy`` changes it.

A pinned request (``/v2/models/{m}/versions/{v}/...``) goes to that version's URL. An
unpinned one goes to the URL that applies the deployed split when the platform has one
(a Knative Service URL), or to a version drawn by the split's weights when the gateway
applies it itself: when the table has no such URL, and when the gateway batches for the
model's versions (instances that take one request at a time, as on Lambda), since a batch
is for one version and the version must be chosen before the request joins one; the
Lambda ``live`` alias URL is then not used. Tables are re-read every
``reload_s`` seconds in a worker thread and swapped in whole, so a request sees the old
table or the new one and a reload never holds a request up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from modelfn.runtime.errors import ModelfnError, ModelNotFound
from modelfn.runtime.names import VERSION_DIR

#: a request for a model the tables lack reads them again, at most this often
MISS_RELOAD_S = 0.25

if TYPE_CHECKING:
    from modelfn.model_store.routes import Auth, ModelRoutes, RouteSource

logger = logging.getLogger("modelfn.gateway")


@dataclass(frozen=True, slots=True)
class Upstream:
    """Where one request goes."""

    model: str
    version: int | None  # None: the platform picks by its split
    url: str
    auth: Auth
    region: str | None
    max_batch_size: int = 0
    concurrency: int = 0  # per function instance; 1 means the gateway batches
    protocol: str = "http"  # what the URL speaks: http (REST), grpc, or mixed (a split of both)

    @property
    def label(self) -> str:
        return str(self.version) if self.version is not None else "split"

    @property
    def batched(self) -> bool:
        """Whether the gateway batches infer requests for this upstream: one version whose
        function instances take one request at a time, of a model that batches."""
        return self.version is not None and self.concurrency == 1 and self.max_batch_size > 0


class Router:
    def __init__(self, source: RouteSource, *, reload_s: float = 1.0,
                 rng: random.Random | None = None) -> None:
        self.source = source
        self.reload_s = reload_s
        self._rng = rng or random.Random()
        self.tables: dict[str, ModelRoutes] = {}
        self._pinned: dict[tuple[str, int], Upstream] = {}
        #: models whose platform applies the split, with the URL that does
        self._splitting: dict[str, Upstream] = {}
        self._loaded = False
        self._task: asyncio.Task[None] | None = None
        self._loaded_at = float("-inf")
        self._miss_lock = asyncio.Lock()

    @property
    def loaded(self) -> bool:
        return self._loaded

    def load(self) -> None:
        """Read every table now (blocking); a failed read keeps the tables it had."""
        tables = self.source.read_all()
        pinned = {
            (model, version): Upstream(model, version, route.url, route.auth, routes.region,
                                       route.max_batch_size, route.concurrency, route.protocol)
            for model, routes in tables.items()
            for version, route in routes.versions.items()
        }
        splitting = {
            model: Upstream(model, None, routes.url, routes.auth, routes.region,
                            max((r.max_batch_size for r in routes.versions.values()), default=0),
                            0, _protocol_of(routes))
            for model, routes in tables.items()
            if routes.url is not None and not any(
                pinned[(model, v)].batched for v, p in routes.split.items() if p > 0)
        }
        changed = {m for m in tables.keys() | self.tables.keys()
                   if tables.get(m) != self.tables.get(m)}
        self.tables, self._pinned, self._splitting = tables, pinned, splitting
        self._loaded_at = time.monotonic()
        if changed and self._loaded:
            logger.info("routes reloaded: %s", ", ".join(sorted(changed)))
        self._loaded = True

    async def start(self) -> None:
        await asyncio.to_thread(self.load)
        self._task = asyncio.create_task(self._watch())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.reload_s)
            try:
                await asyncio.to_thread(self.load)
            except (ModelfnError, OSError) as exc:
                logger.warning("routes at %s could not be read, keeping the last ones: %s",
                               self.source.uri, exc)

    async def resolve_fresh(self, model: str, version: str | None) -> Upstream:
        """``resolve``; on a miss, read the tables again first (at most every
        ``MISS_RELOAD_S``): a model deployed a moment ago is served, not a 404 until the
        next periodic reload."""
        try:
            return self.resolve(model, version)
        except ModelNotFound:
            if time.monotonic() - self._loaded_at < MISS_RELOAD_S:
                raise
        async with self._miss_lock:
            if time.monotonic() - self._loaded_at >= MISS_RELOAD_S:
                await asyncio.to_thread(self.load)
        return self.resolve(model, version)

    def pinned(self, model: str | None = None) -> list[Upstream]:
        """Every routed version of ``model`` (None: of every model), by model and version."""
        pinned = self._pinned  # one table, even while a reload swaps them
        return [u for (m, _), u in sorted(pinned.items()) if model is None or m == model]

    def resolve(self, model: str, version: str | None) -> Upstream:
        """The upstream for ``model`` (``version`` as the URL spells it, or None): a
        version is ``[1-9][0-9]*``, as a function reads it from a REST path; anything else
        names no version (``ModelNotFound``)."""
        if version is not None:
            # as the function reads a REST path: ASCII digits, no leading zero
            number = int(version) if VERSION_DIR.fullmatch(version) else -1
            upstream = self._pinned.get((model, number))
            if upstream is None:
                raise ModelNotFound(model, version)
            return upstream
        splitting = self._splitting.get(model)
        if splitting is not None:
            return splitting
        routes = self.tables.get(model)
        if routes is None:
            raise ModelNotFound(model)
        live = [(v, p) for v, p in routes.split.items() if p > 0]
        if not live:
            raise ModelNotFound(model)
        chosen = self._rng.choices([v for v, _ in live], weights=[p for _, p in live])[0]
        return self._pinned[(model, chosen)]


def _protocol_of(routes: ModelRoutes) -> str:
    """What the URL that splits traffic speaks: its live versions' protocol."""
    spoken = {routes.versions[v].protocol for v, p in routes.split.items() if p > 0}
    return spoken.pop() if len(spoken) == 1 else "mixed" if spoken else "http"
