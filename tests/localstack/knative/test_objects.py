"""Object semantics a cluster keeps: delete preconditions, resourceVersions that outlive a
restart, the URL's namespace, and a 400 (never a 500) for a request that cannot parse."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

import pytest
from knative_support import NS, G, P, V, kubectl, needs_kubectl, raw_client, service
from kubernetes import client, watch

from modelfn.localstack.knative import ApiServer, ServiceStore

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    import httpx

BASE = f"/apis/{G}/{V}/namespaces/{NS}/{P}"


@pytest.fixture
def http(kubeconfig: Path) -> Iterator[httpx.Client]:
    with raw_client(kubeconfig) as raw:
        yield raw


def status_of(exc: client.ApiException) -> dict[str, object]:
    body: dict[str, object] = json.loads(exc.body)
    assert body["kind"] == "Status" and body["code"] == exc.status
    return body


def test_delete_preconditions_are_kept(custom: client.CustomObjectsApi) -> None:
    created = custom.create_namespaced_custom_object(G, V, NS, P, service("digits"))
    meta = created["metadata"]
    for preconditions, message in (
            (client.V1Preconditions(uid="not-its-uid"), "UID in precondition: not-its-uid"),
            (client.V1Preconditions(resource_version="1"),
             "ResourceVersion in precondition: 1")):
        with pytest.raises(client.ApiException) as info:
            custom.delete_namespaced_custom_object(
                G, V, NS, P, "digits", body=client.V1DeleteOptions(preconditions=preconditions))
        status = status_of(info.value)
        assert info.value.status == 409 and status["reason"] == "Conflict"
        assert f"Precondition failed: {message}" in str(status["message"])
        assert custom.get_namespaced_custom_object(G, V, NS, P, "digits")  # still there
    kept = client.V1Preconditions(uid=meta["uid"], resource_version=meta["resourceVersion"])
    done = custom.delete_namespaced_custom_object(
        G, V, NS, P, "digits", body=client.V1DeleteOptions(preconditions=kept))
    assert done["status"] == "Success"


def test_a_malformed_delete_body_is_a_400(http: httpx.Client) -> None:
    assert http.post(BASE, json=service("digits")).status_code == 201
    for body in (b"{not json", b"[1]", b'{"preconditions": "uid"}'):
        answer = http.request("DELETE", f"{BASE}/digits", content=body,
                              headers={"content-type": "application/json"})
        assert answer.status_code == 400, answer.text
    assert http.get(f"{BASE}/digits").status_code == 200


@needs_kubectl
def test_kubectl_delete_with_a_server_dry_run_deletes_nothing(kubeconfig: Path,
                                                              http: httpx.Client) -> None:
    assert http.post(BASE, json=service("digits")).status_code == 201
    done = kubectl(kubeconfig, "delete", "ksvc", "digits", "--dry-run=server", check=False)
    assert done.returncode != 0 and "dryRun" in done.stderr
    assert http.get(f"{BASE}/digits").status_code == 200
    assert "deleted" in kubectl(kubeconfig, "delete", "ksvc", "digits").stdout


def test_a_watch_from_before_a_restart_is_expired(tmp_path: Path) -> None:
    before = ServiceStore()  # the platform's previous run
    before.create(NS, service("a"))
    before.create(NS, service("b"))
    old_version = before.resource_version
    restarted = ApiServer(ServiceStore()).start()  # `modelfn dev` again
    try:
        kubeconfig = tmp_path / "kubeconfig"
        restarted.write_kubeconfig(kubeconfig)
        with raw_client(kubeconfig) as http:
            assert int(http.get(BASE).json()["metadata"]["resourceVersion"]) > int(old_version)
            answer = http.get(BASE, params={"watch": "true", "timeoutSeconds": "2",
                                            "resourceVersion": old_version})
            (event,) = [json.loads(line) for line in answer.text.splitlines()]
            assert event["type"] == "ERROR"
            assert event["object"]["code"] == 410 and event["object"]["reason"] == "Expired"
        from knative_support import kube_client

        with kube_client(kubeconfig) as api_client:  # the official client relists on it
            custom = client.CustomObjectsApi(api_client)
            with pytest.raises(client.ApiException) as info:
                for _ in watch.Watch().stream(custom.list_namespaced_custom_object, G, V, NS,
                                              P, resource_version=old_version,
                                              timeout_seconds=2):
                    pass
            assert info.value.status == 410
    finally:
        restarted.stop()


def test_a_watch_from_the_future_is_refused(http: httpx.Client) -> None:
    now = int(http.get(BASE).json()["metadata"]["resourceVersion"])
    answer = http.get(BASE, params={"watch": "true", "timeoutSeconds": "2",
                                    "resourceVersion": str(now + 1000)})
    assert answer.status_code == 504, answer.text
    status = answer.json()
    assert status["reason"] == "Timeout"
    assert f"Too large resource version: {now + 1000}, current: {now}" in status["message"]
    assert status["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"


def test_a_body_in_another_namespace_than_the_url_is_a_400(
        http: httpx.Client, custom: client.CustomObjectsApi) -> None:
    message = "the namespace of the provided object does not match the namespace sent on " \
              "the request"
    elsewhere = service("digits")
    elsewhere["metadata"]["namespace"] = "other"
    with pytest.raises(client.ApiException) as info:
        custom.create_namespaced_custom_object(G, V, NS, P, elsewhere)
    assert info.value.status == 400 and message in str(status_of(info.value)["message"])
    assert custom.list_cluster_custom_object(G, V, P)["items"] == []

    created = custom.create_namespaced_custom_object(G, V, NS, P, service("digits"))
    created["metadata"]["namespace"] = "other"
    with pytest.raises(client.ApiException) as info:
        custom.replace_namespaced_custom_object(G, V, NS, P, "digits", created)
    assert info.value.status == 400 and message in str(status_of(info.value)["message"])
    moved = http.patch(f"{BASE}/digits", json={"metadata": {"namespace": "other"}},
                       headers={"content-type": "application/merge-patch+json"})
    assert moved.status_code == 400 and message in moved.json()["message"]
    same = service("digits")  # naming the URL's own namespace is fine
    same["metadata"]["namespace"] = NS
    custom.create_namespaced_custom_object(G, V, "default", P, {**same, "metadata": {
        "name": "digits2", "namespace": NS}})


def test_unparseable_requests_are_400s_without_a_traceback(
        http: httpx.Client, caplog: pytest.LogCaptureFixture) -> None:
    assert http.post(BASE, json=service("digits")).status_code == 201
    bad = [
        http.patch(f"{BASE}/digits", content=b'[{"op": "add"',
                   headers={"content-type": "application/json-patch+json"}),
        http.patch(f"{BASE}/digits", content=b"",
                   headers={"content-type": "application/json-patch+json"}),
        http.get(BASE, params={"watch": "true", "resourceVersion": "abc"}),
        http.get(BASE, params={"watch": "true", "resourceVersion": "-5"}),
        http.get(BASE, params={"watch": "true", "timeoutSeconds": "soon"}),
        http.get(BASE, params={"watch": "true", "timeoutSeconds": "nan"}),
    ]
    for answer in bad:
        assert answer.status_code == 400, answer.text
        assert answer.json()["kind"] == "Status" and answer.json()["reason"] == "BadRequest"
        assert "\n" not in answer.json()["message"]
    assert http.get(f"{BASE}/digits").status_code == 200
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
