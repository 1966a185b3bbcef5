"""Which function answers a request: the routing table, reloaded when ``deploy`` changes it.

A pinned request (``/v2/models/{m}/versions/{v}/...``) goes to that version's URL. An
unpinned one goes to the URL that applies the deployed split when the platform has one
(a Knative Service URL), or to a version drawn by the split's weights when the gateway
applies it itself: when the table has no such URL, and when the gateway batches for the
model's versions (instances that take one request at a time, as on Lambda), since a batch
is for one version and the version must be chosen before the request joins one; the
Lambda ``live`` alias URL is then not used. Tables are re-read every
``reload_s`` seconds in a worker thread and swapped in whole, so a request sees the old
table or the new one and a reload never holds a request up. A request for a model or
version the tables lack reads them again first, so one deployed a moment ago is served.

A table that cannot be read (a damaged file, a file name that is no model name) affects
its own model only: the model keeps the last table read for it, or, with none, its
requests get a 503 saying why; every other model is routed as usual.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from modelfn.model_store.routes import LAMBDA_TARGETS
from modelfn.platforms.traffic import WeightedPicker
from modelfn.runtime.errors import ModelfnError, ModelNotFound
from modelfn.runtime.names import version_of

#: a request for a model the tables lack reads them again, at most this often
MISS_RELOAD_S = 0.25

if TYPE_CHECKING:
    from collections.abc import Mapping

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
    on_lambda: bool = False  # a Lambda function: its invocation payload limit applies
    #: the version's config, which the gateway batches by (a version's is fixed: not compared)
    config: Mapping[str, Any] | None = field(default=None, compare=False)

    @property
    def label(self) -> str:
        return str(self.version) if self.version is not None else "split"

    @property
    def batched(self) -> bool:
        """Whether the gateway batches infer requests for this upstream: one version whose
        function instances take one request at a time, of a model that batches."""
        return (self.version is not None and self.concurrency == 1 and self.max_batch_size > 0
                and self.config is not None)

    @property
    def unbatched(self) -> bool:
        """A version the gateway would batch for, but whose routing table holds no config
        (written before tables recorded it): its requests go to the function one by one."""
        return (self.version is not None and self.concurrency == 1 and self.max_batch_size > 0
                and self.config is None)


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
        #: each model's split, drawn from when the gateway applies it
        self._picks: dict[str, WeightedPicker[int]] = {}
        #: models whose table cannot be read, and why
        self.broken: dict[str, ModelfnError] = {}
        self._loaded = False
        self._task: asyncio.Task[None] | None = None
        #: when the last read that succeeded began, and the last one a miss began
        self._read_from = float("-inf")
        self._miss_read_from = float("-inf")
        self._miss_lock = asyncio.Lock()

    @property
    def loaded(self) -> bool:
        return self._loaded

    def load(self) -> None:
        """Read every table now (blocking). A listing that fails keeps the tables it had
        (and raises); a model whose table fails keeps its last one."""
        began = time.monotonic()
        tables, broken = self.source.read_each()
        for model, exc in broken.items():
            if model in self.tables:
                tables[model] = self.tables[model]
            if str(exc) != str(self.broken.get(model, "")):
                logger.warning("routes of %r cannot be read (%s): %s", model,
                               "keeping the last ones" if model in tables else "not routed",
                               exc)
        pinned = {
            (model, version): Upstream(model, version, route.url, route.auth, routes.region,
                                       route.max_batch_size, route.concurrency, route.protocol,
                                       routes.target in LAMBDA_TARGETS, route.config)
            for model, routes in tables.items()
            for version, route in routes.versions.items()
        }
        splitting = {
            model: Upstream(model, None, routes.url, routes.auth, routes.region,
                            max((r.max_batch_size for r in routes.versions.values()), default=0),
                            0, _protocol_of(routes), routes.target in LAMBDA_TARGETS)
            for model, routes in tables.items()
            if routes.url is not None and not any(
                pinned[(model, v)].batched for v, p in routes.split.items() if p > 0)
        }
        changed = {m for m in tables.keys() | self.tables.keys()
                   if tables.get(m) != self.tables.get(m)}
        for key in sorted(k for k, u in pinned.items() if u.unbatched
                          and tables.get(k[0]) != self.tables.get(k[0])):
            logger.warning("version %d of %r is not batched by the gateway: its routing table "
                           "has no config (deployed by an earlier modelfn); its requests go to "
                           "the function one by one. Deploy it again to batch them", key[1],
                           key[0])
        self._picks = {model: WeightedPicker(routes.split.items(), rng=self._rng)
                       for model, routes in tables.items()}
        self.tables, self._pinned, self._splitting = tables, pinned, splitting
        self.broken = broken
        self._read_from = began
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
        """``resolve``; on a miss, first the tables as read after the miss: a model
        deployed a moment ago is served, not a 404 until the next periodic reload. Misses
        share reads (one that began after a miss answers it) and start one at most every
        ``MISS_RELOAD_S``, waiting for their turn, so unknown names cannot make the gateway
        read its tables back to back."""
        try:
            return self.resolve(model, version)
        except (ModelNotFound, RoutesUnreadable):
            missed = time.monotonic()
        async with self._miss_lock:
            if self._read_from < missed:  # no read has begun since the miss
                wait = self._miss_read_from + MISS_RELOAD_S - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                self._miss_read_from = time.monotonic()
                try:
                    await asyncio.to_thread(self.load)
                except (ModelfnError, OSError) as exc:  # the listing: keep the tables
                    logger.warning("routes at %s could not be read, keeping the last ones: "
                                   "%s", self.source.uri, exc)
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
            upstream = self._pinned.get((model, version_of(version) or -1))
            if upstream is None:
                raise (ModelNotFound(model, version) if model in self.tables
                       else self._missing(model))
            return upstream
        splitting = self._splitting.get(model)
        if splitting is not None:
            return splitting
        routes = self.tables.get(model)
        if routes is None:
            raise self._missing(model)
        picks = self._picks.get(model)
        chosen = picks.pick() if picks is not None else None
        if chosen is None:
            raise ModelNotFound(model)
        return self._pinned[(model, chosen)]

    def _missing(self, model: str) -> ModelfnError:
        """Why ``model`` has no table: none was deployed, or its table cannot be read."""
        broken = self.broken.get(model)
        return ModelNotFound(model) if broken is None else RoutesUnreadable(model, broken)


class RoutesUnreadable(ModelfnError):
    """The model's routing table is there but cannot be read, and none was read before."""

    status_code = 503

    def __init__(self, model: str, why: ModelfnError) -> None:
        super().__init__(f"model '{model}' cannot be routed: its routing table cannot be "
                         f"read: {why}")


def _protocol_of(routes: ModelRoutes) -> str:
    """What the URL that splits traffic speaks: its live versions' protocol."""
    spoken = {routes.versions[v].protocol for v, p in routes.split.items() if p > 0}
    return spoken.pop() if len(spoken) == 1 else "mixed" if spoken else "http"
