"""A function's repository, where the function's environment says it is: the composition
root of every entrypoint (``handlers.http``, ``handlers.aws_lambda``, ``modelfn serve``).

``runtime`` loads a local repository and knows nothing of stores. Here a function that
serves from a model store checks its versions out into a local repository and hands
``runtime`` that, with the store's TensorRT engine cache. Models are checked out one at
a time and each loads as soon as its files are in, while the next one downloads. A
checkout this module makes in a temporary directory is removed when the repository stops
(or fails to load); it holds only links into the cache, which stays.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from modelfn.runtime.errors import ConfigError
from modelfn.runtime.names import parse_model_ref
from modelfn.runtime.repository import Repository, log_ready, open_repository, start_phases

if TYPE_CHECKING:
    from collections.abc import Callable

    from modelfn.model_store.checkout import Checkout

Ref = tuple[str, int | None]


@dataclass
class CheckedOutRepository(Repository):
    """A repository checked out into a temporary directory of its own, removed at stop."""

    async def stop(self) -> None:
        try:
            await super().stop()
        finally:
            remove_checkout(self.path)


def remove_checkout(path: Path) -> None:
    """Remove a checkout: its links go, what they point to in the cache stays."""
    shutil.rmtree(path, ignore_errors=True)


def open_function_repository(path: Path | None, refs: list[str] | None = None, *,
                             store: str | None = None, strict: bool = False,
                             one_request_at_a_time: bool = False) -> Repository:
    """The loaded repository at ``path``, or, with ``store``, the versions ``refs`` name
    (``name`` is the latest) checked out of that store into ``path`` (a new temporary
    directory when None). Logs the cold-start phases (import, fetch, session, warmup)
    as one line when it is ready. A model that fails to load is UNAVAILABLE while the
    others serve; with ``strict`` (``MODELFN_EXIT_ON_ERROR``, ``serve --exit-on-error``)
    it fails the start. A start where no model serves fails either way."""
    if store is None:
        if path is None:
            raise ConfigError("no model repository: give a repository path or a model store")
        return open_repository(path, refs, strict=strict,
                               one_request_at_a_time=one_request_at_a_time)
    from modelfn.model_store import open_store
    from modelfn.model_store.checkout import checkout
    from modelfn.model_store.engine_cache import EngineCache
    from modelfn.model_store.names import ENGINES_DIR

    if not refs:
        raise ConfigError("serving from a model store needs the models to serve: "
                          "--model NAME[:VERSION] (or MODELFN_MODELS)")
    phases = start_phases()
    opened = open_store(store)
    digests: dict[tuple[str, int], str] = {}  # filled as versions arrive
    engines = EngineCache(opened, digests, opened.cache.root / ENGINES_DIR)
    if path is not None:
        repository = Repository(path, phases=phases, engines=engines,
                                one_request_at_a_time=one_request_at_a_time)
    else:
        root = Path(tempfile.mkdtemp(prefix="modelfn-repo-"))
        # stop() removes it; this covers an exit that never stops the repository
        atexit.register(remove_checkout, root)
        repository = CheckedOutRepository(root, phases=phases, engines=engines,
                                          one_request_at_a_time=one_request_at_a_time)
    try:
        fetch_while_loading(repository, [parse_model_ref(r) for r in refs],
                            lambda wanted: checkout(opened, wanted, into=repository.path),
                            digests, strict=strict)
        repository.require_serving()
    except BaseException:
        if path is None:
            remove_checkout(repository.path)
        raise
    log_ready(repository)
    return repository


def fetch_while_loading(repository: Repository, refs: list[Ref],
                        fetch: Callable[[list[Ref]], Checkout],
                        digests: dict[tuple[str, int], str], *, strict: bool) -> None:
    """Check models out one at a time and load each as soon as its files are in, while
    the next one downloads: a function serving several models pays for the slower of
    fetch and load on each, not for both. A model's versions arrive together (the newest
    version's config is its config), so loading starts only once they all have. Under
    ``strict``, a model that fails to load stops the fetches behind it."""
    by_model: dict[str, list[Ref]] = {}
    for ref in refs:
        by_model.setdefault(ref[0], []).append(ref)
    fetched = repository.phases["fetch"] = 0.0  # the ready line's order: import, fetch, ...
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="modelfn-load") as loader:
        loading: list[concurrent.futures.Future[None]] = []
        for wanted in by_model.values():
            if any(f.done() and f.exception() for f in loading):
                break
            done = fetch(wanted)
            fetched += done.seconds
            digests.update(done.digests)
            loading.append(loader.submit(repository.load, done.refs, strict=strict))
        repository.phases["fetch"] = fetched
        for future in loading:
            future.result()  # the first failure, raised here
