"""The routing table: which versions of a model are deployed where, and how traffic is split.

``deploy`` writes it and the gateway reads it; it is the one place the control plane
and the data plane meet. One JSON document per model, next to the models in the store
(``<prefix>/_routes/<model>.json``, replaced whole, so a reader sees the old table or the
new one, never half of each) or in a local file for a gateway without a store.

Per model it holds the platform it is deployed on, the URL that applies the deployed
split (``url``; ``None`` when the gateway applies ``split`` itself), and per version its
pinned URL, the auth the URL needs (``none`` or ``iam`` for SigV4-signed Lambda URLs) and
the batching facts the gateway needs: ``max_batch_size`` and how many requests one
function instance takes at once (``concurrency``; 1 on Lambda, where the gateway batches),
the version's config in Triton's JSON form (``config``: the tensors' names, datatypes and
shapes and the dynamic-batching policy the gateway batches by, written at deploy from the
config the version was pushed with, completed from its model file where it leaves the
tensors to auto-complete; absent in tables written before it was recorded), and the
protocol the function speaks (``http``: V2 REST; ``grpc``: V2 gRPC over h2c).
``history`` keeps the previous splits, newest last, for ``modelfn rollback``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

import orjson

from modelfn.model_store import names
from modelfn.runtime.errors import InvalidInput, ModelfnError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from modelfn.model_store.base import ModelStore

ROUTES_DIR = names.ROUTES_DIR
HISTORY_LIMIT = 20
FORMAT = 1
Auth = Literal["none", "iam"]
AUTHS = ("none", "iam")
Protocol = Literal["http", "grpc"]
PROTOCOLS = ("http", "grpc")


@dataclass(frozen=True)
class VersionRoute:
    url: str  # the pinned URL: this version only
    auth: Auth = "none"
    max_batch_size: int = 0
    concurrency: int = 1  # requests one function instance serves at once
    protocol: Protocol = "http"
    #: the version's config as ``GET .../config`` answers it; None: not recorded
    config: Mapping[str, Any] | None = None


#: what a table records as its target for the local platform's two halves (the others are
#: the --target names: knative, cloudrun, lambda)
LOCAL_KNATIVE = "local"
LOCAL_LAMBDA = "local-lambda"
#: targets whose functions are Lambda functions (on AWS, or the local one)
LAMBDA_TARGETS = frozenset({"lambda", LOCAL_LAMBDA})


@dataclass(frozen=True)
class ModelRoutes:
    model: str
    target: str  # knative, cloudrun, lambda, local, local-lambda
    versions: Mapping[int, VersionRoute]
    split: Mapping[int, int]  # version -> percent of unpinned requests
    url: str | None = None  # applies the split itself; None: the gateway applies it
    auth: Auth = "none"
    region: str | None = None  # for SigV4
    history: tuple[Mapping[int, int], ...] = ()
    updated: str = ""

    def __post_init__(self) -> None:
        names.model_name(self.model)
        if self.split and sum(self.split.values()) != 100:
            raise InvalidInput(f"the split of '{self.model}' must add up to 100, not "
                               f"{dict(self.split)}")
        missing = set(self.split) - set(self.versions)
        if missing:
            raise InvalidInput(f"the split of '{self.model}' names versions with no route: "
                               f"{sorted(missing)}")
        for auth in (self.auth, *(v.auth for v in self.versions.values())):
            if auth not in AUTHS:
                raise InvalidInput(f"unknown auth '{auth}'; expected one of {', '.join(AUTHS)}")
        for route in self.versions.values():
            if route.protocol not in PROTOCOLS:
                raise InvalidInput(f"unknown protocol '{route.protocol}'; expected one of "
                                   f"{', '.join(PROTOCOLS)}")
        for url in (self.url, *(v.url for v in self.versions.values())):
            if url is not None:
                _check_url(url, self.model)

    def with_split(self, split: Mapping[int, int]) -> ModelRoutes:
        """This table with a new split, the current one pushed onto the history. A split
        that serves the same versions at the same percents (adding or dropping a version
        at 0%) is no change to roll back: it is taken without a history entry."""
        if dict(split) == dict(self.split):
            return self
        if _serving(split) == _serving(self.split):
            return replace(self, split=dict(split))
        history = (*self.history, self.split)[-HISTORY_LIMIT:] if self.split else self.history
        return replace(self, split=dict(split), history=history)

    def rolled_back(self) -> ModelRoutes:
        """The previous split restored (and taken off the history)."""
        history = list(self.history)
        # entries that serve what is served now (tables written before with_split told a
        # 0% version apart from a change) would make a rollback that changes nothing
        while history and _serving(history[-1]) == _serving(self.split):
            history.pop()
        if not history:
            raise InvalidInput(f"'{self.model}' has no earlier traffic split to roll back to")
        previous = history.pop()
        # versions deployed since then are kept at 0%: they keep their pinned URLs
        split = {v: previous.get(v, 0) for v in sorted({*self.versions, *previous})}
        return replace(self, split=split, history=tuple(history))

    def to_json(self) -> bytes:
        doc: dict[str, Any] = {
            "format": FORMAT,
            "model": self.model,
            "target": self.target,
            "url": self.url,
            "auth": self.auth,
            "region": self.region,
            "split": {str(v): p for v, p in sorted(self.split.items())},
            "versions": {
                str(v): _route_json(r) for v, r in sorted(self.versions.items())
            },
            "history": [{str(v): p for v, p in sorted(s.items())} for s in self.history],
            "updated": self.updated or datetime.now(UTC).isoformat(timespec="seconds"),
        }
        return orjson.dumps(doc, option=orjson.OPT_INDENT_2)

    @classmethod
    def from_json(cls, data: bytes, where: str = "routing table") -> ModelRoutes:
        try:
            doc = orjson.loads(data)
            return cls(
                model=doc["model"],
                target=doc["target"],
                url=doc.get("url"),
                auth=doc.get("auth", "none"),
                region=doc.get("region"),
                split=_versions(doc["split"]),
                versions={
                    int(v): VersionRoute(url=r["url"], auth=r.get("auth", "none"),
                                         max_batch_size=int(r.get("max_batch_size", 0)),
                                         concurrency=int(r.get("concurrency", 1)),
                                         protocol=r.get("protocol", "http"),
                                         config=_config(r.get("config")))
                    for v, r in doc["versions"].items()
                },
                history=tuple(_versions(s) for s in doc.get("history", [])),
                updated=doc.get("updated", ""),
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
            raise InvalidInput(f"{where} is not a modelfn routing table: {exc}") from exc


def _route_json(route: VersionRoute) -> dict[str, Any]:
    doc: dict[str, Any] = {"url": route.url, "auth": route.auth,
                           "max_batch_size": route.max_batch_size,
                           "concurrency": route.concurrency, "protocol": route.protocol}
    if route.config is not None:
        doc["config"] = route.config
    return doc


def _config(doc: Any) -> Mapping[str, Any] | None:
    if doc is not None and not isinstance(doc, dict):
        raise TypeError(f"a version's config is a JSON object, not {type(doc).__name__}")
    return doc


def _check_url(url: str, model: str) -> None:
    """A function's URL: absolute http(s), with a host."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (a port that is no number raises here)
    except ValueError as exc:
        raise InvalidInput(f"'{model}' has a URL that cannot be read, {url!r}: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInput(f"'{model}' has a URL that is not http(s)://host..., {url!r}")


def _serving(split: Mapping[int, int]) -> dict[int, int]:
    """The versions of ``split`` that take traffic."""
    return {v: p for v, p in split.items() if p > 0}


def _versions(split: Mapping[str, Any]) -> dict[int, int]:
    return {int(v): int(p) for v, p in split.items()}


def _key(model: str) -> str:
    return f"{ROUTES_DIR}/{names.model_name(model)}.json"


class RouteSource:
    """Where routing tables live: a model store, or a directory of ``<model>.json`` files."""

    def __init__(self, store: ModelStore | None = None, directory: Path | None = None) -> None:
        if (store is None) == (directory is None):
            raise ValueError("a route source is a store or a directory")
        self.store = store
        self.directory = directory

    @property
    def uri(self) -> str:
        return self.store.uri if self.store is not None else str(self.directory)

    def read(self, model: str) -> ModelRoutes | None:
        if self.store is not None:
            data = self.store._get_bytes(_key(model))
        else:
            assert self.directory is not None
            try:
                data = (self.directory / f"{names.model_name(model)}.json").read_bytes()
            except FileNotFoundError:
                data = None
        return None if data is None else ModelRoutes.from_json(data, f"routes of '{model}'")

    def write(self, routes: ModelRoutes) -> None:
        data = replace(routes, updated=datetime.now(UTC).isoformat(timespec="seconds")).to_json()
        if self.store is not None:
            self.store._put_bytes(_key(routes.model), data)
            return
        assert self.directory is not None
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"{routes.model}.json"
        temp = path.with_name(f".{path.name}.tmp")
        temp.write_bytes(data)
        temp.replace(path)  # atomic: readers see the old table or the new one

    def delete(self, model: str) -> None:
        if self.store is not None:
            self.store._delete(_key(model))
            return
        assert self.directory is not None
        (self.directory / f"{names.model_name(model)}.json").unlink(missing_ok=True)

    def models(self) -> list[str]:
        if self.store is not None:
            keys = self.store._list_files(f"{ROUTES_DIR}/")
            found = [Path(k).name for k in keys]
        else:
            assert self.directory is not None
            found = [p.name for p in self.directory.glob("*.json")] if self.directory.is_dir() \
                else []
        return sorted(name.removesuffix(".json") for name in found if name.endswith(".json")
                      and not name.startswith("."))

    def read_all(self) -> dict[str, ModelRoutes]:
        tables, broken = self.read_each()
        if broken:
            raise next(iter(broken.values()))
        return tables

    def read_each(self) -> tuple[dict[str, ModelRoutes], dict[str, ModelfnError]]:
        """Every table that reads, and why each other one does not (a damaged file, a
        file name that is no model name): one bad table leaves the others readable. A
        listing that fails raises."""
        tables: dict[str, ModelRoutes] = {}
        broken: dict[str, ModelfnError] = {}
        for model in self.models():
            try:
                routes = self.read(model)
            except ModelfnError as exc:
                broken[model] = exc
                continue
            if routes is not None:
                tables[model] = routes
        return tables, broken
