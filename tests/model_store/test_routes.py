"""Routing tables in the store (S3 emulator and filesystem) and in a plain directory."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import pytest

from modelfn.model_store.routes import HISTORY_LIMIT, ModelRoutes, RouteSource, VersionRoute
from modelfn.runtime.errors import InvalidInput

if TYPE_CHECKING:
    from pathlib import Path

    from conftest import Harness

    from modelfn.model_store import ModelStore


def table(model: str = "digits", split: dict[int, int] | None = None) -> ModelRoutes:
    return ModelRoutes(
        model=model, target="knative", url="http://digits.default.127.0.0.1.sslip.io",
        versions={1: VersionRoute("http://v1-digits", max_batch_size=8, concurrency=16),
                  2: VersionRoute("http://v2-digits", auth="iam", max_batch_size=8)},
        split=split or {1: 90, 2: 10}, region="us-east-1",
    )


def test_round_trip_in_the_store_and_not_a_model(store: ModelStore, harness: Harness,
                                                 tmp_path: Path) -> None:
    source = RouteSource(store=store)
    assert source.read("digits") is None
    assert source.models() == []
    source.write(table())
    source.write(table("iris", {1: 100}))
    read = source.read("digits")
    assert read is not None
    assert read.split == {1: 90, 2: 10}
    assert read.versions[2] == VersionRoute("http://v2-digits", "iam", 8, 1)
    assert read.updated
    assert source.models() == ["digits", "iris"]
    assert set(source.read_all()) == {"digits", "iris"}
    assert "_routes" not in store.list_models()  # the tables sit beside the models
    source.delete("iris")
    assert source.models() == ["digits"]
    source.delete("iris")  # deleting what is gone is a no-op


def test_round_trip_in_a_directory(tmp_path: Path) -> None:
    source = RouteSource(directory=tmp_path / "routes")
    assert source.models() == []
    source.write(table())
    assert source.read("digits") == ModelRoutes.from_json(
        (tmp_path / "routes" / "digits.json").read_bytes())
    assert [p.name for p in (tmp_path / "routes").iterdir()] == ["digits.json"]


def test_a_version_carries_its_config_and_older_tables_read_without_one(tmp_path: Path
                                                                         ) -> None:
    """The config the gateway batches by travels with the version; a table written before
    it was recorded reads with none (the gateway then forwards one by one)."""
    import orjson

    config = {"name": "digits", "max_batch_size": 8,
              "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [64]}]}
    source = RouteSource(directory=tmp_path)
    source.write(replace(table(), versions={1: VersionRoute("http://v1", concurrency=1,
                                                            max_batch_size=8, config=config)},
                         split={1: 100}))
    read = source.read("digits")
    assert read is not None and read.versions[1].config == config
    old = orjson.loads((tmp_path / "digits.json").read_bytes())
    del old["versions"]["1"]["config"]
    assert ModelRoutes.from_json(orjson.dumps(old)).versions[1].config is None
    old["versions"]["1"]["config"] = [1]
    with pytest.raises(InvalidInput, match="config is a JSON object"):
        ModelRoutes.from_json(orjson.dumps(old))


def test_splits_keep_a_history_for_rollback() -> None:
    routes = table(split={1: 100})
    canary = routes.with_split({1: 90, 2: 10})
    promoted = canary.with_split({1: 0, 2: 100})
    assert promoted.history == ({1: 100}, {1: 90, 2: 10})
    assert promoted.with_split({1: 0, 2: 100}) is promoted  # no change, no history entry
    back = promoted.rolled_back()
    assert (back.split, back.history) == ({1: 90, 2: 10}, ({1: 100},))
    with pytest.raises(InvalidInput, match="no earlier traffic split"):
        back.rolled_back().rolled_back()


def test_a_version_added_at_0_percent_is_no_change_to_roll_back() -> None:
    """Deploying version 3 with --traffic 0 adds it to the split at 0%: what is served is
    the same, so rollback still restores the split before the canary."""
    routes = ModelRoutes(
        model="digits", target="knative", url="http://digits",
        versions={v: VersionRoute(f"http://v{v}-digits") for v in (1, 2, 3)},
        split={1: 100, 2: 0}, history=())
    canary = routes.with_split({1: 80, 2: 20})
    dark = canary.with_split({1: 80, 2: 20, 3: 0})
    assert dark.split == {1: 80, 2: 20, 3: 0}
    assert dark.history == canary.history == ({1: 100, 2: 0},)
    back = dark.rolled_back()
    assert back.split == {1: 100, 2: 0, 3: 0} and back.history == ()
    # dropping a 0% version is no change either
    assert dark.with_split({1: 80, 2: 20}).history == dark.history


def test_rollback_skips_history_entries_that_serve_what_is_served_now() -> None:
    """Tables written before 0% entries were told apart hold such an entry on top."""
    routes = ModelRoutes(
        model="digits", target="knative", url="http://digits",
        versions={v: VersionRoute(f"http://v{v}-digits") for v in (1, 2, 3)},
        split={1: 80, 2: 20, 3: 0}, history=({1: 100}, {1: 80, 2: 20}))
    back = routes.rolled_back()
    assert back.split == {1: 100, 2: 0, 3: 0} and back.history == ()
    with pytest.raises(InvalidInput, match="no earlier traffic split"):
        replace(routes, history=({1: 80, 2: 20},)).rolled_back()


def test_history_is_bounded() -> None:
    routes = table(split={1: 100})
    for i in range(HISTORY_LIMIT + 5):
        routes = routes.with_split({1: 100 - i % 2, 2: i % 2})
    assert len(routes.history) == HISTORY_LIMIT


@pytest.mark.parametrize(("make", "message"), [
    (lambda: table(split={1: 50, 2: 20}), "must add up to 100"),
    (lambda: table(split={1: 50, 3: 50}), r"names versions with no route: \[3\]"),
    (lambda: table("../x"), "invalid model name"),
    (lambda: ModelRoutes("m", "lambda", {1: VersionRoute("u", auth="key")},  # type: ignore[arg-type]
                         {1: 100}), "unknown auth 'key'"),
])
def test_invalid_tables(make: object, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        make()  # type: ignore[operator]


def test_a_corrupt_table_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "digits.json").write_text('{"model": "digits"}')
    with pytest.raises(InvalidInput, match="routes of 'digits' is not a modelfn routing table"):
        RouteSource(directory=tmp_path).read("digits")
