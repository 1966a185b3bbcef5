"""A function's repository from a model store: each model loads while the next one is
fetched, and a model that fails stops the fetches behind it. A real filesystem store and
real ONNX Runtime sessions."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from onnx_models import save, simple_graph

from modelfn.runtime.errors import ModelfnError

if TYPE_CHECKING:
    from pathlib import Path

    from modelfn.model_store.checkout import Checkout


def test_a_model_loads_while_the_next_one_is_fetched(tmp_path: Path) -> None:
    """From a store, the first model's sessions are made while the second downloads: the
    second fetch here waits until the first model is ready, which it can only be if its
    load did not wait for every fetch (the wait's timeout only guards against a hang)."""
    import threading

    from modelfn.handlers.boot import fetch_while_loading
    from modelfn.model_store import open_store
    from modelfn.model_store.checkout import checkout
    from modelfn.model_store.engine_cache import EngineCache
    from modelfn.runtime.repository import Repository

    for name in ("first", "second"):
        save(tmp_path / "repo" / name, simple_graph(), config=f'name: "{name}"\n')
    store = open_store(str(tmp_path / "store"), cache_dir=tmp_path / "cache")
    for name in ("first", "second"):
        store.push(tmp_path / "repo" / name)
    root = tmp_path / "served"
    digests: dict[tuple[str, int], str] = {}
    repository = Repository(root, phases={}, engines=EngineCache(store, digests,
                                                                 tmp_path / "engines"))
    first_ready = threading.Event()
    order: list[str] = []

    def fetch(wanted: list[tuple[str, int | None]]) -> Checkout:
        if wanted[0][0] == "second":
            for _ in range(600):
                if any(v.ready for v in dict(repository.models.get("first", {})).values()):
                    first_ready.set()
                    break
                threading.Event().wait(0.05)
        order.append(wanted[0][0])
        return checkout(store, wanted, into=root)

    fetch_while_loading(repository, [("first", None), ("second", 1)], fetch, digests,
                         strict=True)
    assert first_ready.is_set() and order == ["first", "second"]
    assert repository.get("second").ready and set(digests) == {("first", 1), ("second", 1)}
    assert list(repository.phases)[0] == "fetch" and repository.phases["fetch"] > 0


def test_a_model_that_fails_to_load_stops_the_fetches_behind_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The broken model's load fails while the second model downloads (as behind a slow
    fetch): the third is then never fetched. The broken load waits for the second fetch to
    start, and that fetch returns only once the failed load's future is done, so the
    order is fixed, not left to the threads."""
    import concurrent.futures
    import threading

    from modelfn.handlers.boot import fetch_while_loading
    from modelfn.model_store import open_store
    from modelfn.model_store.checkout import checkout
    from modelfn.runtime.repository import Repository

    for name in ("broken", "second", "third"):
        save(tmp_path / "repo" / name, simple_graph(), config=f'name: "{name}"\n')
    store = open_store(str(tmp_path / "store"), cache_dir=tmp_path / "cache")
    for name in ("broken", "second", "third"):
        store.push(tmp_path / "repo" / name)
    root = tmp_path / "served"
    repository = Repository(root, phases={})
    second_fetching, failed = threading.Event(), threading.Event()
    load = repository.load

    def load_once_second_is_fetching(refs: list[str] | None = None, *,
                                     strict: bool = True) -> None:
        assert second_fetching.wait(60)
        load(refs, strict=strict)

    repository.load = load_once_second_is_fetching  # type: ignore[method-assign]

    class TellingPool(concurrent.futures.ThreadPoolExecutor):
        """Sets ``failed`` from a done callback: once the future reads done."""

        def submit(self, fn, /, *args, **kwargs):  # type: ignore[no-untyped-def]
            future = super().submit(fn, *args, **kwargs)
            future.add_done_callback(tell)
            return future

    def tell(future: concurrent.futures.Future[None]) -> None:
        if future.exception() is not None:
            failed.set()

    monkeypatch.setattr(concurrent.futures, "ThreadPoolExecutor", TellingPool)
    fetched: list[str] = []

    def fetch(wanted: list[tuple[str, int | None]]) -> Checkout:
        fetched.append(wanted[0][0])
        done = checkout(store, wanted, into=root)
        if wanted[0][0] == "broken":  # the checkout links into the cache: replace the link
            (root / "broken" / "1").unlink()
            (root / "broken" / "1").mkdir()
            (root / "broken" / "1" / "model.onnx").write_bytes(b"not onnx")
        else:
            second_fetching.set()
            assert failed.wait(60)  # the broken model's load is over before this returns
        return done

    with pytest.raises(ModelfnError):
        fetch_while_loading(repository, [("broken", None), ("second", None), ("third", None)],
                             fetch, {}, strict=True)
    assert fetched == ["broken", "second"]  # third was never fetched
