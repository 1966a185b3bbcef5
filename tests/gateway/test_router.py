"""Route resolution from the routing table, without a network."""

from __future__ import annotations

import random
from collections import Counter
from typing import TYPE_CHECKING

import pytest

from modelfn.gateway.router import Router, RoutesUnreadable
from modelfn.model_store.routes import ModelRoutes, RouteSource, VersionRoute
from modelfn.runtime.errors import InvalidInput, ModelNotFound

if TYPE_CHECKING:
    from pathlib import Path

#: a version's config as a routing table records it (what the gateway batches by)
CONFIG = {"name": "digits", "max_batch_size": 8}


def router(tmp_path: Path, url: str | None = None, concurrency: int = 1) -> Router:
    source = RouteSource(directory=tmp_path)
    source.write(ModelRoutes(
        "digits", "lambda", url=url, auth="iam", region="eu-west-1",
        versions={1: VersionRoute("http://one", "iam", 8, concurrency, config=CONFIG),
                  2: VersionRoute("http://two", "iam", 8, concurrency, config=CONFIG),
                  3: VersionRoute("http://three", "iam", 8, concurrency, config=CONFIG)},
        split={1: 75, 2: 25, 3: 0}))
    r = Router(source, rng=random.Random(7))
    r.load()
    return r


def test_pinned_and_weighted(tmp_path: Path) -> None:
    r = router(tmp_path)
    pinned = r.resolve("digits", "3")
    assert (pinned.url, pinned.version, pinned.auth, pinned.region) == (
        "http://three", 3, "iam", "eu-west-1")
    drawn = Counter(r.resolve("digits", None).version for _ in range(4000))
    assert set(drawn) == {1, 2}  # a version at 0% is reachable only pinned
    assert 2800 < drawn[1] < 3200


def test_the_platform_splits_when_it_has_a_url(tmp_path: Path) -> None:
    upstream = router(tmp_path, url="http://live", concurrency=16).resolve("digits", None)
    assert (upstream.url, upstream.version, upstream.label) == ("http://live", None, "split")
    assert not upstream.batched


def test_the_gateway_splits_where_it_batches(tmp_path: Path) -> None:
    """Lambda: one request per instance, so the gateway batches per version, and chooses
    the version before batching rather than sending to the alias URL."""
    r = router(tmp_path, url="http://live", concurrency=1)
    drawn = Counter(r.resolve("digits", None).version for _ in range(4000))
    assert set(drawn) == {1, 2}
    assert 2800 < drawn[1] < 3200
    assert r.resolve("digits", None).batched and r.resolve("digits", "3").batched
    assert not router(tmp_path, concurrency=16).resolve("digits", "1").batched


def test_a_table_without_config_is_not_batched_and_says_so(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A table written before tables recorded the config: its versions' requests go to the
    function one by one (the platform's URL applies the split), and the log says to deploy
    again; the function is never asked for its config."""
    source = RouteSource(directory=tmp_path)
    source.write(ModelRoutes("digits", "lambda", url="http://live", split={1: 100},
                             versions={1: VersionRoute("http://one", "iam", 8, 1)}))
    r = Router(source)
    with caplog.at_level("WARNING", logger="modelfn.gateway"):
        r.load()
        r.load()  # an unchanged table is not reported again
    assert not r.resolve("digits", "1").batched
    assert r.resolve("digits", None).url == "http://live"
    said = [m for m in caplog.messages if "not batched" in m]
    assert len(said) == 1 and "Deploy it again" in said[0]


@pytest.mark.parametrize(("model", "version"), [
    ("iris", None), ("digits", "4"), ("digits", "x"), ("digits", "01x"),
    # digits to str.isdigit, not to a REST path: superscript, Arabic-Indic, fullwidth
    ("digits", "\u00b2"), ("digits", "\u0663"), ("digits", "\uff11"),
    # what the function would not find either: a leading zero, a sign, blanks, zero
    ("digits", "01"), ("digits", "+1"), ("digits", " 1"), ("digits", "1\n"), ("digits", "0"),
    # more digits than an int64 has (int() raises ValueError past 4,300: a 500 it was)
    ("digits", "1" * 20), ("digits", "1" * 5000),
])
def test_unknown(tmp_path: Path, model: str, version: str | None) -> None:
    with pytest.raises(ModelNotFound):
        router(tmp_path).resolve(model, version)


def test_a_table_that_cannot_be_read_affects_its_own_model_only(tmp_path: Path) -> None:
    """A damaged file, or a file whose name is no model name: the other models route and
    reload as usual, an unknown model is still a 404, and the damaged model keeps its last
    table (or, with none, is a 503 saying why)."""
    r = router(tmp_path)
    (tmp_path / "iris.json").write_text("{bad")
    (tmp_path / "Bad Name.json").write_text("{}")
    r.load()
    assert r.resolve("digits", "1").url == "http://one"
    with pytest.raises(ModelNotFound):
        r.resolve("nothing", None)
    with pytest.raises(RoutesUnreadable, match="'iris' cannot be routed: its routing table "
                                               "cannot be read: routes of 'iris' is not"):
        r.resolve("iris", None)
    assert RoutesUnreadable("iris", InvalidInput("x")).status_code == 503
    source = RouteSource(directory=tmp_path)
    source.write(ModelRoutes("digits", "lambda", versions={1: VersionRoute("http://new")},
                             split={1: 100}))
    r.load()  # a change to a readable table is taken despite the broken ones
    assert r.resolve("digits", "1").url == "http://new"
    (tmp_path / "digits.json").write_text("[]")  # now digits breaks: its last table stays
    r.load()
    assert r.resolve("digits", None).url == "http://new"
    assert set(r.broken) == {"iris", "Bad Name", "digits"}


@pytest.mark.parametrize("url", ["127.0.0.1:8080", "ftp://host/x", "http://", "http://h:x"])
def test_a_table_with_a_url_that_is_not_http_is_refused(url: str) -> None:
    with pytest.raises(InvalidInput, match="'digits' has a URL"):
        ModelRoutes("digits", "local", versions={1: VersionRoute(url)}, split={1: 100})


async def test_a_model_written_just_after_a_read_is_found_on_its_first_request(
        tmp_path: Path) -> None:
    """A request for a model the tables lack reads them again, whatever read came just
    before: the periodic one a moment ago does not hold the table written since."""
    r = router(tmp_path)
    r.reload_s = 3600  # no periodic read in this test
    await r.start()
    try:
        for n in range(5):
            RouteSource(directory=tmp_path).write(ModelRoutes(
                f"new{n}", "local", versions={1: VersionRoute("http://new")}, split={1: 100}))
            assert (await r.resolve_fresh(f"new{n}", None)).url == "http://new"
            assert (await r.resolve_fresh(f"new{n}", "1")).version == 1
        with pytest.raises(ModelNotFound):
            await r.resolve_fresh("never", None)
    finally:
        await r.stop()
