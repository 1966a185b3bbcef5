"""Route resolution from the routing table, without a network."""

from __future__ import annotations

import random
from collections import Counter
from typing import TYPE_CHECKING

import pytest

from modelfn.gateway.router import Router
from modelfn.model_store.routes import ModelRoutes, RouteSource, VersionRoute
from modelfn.runtime.errors import ModelNotFound

if TYPE_CHECKING:
    from pathlib import Path


def router(tmp_path: Path, url: str | None = None, concurrency: int = 1) -> Router:
    source = RouteSource(directory=tmp_path)
    source.write(ModelRoutes(
        "digits", "lambda", url=url, auth="iam", region="eu-west-1",
        versions={1: VersionRoute("http://one", "iam", 8, concurrency),
                  2: VersionRoute("http://two", "iam", 8, concurrency),
                  3: VersionRoute("http://three", "iam", 8, concurrency)},
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


@pytest.mark.parametrize(("model", "version"), [
    ("iris", None), ("digits", "4"), ("digits", "x"), ("digits", "01x"),
    # digits to str.isdigit, not to a REST path: superscript, Arabic-Indic, fullwidth
    ("digits", "\u00b2"), ("digits", "\u0663"), ("digits", "\uff11"),
    # what the function would not find either: a leading zero, a sign, blanks, zero
    ("digits", "01"), ("digits", "+1"), ("digits", " 1"), ("digits", "1\n"), ("digits", "0"),
])
def test_unknown(tmp_path: Path, model: str, version: str | None) -> None:
    with pytest.raises(ModelNotFound):
        router(tmp_path).resolve(model, version)
