"""The local Knative platform end to end: Services through the ``kubernetes`` client become
real digits instances (``python -m modelfn.handlers.http``) on the real serving plane,
answer V2 requests at ``status.url``, split traffic, tag URLs, and report failures.
Nothing is mocked.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from knative_support import EXAMPLES, NS, G, P, V, kube_client, service
from kubernetes import client, watch
from serving_support import wait_for

from modelfn.localstack.knative import KnativePlatform
from modelfn.localstack.serving import LocalServingPlane

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

INFER = "/v2/models/digits/infer"
KUBECTL = shutil.which("kubectl")
#: generous bound for real processes to start (or fail) on a loaded machine
PATIENCE_S = 120


@pytest.fixture
def knative(tmp_path: Path) -> Iterator[KnativePlatform]:
    with LocalServingPlane(idle_s=30.0, log_dir=tmp_path) as plane, \
            KnativePlatform(plane) as platform:
        yield platform


@pytest.fixture
def custom(knative: KnativePlatform, tmp_path: Path) -> Iterator[client.CustomObjectsApi]:
    path = tmp_path / "kubeconfig"
    knative.write_kubeconfig(path)
    with kube_client(path) as api_client:
        yield client.CustomObjectsApi(api_client)


@pytest.fixture(scope="module")
def versions(tmp_path_factory: pytest.TempPathFactory, digits_repo: Path) -> dict[int, Path]:
    """Two repositories serving digits as version 1 and as version 2, so a response's
    ``model_version`` says which revision answered."""
    out = {1: digits_repo}
    model = tmp_path_factory.mktemp("v2") / "digits"
    model.mkdir()
    shutil.copy(digits_repo / "digits" / "config.pbtxt", model / "config.pbtxt")
    shutil.copytree(digits_repo / "digits" / "1", model / "2")
    out[2] = model.parent
    return out


@pytest.fixture(scope="module")
def digits_request() -> dict[str, Any]:
    return dict(json.loads((EXAMPLES / "requests" / "digits.json").read_text()))


def digits_service(name: str, repository: Path | str, **spec: Any) -> dict[str, Any]:
    body = service(name, **spec)
    body["spec"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "MODELFN_REPOSITORY", "value": str(repository)},
        {"name": "MODELFN_LOG_LEVEL", "value": "warning"}]
    return body


def settled(custom: client.CustomObjectsApi, name: str,
            until: Any = lambda status: True) -> dict[str, Any]:
    """Watch the Service until its status is up to date with Ready True or False (and
    ``until(status)``); the object."""
    stream = watch.Watch()
    for event in stream.stream(custom.list_namespaced_custom_object, G, V, NS, P,
                               field_selector=f"metadata.name={name}",
                               timeout_seconds=PATIENCE_S):
        obj: dict[str, Any] = event["object"]
        status = obj.get("status") or {}
        ready = {c["type"]: c for c in status.get("conditions", [])}.get("Ready", {})
        if (status.get("observedGeneration") == obj["metadata"]["generation"]
                and ready.get("status") in ("True", "False") and until(status)):
            stream.stop()
            return obj
    raise AssertionError(f"{name} did not settle within {PATIENCE_S} s")


def conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in obj["status"]["conditions"]}


def model_version(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    return str(response.json()["model_version"])


def test_a_service_becomes_ready_and_answers_v2_at_its_url(
        custom: client.CustomObjectsApi, knative: KnativePlatform, tmp_path: Path,
        versions: dict[int, Path], digits_request: dict[str, Any]) -> None:
    custom.create_namespaced_custom_object(G, V, NS, P, digits_service("digits", versions[1]))
    obj = settled(custom, "digits")
    status = obj["status"]
    assert {k: c["status"] for k, c in conditions(obj).items()} == {
        "ConfigurationsReady": "True", "RoutesReady": "True", "Ready": "True"}
    assert all(c["lastTransitionTime"] for c in conditions(obj).values())
    assert status["latestCreatedRevisionName"] == status["latestReadyRevisionName"] \
        == "digits-00001"
    assert status["address"]["url"] == status["url"]
    assert status["traffic"] == [{"revisionName": "digits-00001", "percent": 100,
                                  "latestRevision": True}]
    with httpx.Client(timeout=60) as http:
        response = http.post(status["url"] + INFER, json=digits_request)
        assert model_version(response) == "1"
        assert len(response.json()["outputs"][0]["data"]) > 0
    if KUBECTL is not None:  # what a user sees
        path = tmp_path / "kubeconfig"
        row = subprocess.run([KUBECTL, "get", "ksvc", "digits", "--no-headers"],
                             env={**os.environ, "KUBECONFIG": str(path)}, capture_output=True,
                             text=True, timeout=60, check=True).stdout.split()
        assert row[:5] == ["digits", status["url"], "digits-00001", "digits-00001", "True"]

    custom.delete_namespaced_custom_object(G, V, NS, P, "digits")
    plane = knative.plane
    assert isinstance(plane, LocalServingPlane)
    wait_for(lambda: not plane.status()["revisions"] and not plane.status()["routes"],
             "the Service's revisions and route to go with it")
    with pytest.raises(httpx.ConnectError):
        httpx.get(status["url"] + "/v2/health/ready", timeout=5)


def test_a_second_revision_splits_traffic_and_tags_reach_their_revision(
        custom: client.CustomObjectsApi, versions: dict[int, Path],
        digits_request: dict[str, Any]) -> None:
    custom.create_namespaced_custom_object(G, V, NS, P, digits_service("digits", versions[1]))
    first = settled(custom, "digits")
    assert first["status"]["latestReadyRevisionName"] == "digits-00001"

    second = digits_service("digits", versions[2], traffic=[
        {"revisionName": "digits-00001", "percent": 50, "tag": "one"},
        {"latestRevision": True, "percent": 50, "tag": "latest"}])
    patched = custom.patch_namespaced_custom_object(G, V, NS, P, "digits",
                                                    {"spec": second["spec"]})
    assert patched["metadata"]["generation"] == 2
    obj = settled(custom, "digits",
                  lambda s: s.get("latestReadyRevisionName") == "digits-00002")
    status = obj["status"]
    assert conditions(obj)["Ready"]["status"] == "True"
    assert status["latestCreatedRevisionName"] == "digits-00002"
    assert status["url"] == first["status"]["url"]  # a Service's URL is stable
    tags = {t["tag"]: t for t in status["traffic"]}
    assert tags["one"]["revisionName"] == "digits-00001"
    assert tags["latest"]["revisionName"] == "digits-00002"
    assert tags["latest"]["latestRevision"] is True and tags["one"]["latestRevision"] is False
    with httpx.Client(timeout=60) as http:
        assert model_version(http.post(tags["one"]["url"] + INFER, json=digits_request)) == "1"
        assert model_version(http.post(tags["latest"]["url"] + INFER,
                                       json=digits_request)) == "2"
        # 50/50: all 30 on one side has probability 2 * 0.5**30
        seen = {model_version(http.post(status["url"] + INFER, json=digits_request))
                for _ in range(30)}
    assert seen == {"1", "2"}


def test_a_service_whose_model_is_missing_is_not_ready_with_the_functions_error(
        custom: client.CustomObjectsApi, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-repository"
    custom.create_namespaced_custom_object(G, V, NS, P, digits_service("broken", missing))
    obj = settled(custom, "broken")
    ready = conditions(obj)["Ready"]
    assert ready["status"] == "False" and ready["reason"] == "RevisionFailed"
    assert f"{missing} is not a directory" in ready["message"]
    assert conditions(obj)["ConfigurationsReady"]["status"] == "False"
    assert obj["status"]["latestCreatedRevisionName"] == "broken-00001"
    assert "latestReadyRevisionName" not in obj["status"]


def test_a_new_template_takes_the_traffic_and_the_old_revision_can_take_it_back(
        custom: client.CustomObjectsApi, knative: KnativePlatform,
        versions: dict[int, Path], digits_request: dict[str, Any]) -> None:
    """The revision that stopped taking traffic is kept (Knative keeps at least 20 such),
    so a split back to it works: a two-step canary, a rollback. It used to be removed at
    once, and the split was RevisionMissing."""
    plane = knative.plane
    assert isinstance(plane, LocalServingPlane)
    custom.create_namespaced_custom_object(G, V, NS, P, digits_service("digits", versions[1]))
    first = settled(custom, "digits")
    named = digits_service("digits", versions[2])["spec"]
    named["template"]["metadata"] = {"name": "digits-v2"}  # a revision named by its template
    custom.patch_namespaced_custom_object(G, V, NS, P, "digits", {"spec": named})
    obj = settled(custom, "digits", lambda s: s.get("latestReadyRevisionName") == "digits-v2")
    assert obj["status"]["traffic"] == [{"revisionName": "digits-v2", "percent": 100,
                                         "latestRevision": True}]
    url = first["status"]["url"] + INFER
    with httpx.Client(timeout=60) as http:
        assert model_version(http.post(url, json=digits_request)) == "2"
    assert sorted(r["name"] for r in plane.status()["revisions"]) == ["digits-00001",
                                                                       "digits-v2"]
    custom.patch_namespaced_custom_object(G, V, NS, P, "digits", {"spec": {"traffic": [
        {"revisionName": "digits-00001", "percent": 100, "tag": "old"},
        {"latestRevision": True, "percent": 0, "tag": "new"}]}})
    back = settled(custom, "digits", lambda s: s["traffic"][0]["percent"] == 100)
    assert conditions(back)["Ready"]["status"] == "True"
    with httpx.Client(timeout=60) as http:
        assert model_version(http.post(url, json=digits_request)) == "1"


def test_traffic_moves_to_a_revision_only_once_it_is_ready(
        custom: client.CustomObjectsApi, versions: dict[int, Path], tmp_path: Path,
        digits_request: dict[str, Any]) -> None:
    """A new revision named in the traffic that fails to start never takes the route: the
    old revision keeps serving, and the Service says why it is not Ready. (The route used
    to switch at once, and every request got 503 while the old revision still ran.)"""
    custom.create_namespaced_custom_object(G, V, NS, P, digits_service("digits", versions[1]))
    first = settled(custom, "digits")
    broken = digits_service("digits", tmp_path / "no-such-repository")["spec"]
    broken["template"]["metadata"] = {"name": "digits-bad"}
    broken["traffic"] = [{"revisionName": "digits-bad", "percent": 100}]
    custom.patch_namespaced_custom_object(G, V, NS, P, "digits", {"spec": broken})
    obj = settled(custom, "digits")
    ready = conditions(obj)["Ready"]
    assert ready["status"] == "False" and "digits-bad" in ready["message"]
    assert obj["status"]["traffic"] == [{"revisionName": "digits-00001", "percent": 100,
                                         "latestRevision": True}]
    with httpx.Client(timeout=60) as http:
        assert model_version(http.post(first["status"]["url"] + INFER,
                                       json=digits_request)) == "1"


def test_traffic_to_an_unknown_revision_is_not_ready_naming_it(
        custom: client.CustomObjectsApi, versions: dict[int, Path]) -> None:
    body = digits_service("digits", versions[1],
                          traffic=[{"revisionName": "digits-nope", "percent": 100}])
    custom.create_namespaced_custom_object(G, V, NS, P, body)
    obj = settled(custom, "digits", lambda s: any(
        c["type"] == "ConfigurationsReady" and c["status"] == "True"
        for c in s["conditions"]))
    routes = conditions(obj)["RoutesReady"]
    assert routes["status"] == "False" and routes["reason"] == "RevisionMissing"
    assert '"digits-nope"' in routes["message"]
    assert conditions(obj)["Ready"]["status"] == "False"
    assert "url" not in obj["status"]


def named(name: str, repository: Path, **spec: Any) -> dict[str, Any]:
    body = digits_service("digits", repository, **spec)
    body["spec"]["template"]["metadata"] = {"name": name}
    return body


def test_a_revision_keeps_serving_its_own_template(
        custom: client.CustomObjectsApi, knative: KnativePlatform,
        versions: dict[int, Path], digits_request: dict[str, Any]) -> None:
    custom.create_namespaced_custom_object(G, V, NS, P, named("digits-v1", versions[1]))
    settled(custom, "digits")
    split = [{"revisionName": "digits-v1", "percent": 50, "tag": "v1"},
             {"revisionName": "digits-v2", "percent": 50, "tag": "v2"}]
    custom.patch_namespaced_custom_object(
        G, V, NS, P, "digits", {"spec": named("digits-v2", versions[2], traffic=split)["spec"]})
    obj = settled(custom, "digits", lambda s: s.get("latestReadyRevisionName") == "digits-v2")
    tags = {t["tag"]: t["url"] for t in obj["status"]["traffic"]}

    # the template keeps the name digits-v2 but would serve version 1: refused
    changed = named("digits-v2", versions[1], traffic=split)["spec"]
    with pytest.raises(client.ApiException) as info:
        custom.patch_namespaced_custom_object(G, V, NS, P, "digits", {"spec": changed})
    assert info.value.status == 422
    assert "without a name change" in json.loads(info.value.body)["message"]
    # the name of a revision already made, with other content: refused too, though the
    # Service's previous template had another name
    custom.patch_namespaced_custom_object(G, V, NS, P, "digits", {
        "spec": named("digits-v3", versions[2], traffic=split)["spec"]})
    reused = named("digits-v1", versions[2], traffic=split)["spec"]
    with pytest.raises(client.ApiException) as info:
        custom.patch_namespaced_custom_object(G, V, NS, P, "digits", {"spec": reused})
    assert info.value.status == 422
    assert str(versions[1]) in json.loads(info.value.body)["message"]

    # past admission (the store told nothing), the reconciler still replaces nothing
    knative.store.know_revisions(None)
    custom.patch_namespaced_custom_object(G, V, NS, P, "digits", {"spec": reused})
    obj = settled(custom, "digits")
    config = conditions(obj)["ConfigurationsReady"]
    assert config["status"] == "False" and config["reason"] == "RevisionFailed"
    assert 'revision "digits-v1" already exists with another template' in config["message"]
    with httpx.Client(timeout=60) as http:
        assert model_version(http.post(tags["v1"] + INFER, json=digits_request)) == "1"
        assert model_version(http.post(tags["v2"] + INFER, json=digits_request)) == "2"


def settled_as(custom: client.CustomObjectsApi, name: str, uid: str) -> dict[str, Any]:
    """``settled`` for the object with ``uid``: a status written for an earlier object of
    the same name does not count."""
    stream = watch.Watch()
    for event in stream.stream(custom.list_namespaced_custom_object, G, V, NS, P,
                               field_selector=f"metadata.name={name}",
                               timeout_seconds=PATIENCE_S):
        obj: dict[str, Any] = event["object"]
        status = obj.get("status") or {}
        ready = {c["type"]: c for c in status.get("conditions", [])}.get("Ready", {})
        if (obj["metadata"]["uid"] == uid and event["type"] != "DELETED"
                and status.get("observedGeneration") == obj["metadata"]["generation"]
                and ready.get("status") in ("True", "False")):
            stream.stop()
            return obj
    raise AssertionError(f"{name} ({uid}) did not settle within {PATIENCE_S} s")


@pytest.mark.parametrize("revision", [None, "digits-v1"], ids=["generated", "named"])
def test_a_service_deleted_and_created_again_at_once_serves_its_own_template(
        custom: client.CustomObjectsApi, knative: KnativePlatform, versions: dict[int, Path],
        digits_request: dict[str, Any], revision: str | None) -> None:
    """A re-created Service is a new object: its first revision is its own (the old one's
    revisions and instances went with the old object), whether its revision name is
    generated or the same name the deleted Service's template gave. The reconciler is kept
    busy (draining another Service) while the delete and the create land, as under load. A
    re-created Service used to inherit the old one's revisions and answer with the deleted
    model version, or be refused for "changes without a name change"."""
    plane = knative.plane
    assert isinstance(plane, LocalServingPlane)
    expected = revision or "digits-00001"

    def body(version: int) -> dict[str, Any]:
        return named(revision, versions[version]) if revision else \
            digits_service("digits", versions[version])

    made = custom.create_namespaced_custom_object(G, V, NS, P, body(1))
    settled_as(custom, "digits", made["metadata"]["uid"])
    with httpx.Client(timeout=60) as http:
        for version in (2, 1):
            other = custom.create_namespaced_custom_object(
                G, V, NS, P, digits_service("other", versions[1]))
            settled_as(custom, "other", other["metadata"]["uid"])
            custom.delete_namespaced_custom_object(G, V, NS, P, "other")  # busy: draining
            custom.delete_namespaced_custom_object(G, V, NS, P, "digits")
            made = custom.create_namespaced_custom_object(G, V, NS, P, body(version))
            obj = settled_as(custom, "digits", made["metadata"]["uid"])
            assert conditions(obj)["Ready"]["status"] == "True", obj["status"]
            assert obj["status"]["latestCreatedRevisionName"] == expected
            assert obj["status"]["latestReadyRevisionName"] == expected
            answer = http.post(obj["status"]["url"] + INFER, json=digits_request)
            assert model_version(answer) == str(version)
            wait_for(lambda: [r["name"] for r in plane.status()["revisions"]] == [expected],
                     "only the new Service's revision to run")


def test_a_service_beyond_the_instance_cap_is_not_ready_naming_it_until_a_place_frees(
        tmp_path: Path, versions: dict[int, Path], digits_request: dict[str, Any]) -> None:
    with LocalServingPlane(max_instances=1, log_dir=tmp_path) as plane, \
            KnativePlatform(plane) as platform:
        platform.write_kubeconfig(tmp_path / "kubeconfig")
        with kube_client(tmp_path / "kubeconfig") as api_client:
            custom = client.CustomObjectsApi(api_client)
            first = digits_service("first", versions[1])
            first["spec"]["template"]["metadata"] = {
                "annotations": {"autoscaling.knative.dev/min-scale": "1"}}
            custom.create_namespaced_custom_object(G, V, NS, P, first)
            assert conditions(settled(custom, "first"))["Ready"]["status"] == "True"
            custom.create_namespaced_custom_object(G, V, NS, P,
                                                   digits_service("second", versions[2]))
            ready = conditions(settled(custom, "second"))["Ready"]
            assert (ready["status"], ready["reason"]) == ("False", "InstanceLimit")
            assert "at most 1 instances" in ready["message"]

            custom.delete_namespaced_custom_object(G, V, NS, P, "first")
            obj = settled(custom, "second", lambda s: s.get("latestReadyRevisionName"))
            assert conditions(obj)["Ready"]["status"] == "True"
            with httpx.Client(timeout=60) as http:
                answer = http.post(obj["status"]["url"] + INFER, json=digits_request)
                assert model_version(answer) == "2"
