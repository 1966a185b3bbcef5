"""A function's repository from a model store: each model loads while the next one is
fetched, a model that fails stops the fetches behind it, and a temporary checkout goes
when the repository stops or fails to load. Real stores (a filesystem, the S3 emulator)
and real ONNX Runtime sessions."""

from __future__ import annotations

import asyncio
import logging
import tempfile
import uuid
from typing import TYPE_CHECKING

import pytest
from onnx_models import save, simple_graph

from modelfn.localstack.s3 import S3Emulator
from modelfn.runtime.errors import ModelfnError

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from modelfn.model_store import ModelStore
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


@pytest.fixture(scope="module")
def emulator() -> Iterator[S3Emulator]:
    with S3Emulator() as s3:
        yield s3


@pytest.fixture
def s3_store(emulator: S3Emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
             ) -> ModelStore:
    """A fresh bucket on the S3 emulator that ``open_store`` reaches from the environment,
    and a temporary directory of the test's own, where checkouts go."""
    from modelfn.model_store import S3Store

    bucket = f"boot-{uuid.uuid4().hex[:10]}"
    emulator.create_bucket(bucket)
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                        ("AWS_DEFAULT_REGION", "us-east-1"),
                        ("MODELFN_S3_ENDPOINT", emulator.endpoint_url),
                        ("MODELFN_CACHE", str(tmp_path / "cache"))):
        monkeypatch.setenv(name, value)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    return S3Store(bucket, "models", client=emulator.client(), cache_dir=tmp_path / "cache")


def test_a_checkout_is_removed_when_the_repository_stops(
        s3_store: ModelStore, tmp_path: Path) -> None:
    from modelfn.handlers.boot import open_function_repository

    save(tmp_path / "repo" / "simple", simple_graph(), config='name: "simple"\n')
    s3_store.push(tmp_path / "repo" / "simple")
    repository = open_function_repository(None, ["simple"], store=s3_store.uri)
    assert repository.get("simple").ready
    assert repository.path.parent == tmp_path / "tmp"
    assert repository.path.name.startswith("modelfn-repo-") and repository.path.is_dir()
    asyncio.run(repository.stop())
    assert not list((tmp_path / "tmp").iterdir())
    # what the checkout linked to stays in the cache
    assert list((tmp_path / "cache" / "simple").glob("*/1/simple/1/model.onnx"))


def test_a_checkout_is_removed_when_the_load_fails(
        s3_store: ModelStore, tmp_path: Path) -> None:
    from modelfn.handlers.boot import open_function_repository

    model = tmp_path / "repo" / "broken"
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.onnx").write_bytes(b"not onnx")
    (model / "config.pbtxt").write_text('name: "broken"\nplatform: "onnxruntime_onnx"\n')
    s3_store.push(model)  # the library does not check what it stores; the CLI does
    with pytest.raises(ModelfnError):
        open_function_repository(None, ["broken"], store=s3_store.uri)
    assert not list((tmp_path / "tmp").iterdir())


def test_an_ensemble_function_loads_each_of_its_models_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The models of an ensemble's function come one by one (its composing models first,
    as deploy lists them): the ensemble's own load runs the versions loaded before it, and
    loads none of them again."""
    import numpy as np
    from ensemble_repos import ensemble_repository

    from modelfn.handlers.boot import open_function_repository
    from modelfn.model_store import open_store

    repo = ensemble_repository(tmp_path / "repo")
    store = open_store(str(tmp_path / "store"), cache_dir=tmp_path / "cache")
    for name in ("add", "twice", "chain"):
        store.push(repo / name)
    monkeypatch.setenv("MODELFN_CACHE", str(tmp_path / "cache"))
    with caplog.at_level(logging.INFO, logger="modelfn.onnxruntime"):
        repository = open_function_repository(None, ["add:1", "twice:1", "chain:1"],
                                              store=str(tmp_path / "store"))
    sessions = [r.getMessage().split(":")[0] for r in caplog.records
                if r.name == "modelfn.onnxruntime" and "runs it on" in r.getMessage()]
    assert sessions == ["model add", "model twice"]  # one session each, made once
    add, twice = repository.get("add"), repository.get("twice")

    async def run() -> None:
        try:
            chain = repository.get("chain")
            assert [s.model for s in chain.steps] == [add, twice]  # the ones serving
            a = np.arange(4, dtype=np.float32).reshape(1, 4)
            b = np.ones((1, 4), dtype=np.float32)
            answer = await chain.infer({"A": a, "B": b}, 1)
            np.testing.assert_allclose(answer["OUT"], (a + b + b) * 2)
        finally:
            await repository.stop()

    asyncio.run(run())
