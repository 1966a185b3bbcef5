"""The REST API through real clients: the official ``kubernetes`` client and ``kubectl``.

The server runs on loopback with only the store behind it (no reconciler): these tests are
about the Kubernetes API's semantics. ``kubectl`` is Debian's ``kubernetes-client``
(``scripts/ci-containers.sh`` installs it); its tests skip when it is absent.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from knative_support import KUBECTL, NS, G, P, V, kubectl, needs_kubectl, raw_client, service
from kubernetes import client, watch

if TYPE_CHECKING:
    from pathlib import Path

    from modelfn.localstack.knative import ApiServer, ServiceStore



def status_of(exc: client.ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exc.body)
    assert body["kind"] == "Status" and body["status"] == "Failure"
    assert body["code"] == exc.status
    return body


def test_discovery_lists_services_as_ksvc(kubeconfig: Path) -> None:
    with raw_client(kubeconfig) as http:
        groups = http.get("/apis").json()
        assert groups["groups"][0]["name"] == G
        resources = http.get(f"/apis/{G}/{V}").json()["resources"]
        services = next(r for r in resources if r["name"] == P)
        assert services["shortNames"] == ["kservice", "ksvc"] and services["namespaced"] is True
        assert services["kind"] == "Service" and "watch" in services["verbs"]
        assert http.get("/version").json()["major"] == "1"
        missing = http.get("/apis/apps/v1/deployments")
        assert missing.status_code == 404
        assert missing.json()["kind"] == "Status" and missing.json()["reason"] == "NotFound"


def test_malformed_requests_get_status_objects_and_the_server_keeps_serving(
        kubeconfig: Path) -> None:
    base = f"/apis/{G}/{V}/namespaces/{NS}/{P}"
    with raw_client(kubeconfig) as http:
        garbage = http.post(base, content=b"{not json", headers={
            "content-type": "application/json"})
        assert garbage.status_code == 400 and garbage.json()["reason"] == "BadRequest"
        listed = http.post(base, json=[1, 2])
        assert listed.status_code == 400 and listed.json()["kind"] == "Status"
        assert http.post(base, json=service("digits")).status_code == 201
        renamed = http.put(f"{base}/digits", json=service("other"))
        assert renamed.status_code == 400 and "does not match" in renamed.json()["message"]
        unsupported = http.patch(f"{base}/digits", content=b"{}",
                                 headers={"content-type": "text/plain"})
        assert unsupported.status_code == 415 and unsupported.json()["kind"] == "Status"
        not_allowed = http.delete(base)
        assert not_allowed.status_code == 405 and not_allowed.json()["kind"] == "Status"
        assert http.get(f"{base}/digits").json()["metadata"]["name"] == "digits"


def test_create_get_list_patch_replace_delete(custom: client.CustomObjectsApi) -> None:
    created = custom.create_namespaced_custom_object(G, V, NS, P, service("digits"))
    assert created["metadata"]["generation"] == 1
    got = custom.get_namespaced_custom_object(G, V, NS, P, "digits")
    assert got["metadata"]["uid"] == created["metadata"]["uid"]
    listed = custom.list_namespaced_custom_object(G, V, NS, P)
    assert listed["kind"] == "ServiceList" and listed["metadata"]["resourceVersion"]
    assert [o["metadata"]["name"] for o in listed["items"]] == ["digits"]
    custom.create_namespaced_custom_object(G, V, "other", P, service("digits"))
    everywhere = custom.list_cluster_custom_object(G, V, P)
    assert sorted(o["metadata"]["namespace"] for o in everywhere["items"]) == [NS, "other"]

    patched = custom.patch_namespaced_custom_object(
        G, V, NS, P, "digits",
        {"spec": {"template": {"spec": {"containerConcurrency": 2}}}})
    assert patched["metadata"]["generation"] == 2
    assert patched["spec"]["template"]["spec"]["containerConcurrency"] == 2
    patched["metadata"]["labels"] = {"team": "ml"}
    replaced = custom.replace_namespaced_custom_object(G, V, NS, P, "digits", patched)
    assert replaced["metadata"]["labels"] == {"team": "ml"}
    assert replaced["metadata"]["generation"] == 2

    deleted = custom.delete_namespaced_custom_object(G, V, NS, P, "digits")
    assert deleted["status"] == "Success"
    with pytest.raises(client.ApiException) as info:
        custom.get_namespaced_custom_object(G, V, NS, P, "digits")
    assert info.value.status == 404 and status_of(info.value)["reason"] == "NotFound"
    with pytest.raises(client.ApiException) as info:
        custom.delete_namespaced_custom_object(G, V, NS, P, "digits")
    assert info.value.status == 404


def test_errors_are_status_objects(custom: client.CustomObjectsApi) -> None:
    custom.create_namespaced_custom_object(G, V, NS, P, service("digits"))
    with pytest.raises(client.ApiException) as info:
        custom.create_namespaced_custom_object(G, V, NS, P, service("digits"))
    assert info.value.status == 409 and status_of(info.value)["reason"] == "AlreadyExists"

    bad = service("digits2")
    bad["spec"]["template"]["spec"]["containers"][0]["image"] = ["not", "a", "string"]
    with pytest.raises(client.ApiException) as info:
        custom.create_namespaced_custom_object(G, V, NS, P, bad)
    body = status_of(info.value)
    assert info.value.status == 422 and body["reason"] == "Invalid"
    assert "spec.template.spec.containers[0].image" in body["message"]
    assert body["details"]["causes"][0]["field"] == "spec.template.spec.containers[0].image"

    with pytest.raises(client.ApiException) as info:
        custom.patch_namespaced_custom_object(G, V, NS, P, "digits", {
            "spec": {"traffic": [{"latestRevision": True, "percent": 90}]}})
    assert info.value.status == 422 and "spec.traffic" in status_of(info.value)["message"]

    stale = custom.get_namespaced_custom_object(G, V, NS, P, "digits")
    custom.patch_namespaced_custom_object(G, V, NS, P, "digits",
                                          {"metadata": {"labels": {"a": "b"}}})
    with pytest.raises(client.ApiException) as info:
        custom.replace_namespaced_custom_object(G, V, NS, P, "digits", stale)
    assert info.value.status == 409 and status_of(info.value)["reason"] == "Conflict"

    with pytest.raises(client.ApiException) as info:
        custom.patch_namespaced_custom_object(G, V, NS, P, "missing", {"metadata": {}})
    assert info.value.status == 404 and status_of(info.value)["reason"] == "NotFound"


def test_a_watch_streams_added_modified_deleted(custom: client.CustomObjectsApi,
                                               store: ServiceStore) -> None:
    custom.create_namespaced_custom_object(G, V, NS, P, service("before"))
    events: list[tuple[str, str]] = []
    started = threading.Event()

    def follow() -> None:
        stream = watch.Watch()
        for event in stream.stream(custom.list_namespaced_custom_object, G, V, NS, P,
                                   timeout_seconds=20):
            started.set()
            events.append((event["type"], event["object"]["metadata"]["name"]))
            if event["type"] == "DELETED":
                stream.stop()

    follower = threading.Thread(target=follow)
    follower.start()
    assert started.wait(10)
    custom.create_namespaced_custom_object(G, V, NS, P, service("digits"))
    custom.create_namespaced_custom_object(G, V, "elsewhere", P, service("digits"))
    store.set_status(NS, "digits", {"observedGeneration": 1})
    custom.delete_namespaced_custom_object(G, V, NS, P, "digits")
    follower.join(20)
    assert not follower.is_alive()
    assert events == [("ADDED", "before"), ("ADDED", "digits"), ("MODIFIED", "digits"),
                      ("DELETED", "digits")]


def test_a_watch_resumes_from_a_resource_version_and_honours_its_timeout(
        kubeconfig: Path, custom: client.CustomObjectsApi) -> None:
    first = custom.create_namespaced_custom_object(G, V, NS, P, service("a"))
    custom.create_namespaced_custom_object(G, V, NS, P, service("b"))
    with raw_client(kubeconfig) as http:
        response = http.get(f"/apis/{G}/{V}/namespaces/{NS}/{P}", params={
            "watch": "true", "timeoutSeconds": "1",
            "resourceVersion": first["metadata"]["resourceVersion"]})
        lines = [json.loads(line) for line in response.text.splitlines()]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in lines] == [("ADDED", "b")]




MANIFEST = """\
apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: digits
spec:
  template:
    metadata:
      annotations:
        autoscaling.knative.dev/max-scale: "{max_scale}"
    spec:
      containers:
      - image: modelfn-digits:test
"""


@needs_kubectl
def test_kubectl_apply_get_delete(kubeconfig: Path, tmp_path: Path, store: ServiceStore) -> None:
    manifest = tmp_path / "digits.yaml"
    manifest.write_text(MANIFEST.format(max_scale=3))
    assert "digits created" in kubectl(kubeconfig, "apply", "-f", str(manifest)).stdout
    store.set_status(NS, "digits", {"url": "http://127.0.0.1:9", "conditions": [
        {"type": "Ready", "status": "True"}]})
    table = kubectl(kubeconfig, "get", "ksvc").stdout
    assert table.split()[:6] == ["NAME", "URL", "LATESTCREATED", "LATESTREADY", "READY",
                                 "REASON"]
    assert "digits" in table and "http://127.0.0.1:9" in table and "True" in table
    obj = json.loads(kubectl(kubeconfig, "get", "ksvc", "digits", "-o", "json").stdout)
    assert obj["metadata"]["generation"] == 1

    manifest.write_text(MANIFEST.format(max_scale=5))
    assert "configured" in kubectl(kubeconfig, "apply", "-f", str(manifest)).stdout
    obj = store.get(NS, "digits")
    annotations = obj["spec"]["template"]["metadata"]["annotations"]
    assert annotations["autoscaling.knative.dev/max-scale"] == "5"
    assert obj["metadata"]["generation"] == 2
    kubectl(kubeconfig, "apply", "-f", str(manifest))  # the same again changes nothing
    again = store.get(NS, "digits")
    assert again["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"]

    assert "deleted" in kubectl(kubeconfig, "delete", "-f", str(manifest)).stdout
    missing = kubectl(kubeconfig, "get", "ksvc", "digits", check=False)
    assert missing.returncode != 0 and 'services.serving.knative.dev "digits" not found' in \
        missing.stderr


@needs_kubectl
def test_kubectl_shows_the_servers_422(kubeconfig: Path, tmp_path: Path) -> None:
    manifest = tmp_path / "bad.yaml"
    manifest.write_text(MANIFEST.format(max_scale=3).replace("max-scale: \"3\"",
                                                             "max-scale: \"lots\""))
    done = kubectl(kubeconfig, "apply", "-f", str(manifest), check=False)
    assert done.returncode != 0
    assert "is invalid" in done.stderr
    assert "spec.template.metadata.annotations.autoscaling.knative.dev/max-scale" in done.stderr
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text(MANIFEST.format(max_scale=3) + "        bogus: 1\n")
    done = kubectl(kubeconfig, "apply", "-f", str(unknown), check=False)
    assert done.returncode != 0 and 'unknown field "spec.template.spec.containers[0].bogus"' \
        in done.stderr


@needs_kubectl
def test_kubectl_server_side_apply_and_patches(kubeconfig: Path, tmp_path: Path,
                                              store: ServiceStore) -> None:
    manifest = tmp_path / "digits.yaml"
    manifest.write_text(MANIFEST.format(max_scale=3))
    assert "serverside-applied" in kubectl(kubeconfig, "apply", "--server-side", "-f",
                                           str(manifest)).stdout
    kubectl(kubeconfig, "patch", "ksvc", "digits", "--type=merge", "-p",
            '{"spec":{"template":{"spec":{"containerConcurrency":3}}}}')
    kubectl(kubeconfig, "patch", "ksvc", "digits", "--type=json", "-p",
            '[{"op":"replace","path":"/spec/template/spec/containerConcurrency","value":4}]')
    obj = store.get(NS, "digits")
    assert obj["spec"]["template"]["spec"]["containerConcurrency"] == 4
    assert obj["metadata"]["generation"] == 3
    dry = kubectl(kubeconfig, "apply", "--dry-run=server", "-f", str(manifest), check=False)
    assert dry.returncode != 0 and "dryRun" in dry.stderr


def test_a_watch_asked_for_tables_streams_table_rows(kubeconfig: Path,
                                                     store: ServiceStore) -> None:
    """What ``kubectl get ksvc -w`` asks for: each event's object a one-row Table."""
    created = store.create(NS, service("digits"))
    store.set_status(NS, "digits", {"url": "http://127.0.0.1:9"})
    with raw_client(kubeconfig) as http:
        response = http.get(f"/apis/{G}/{V}/namespaces/{NS}/{P}",
                            params={"watch": "1", "timeoutSeconds": "1",
                                    "resourceVersion": created["metadata"]["resourceVersion"]},
                            headers={"accept": "application/json;as=Table;v=v1;g=meta.k8s.io"})
    events = [json.loads(line) for line in response.text.splitlines()]
    assert [e["type"] for e in events] == ["MODIFIED"]
    table = events[0]["object"]
    assert table["kind"] == "Table"
    assert [c["name"] for c in table["columnDefinitions"]][:2] == ["Name", "URL"]
    assert table["rows"][0]["cells"][:2] == ["digits", "http://127.0.0.1:9"]


def test_the_kubeconfig_has_a_modelfn_dev_context_with_its_namespace(
        server: ApiServer, tmp_path: Path, custom: client.CustomObjectsApi) -> None:
    path = tmp_path / "nested" / "kubeconfig"
    server.write_kubeconfig(path, namespace="ml")
    config = yaml.safe_load(path.read_text())
    assert config["current-context"] == "modelfn-dev"
    assert config["contexts"][0]["context"]["namespace"] == "ml"
    assert config["clusters"][0]["cluster"]["server"] == server.url
    if KUBECTL is not None:  # kubectl works in the context's namespace
        done = subprocess.run([KUBECTL, "apply", "-f", "-"], input=MANIFEST.format(max_scale=1),
                              env={**os.environ, "KUBECONFIG": str(path)}, capture_output=True,
                              text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        assert custom.get_namespaced_custom_object(G, V, "ml", P, "digits")


def test_a_watch_from_a_forgotten_version_ends_with_an_error_event(
        kubeconfig: Path, store: ServiceStore) -> None:
    created = store.create(NS, service("digits"))
    for generation in range(1100):  # more writes than the store keeps for watches
        store.set_status(NS, "digits", {"observedGeneration": generation})
    with raw_client(kubeconfig) as http:
        response = http.get(f"/apis/{G}/{V}/namespaces/{NS}/{P}",
                            params={"watch": "true",
                                    "resourceVersion": str(int(created["metadata"][
                                        "resourceVersion"]) + 1)})
    assert response.status_code == 200
    (event,) = [json.loads(line) for line in response.text.splitlines()]
    assert event["type"] == "ERROR"
    assert event["object"]["code"] == 410 and event["object"]["reason"] == "Expired"


def named_service(revision: str, value: str, **spec: Any) -> dict[str, Any]:
    body = service("digits", **spec)
    body["spec"]["template"]["metadata"] = {"name": revision}
    body["spec"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "MODEL", "value": value}]
    return body


def test_a_template_that_keeps_its_name_cannot_change(custom: client.CustomObjectsApi,
                                                      store: ServiceStore) -> None:
    custom.create_namespaced_custom_object(G, V, NS, P, named_service("digits-v2", "digits:2"))
    changed = named_service("digits-v2", "digits:3")
    with pytest.raises(client.ApiException) as info:
        custom.patch_namespaced_custom_object(G, V, NS, P, "digits", {"spec": changed["spec"]})
    body = status_of(info.value)
    assert info.value.status == 422 and body["reason"] == "Invalid"
    assert body["details"]["causes"][0]["field"] == "spec.template.metadata.name"
    assert "Saw the following changes without a name change (-old +new)" in body["message"]
    assert 'spec.containers[0].env[0].value: -"digits:2" +"digits:3"' in body["message"]
    stored = store.get(NS, "digits")
    assert stored["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"] == "digits:2"
    assert stored["metadata"]["generation"] == 1
    stored["spec"]["template"]["spec"]["containers"][0]["image"] = "modelfn-digits:other"
    with pytest.raises(client.ApiException) as info:  # a replace is checked the same way
        custom.replace_namespaced_custom_object(G, V, NS, P, "digits", stored)
    assert info.value.status == 422

    # traffic only keeps the template: allowed; so is a template with a new name
    split = [{"revisionName": "digits-v2", "percent": 100, "tag": "v2"}]
    moved = custom.patch_namespaced_custom_object(G, V, NS, P, "digits",
                                                  {"spec": {"traffic": split}})
    assert moved["spec"]["traffic"] == split and moved["metadata"]["generation"] == 2
    renamed = named_service("digits-v3", "digits:3")["spec"]["template"]
    done = custom.patch_namespaced_custom_object(G, V, NS, P, "digits",
                                                 {"spec": {"template": renamed}})
    assert done["spec"]["template"]["metadata"]["name"] == "digits-v3"


def test_a_revision_already_made_under_a_name_keeps_its_template(
        custom: client.CustomObjectsApi, store: ServiceStore) -> None:
    made = named_service("digits-v1", "digits:1")
    made["spec"]["template"]["spec"]["containerConcurrency"] = 0
    made["spec"]["template"]["spec"]["timeoutSeconds"] = 300
    made["spec"]["template"]["spec"]["containers"][0]["name"] = "user-container"
    revisions = {(NS, "digits-v1"): ("digits", made["spec"]["template"])}
    store.know_revisions(lambda ns, name: revisions.get((ns, name)))
    custom.create_namespaced_custom_object(G, V, NS, P, named_service("digits-v2", "digits:2"))
    back = named_service("digits-v1", "digits:9")  # the old name again, other content
    with pytest.raises(client.ApiException) as info:
        custom.patch_namespaced_custom_object(G, V, NS, P, "digits", {"spec": back["spec"]})
    assert info.value.status == 422
    assert 'env[0].value: -"digits:1" +"digits:9"' in status_of(info.value)["message"]
    same = named_service("digits-v1", "digits:1")  # the same content is that revision again
    custom.patch_namespaced_custom_object(G, V, NS, P, "digits", {"spec": same["spec"]})
    revisions[(NS, "other-x")] = ("other", made["spec"]["template"])
    with pytest.raises(client.ApiException) as info:
        custom.create_namespaced_custom_object(G, V, NS, P, {
            **service("other"), "spec": named_service("other-x", "digits:1")["spec"]})
    assert info.value.status == 422


@pytest.mark.parametrize("concurrency", [-1, 1001])
def test_container_concurrency_is_between_0_and_1000(custom: client.CustomObjectsApi,
                                                     concurrency: int) -> None:
    body = service("digits")
    body["spec"]["template"]["spec"]["containerConcurrency"] = concurrency
    with pytest.raises(client.ApiException) as info:
        custom.create_namespaced_custom_object(G, V, NS, P, body)
    status = status_of(info.value)
    assert info.value.status == 422 and status["reason"] == "Invalid"
    assert status["details"]["causes"][0]["field"] == "spec.template.spec.containerConcurrency"
    assert f"expected 0 <= {concurrency} <= 1000" in status["message"]
    body["spec"]["template"]["spec"]["containerConcurrency"] = 1000
    custom.create_namespaced_custom_object(G, V, NS, P, body)
    with pytest.raises(client.ApiException) as info:
        custom.patch_namespaced_custom_object(G, V, NS, P, "digits", {
            "spec": {"template": {"spec": {"containerConcurrency": concurrency}}}})
    assert info.value.status == 422


@needs_kubectl
def test_kubectl_patch_of_a_named_template_is_refused(kubeconfig: Path,
                                                      custom: client.CustomObjectsApi) -> None:
    custom.create_namespaced_custom_object(G, V, NS, P, named_service("digits-v2", "digits:2"))
    done = kubectl(kubeconfig, "patch", "ksvc", "digits", "--type", "json", "-p",
                   '[{"op":"replace","path":"/spec/template/spec/containers/0/env/0/value",'
                   '"value":"digits:3"}]', check=False)
    assert done.returncode != 0
    assert "Saw the following changes without a name change" in done.stderr
    kubectl(kubeconfig, "patch", "ksvc", "digits", "--type", "merge", "-p",
            '{"spec":{"traffic":[{"revisionName":"digits-v2","percent":100,"tag":"v2"}]}}')
    obj = custom.get_namespaced_custom_object(G, V, NS, P, "digits")
    assert obj["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"] == "digits:2"
