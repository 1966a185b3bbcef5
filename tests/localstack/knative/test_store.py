"""The store's cluster semantics: resourceVersion, generation, status, events."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from knative_support import NS, service

from modelfn.localstack.knative.errors import AlreadyExists, Gone, Invalid, NotFound, ObjectModified

if TYPE_CHECKING:
    from modelfn.localstack.knative.store import ServiceStore


def test_create_sets_cluster_metadata_and_drops_status(store: ServiceStore) -> None:
    body = service("digits")
    body["status"] = {"url": "http://forged"}
    created = store.create(NS, body)
    meta = created["metadata"]
    first = int(meta["resourceVersion"])
    assert meta["namespace"] == NS and meta["generation"] == 1 and meta["uid"]
    assert first > 1_700_000_000_000_000  # from the clock: no earlier run reached it
    assert meta["creationTimestamp"].endswith("Z")
    assert "status" not in created
    with pytest.raises(AlreadyExists):
        store.create(NS, service("digits"))
    other = store.create("other", service("digits"))
    assert other["metadata"]["resourceVersion"] == str(first + 1)
    assert [o["metadata"]["namespace"] for o in store.list()[0]] == [NS, "other"]
    assert store.list(NS)[1] == str(first + 1)


def test_generation_moves_with_spec_only_and_status_is_the_platforms(
        store: ServiceStore) -> None:
    created = store.create(NS, service("digits"))
    labelled = store.patch(NS, "digits", {"metadata": {"labels": {"team": "ml"}}})
    assert labelled["metadata"]["generation"] == 1
    assert int(labelled["metadata"]["resourceVersion"]) == \
        int(created["metadata"]["resourceVersion"]) + 1
    four = {"spec": {"template": {"spec": {"containerConcurrency": 4}}}}
    changed = store.patch(NS, "digits", four)
    assert changed["metadata"]["generation"] == 2
    store.set_status(NS, "digits", {"observedGeneration": 2})
    ignored = store.patch(NS, "digits", {"status": {"observedGeneration": 99}})
    assert ignored["status"] == {"observedGeneration": 2}
    unchanged = store.patch(NS, "digits", four)
    assert unchanged["metadata"]["resourceVersion"] == ignored["metadata"]["resourceVersion"]


def test_a_stale_resource_version_is_a_conflict(store: ServiceStore) -> None:
    created = store.create(NS, service("digits"))
    fresh = store.replace(NS, "digits", created)
    assert fresh["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    store.patch(NS, "digits", {"metadata": {"labels": {"a": "b"}}})
    with pytest.raises(ObjectModified) as info:
        store.replace(NS, "digits", created)
    assert info.value.status()["code"] == 409
    with pytest.raises(ObjectModified):
        store.patch(NS, "digits", {"metadata": {"resourceVersion": created["metadata"][
            "resourceVersion"], "labels": {"a": "c"}}})
    del created["metadata"]["resourceVersion"]
    with pytest.raises(Invalid, match="resourceVersion"):
        store.replace(NS, "digits", created)


def test_events_reach_subscribers_and_a_watch_resumes_from_a_version(
        store: ServiceStore) -> None:
    seen: list[tuple[str, str]] = []
    unsubscribe = store.subscribe(lambda e: seen.append((e.type, e.object["metadata"]["name"])))
    first = int(store.create(NS, service("a"))["metadata"]["resourceVersion"])
    store.create(NS, service("b"))
    store.set_status(NS, "a", {"observedGeneration": 1})
    store.delete(NS, "b")
    unsubscribe()
    store.create(NS, service("c"))
    assert seen == [("ADDED", "a"), ("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")]
    resumed: list[str] = []
    store.subscribe(lambda e: resumed.append(e.type), since=first + 2)
    assert resumed == ["DELETED", "ADDED"]
    now: list[str] = []
    store.subscribe(lambda e: now.append(e.object["metadata"]["name"]), initial=True)
    assert now == ["a", "c"]
    with pytest.raises(NotFound):
        store.delete(NS, "b")


def test_a_watch_from_a_forgotten_version_is_gone(store: ServiceStore) -> None:
    first = int(store.create(NS, service("a"))["metadata"]["resourceVersion"])
    for i in range(1100):
        store.set_status(NS, "a", {"observedGeneration": i})
    with pytest.raises(Gone):
        store.subscribe(lambda e: None, since=first + 1)
