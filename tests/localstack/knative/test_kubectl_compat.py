"""What ``kubectl`` and the ``kubernetes`` client need beyond create/get/patch: selectors
in Kubernetes' full grammar, discovery ``kubectl api-resources`` accepts, the CRD's short
names, a complete ``/version`` and the reason a JSON patch cannot apply."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
from knative_support import NS, G, P, V, kube_client, kubectl, needs_kubectl, service
from kubernetes import client

from modelfn.platforms.knative_schema import crd

if TYPE_CHECKING:
    from pathlib import Path

    from modelfn.localstack.knative import ServiceStore





def labelled(store: ServiceStore) -> None:
    """``qa`` (team=qa, tier=1), ``ops`` (team=ops, tier=3) and ``bare`` (no labels)."""
    for name, labels in (("qa", {"team": "qa", "tier": "1"}),
                         ("ops", {"team": "ops", "tier": "3"}), ("bare", {})):
        body = service(name)
        if labels:
            body["metadata"]["labels"] = labels
        store.create(NS, body)


SELECTED = [
    ("team=qa", ["qa"]),
    ("team==qa", ["qa"]),
    ("team!=ops", ["bare", "qa"]),  # != matches an object without the label, as in k8s
    ("team in (qa)", ["qa"]),
    ("team in (qa, ops)", ["ops", "qa"]),
    ("team notin (ops)", ["bare", "qa"]),
    ("team", ["ops", "qa"]),
    ("!team", ["bare"]),
    ("!other", ["bare", "ops", "qa"]),
    ("team in (qa,ops),tier notin (1)", ["ops"]),
    ("team,tier!=3", ["qa"]),
    ("tier>2", ["ops"]),
    ("tier<2", ["qa"]),
]


def names(out: str) -> list[str]:
    return sorted(line.rsplit("/", 1)[-1] for line in out.split())


@needs_kubectl
def test_kubectl_label_selectors_follow_the_kubernetes_grammar(
        kubeconfig: Path, store: ServiceStore) -> None:
    labelled(store)
    for selector, expected in SELECTED:
        done = kubectl(kubeconfig, "get", "ksvc", "-l", selector, "-o", "name")
        assert names(done.stdout) == expected, selector
    done = kubectl(kubeconfig, "get", "ksvc", "--field-selector", "metadata.name!=qa",
                   "-o", "name")
    assert names(done.stdout) == ["bare", "ops"]
    done = kubectl(kubeconfig, "get", "ksvc", "--field-selector",
                   "metadata.name!=qa,metadata.namespace==default", "-o", "name")
    assert names(done.stdout) == ["bare", "ops"]
    done = kubectl(kubeconfig, "get", "ksvc", "-l", "team in (qa", check=False)
    assert done.returncode != 0 and "BadRequest" in done.stderr
    assert "unable to parse requirement" in done.stderr


@pytest.mark.parametrize(("fields", "labels", "says"), [
    ("", "team in (qa", "expected ',' or ')'"),
    ("", "team in ()", "cannot be empty"),
    ("", "team=qa,", "expected '!' or a label key"),
    ("", "team qa", "found 'qa' after 'team'"),
    ("", "-team", "is not a label key"),
    ("", "tier>high", "must be an integer"),
    ("metadata.name", "", "is not field=value"),
    ("spec.template=x", "", "field label not supported"),
])
def test_a_selector_that_does_not_parse_is_a_400(kubeconfig: Path, store: ServiceStore,
                                                 fields: str, labels: str, says: str) -> None:
    labelled(store)
    with kube_client(kubeconfig) as api_client:
        custom = client.CustomObjectsApi(api_client)
        with pytest.raises(client.ApiException) as info:
            custom.list_namespaced_custom_object(G, V, NS, P, field_selector=fields,
                                                 label_selector=labels)
    body: dict[str, Any] = json.loads(info.value.body)
    assert info.value.status == 400 and body["reason"] == "BadRequest"
    assert says in body["message"]


def test_the_client_lists_with_set_based_selectors(kubeconfig: Path,
                                                   store: ServiceStore) -> None:
    labelled(store)
    with kube_client(kubeconfig) as api_client:
        custom = client.CustomObjectsApi(api_client)
        for selector, expected in SELECTED:
            listed = custom.list_namespaced_custom_object(G, V, NS, P,
                                                          label_selector=selector)
            assert sorted(o["metadata"]["name"] for o in listed["items"]) == expected
        listed = custom.list_cluster_custom_object(G, V, P,
                                                   field_selector="metadata.name!=bare")
        assert sorted(o["metadata"]["name"] for o in listed["items"]) == ["ops", "qa"]


@needs_kubectl
def test_kubectl_api_resources_lists_services_with_the_crds_short_names(
        kubeconfig: Path, store: ServiceStore) -> None:
    done = kubectl(kubeconfig, "api-resources", check=False)
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines()[1:]]
    assert ["services", "kservice,ksvc", f"{G}/{V}", "true", "Service"] in rows
    store.create(NS, service("digits"))
    short_names = crd()["spec"]["names"]["shortNames"]
    assert sorted(short_names) == ["kservice", "ksvc"]
    for short in short_names:
        assert names(kubectl(kubeconfig, "get", short, "-o", "name").stdout) == ["digits"]


def test_the_clients_version_api_reads_version(kubeconfig: Path) -> None:
    with kube_client(kubeconfig) as api_client:
        info = client.VersionApi(api_client).get_code()
    assert info.major == "1" and info.git_version.startswith("v1.")
    assert info.build_date and info.git_commit and info.git_tree_state and info.platform


@needs_kubectl
def test_kubectl_shows_why_a_json_patch_cannot_apply(kubeconfig: Path,
                                                     store: ServiceStore) -> None:
    store.create(NS, service("digits"))
    done = kubectl(kubeconfig, "patch", "ksvc", "digits", "--type", "json", "-p",
                   '[{"op":"replace","path":"/spec/nope/x","value":1}]', check=False)
    assert done.returncode != 0
    assert 'The Service "digits" is invalid' in done.stderr
    assert "spec.nope.x" in done.stderr and "'/spec/nope/x' does not exist" in done.stderr
    done = kubectl(kubeconfig, "patch", "ksvc", "digits", "--type", "json", "-p",
                   '[{"op":"test","path":"/metadata/name","value":"other"}]', check=False)
    assert done.returncode != 0
    assert 'The Service "digits" is invalid' in done.stderr
    assert "test failed" in done.stderr and '"other"' in done.stderr
    assert store.get(NS, "digits")["metadata"]["generation"] == 1


def test_a_json_patch_that_cannot_apply_is_a_422_naming_the_service(
        kubeconfig: Path, store: ServiceStore) -> None:
    store.create(NS, service("digits"))
    with kube_client(kubeconfig) as api_client:
        with pytest.raises(client.ApiException) as info:
            api_client.call_api(
                f"/apis/{G}/{V}/namespaces/{NS}/{P}/digits", "PATCH",
                header_params={"Content-Type": "application/json-patch+json",
                               "Accept": "application/json"},
                body=[{"op": "remove", "path": "/spec/template/spec/containers/3"}],
                auth_settings=["BearerToken"], _preload_content=False)
    body = json.loads(info.value.body)
    assert info.value.status == 422 and body["reason"] == "Invalid"
    assert body["details"]["name"] == "digits" and body["details"]["kind"] == "Service"
    cause = body["details"]["causes"][0]
    assert cause["field"] == "spec.template.spec.containers[3]"
    assert "does not exist" in cause["message"]
    assert body["message"].startswith(f'Service.{G} "digits" is invalid: ')


@needs_kubectl
def test_kubectl_names_the_kind_of_an_invalid_service(kubeconfig: Path,
                                                      store: ServiceStore) -> None:
    store.create(NS, service("digits"))
    done = kubectl(kubeconfig, "patch", "ksvc", "digits", "--type", "merge", "-p",
                   '{"spec":{"template":{"spec":{"containerConcurrency":-1}}}}', check=False)
    assert done.returncode != 0
    assert 'The Service "digits" is invalid' in done.stderr, done.stderr
    assert "spec.template.spec.containerConcurrency" in done.stderr


def _openapi_document(kubeconfig: Path) -> dict[str, Any]:
    """The group version's OpenAPI v3 document, found as kubectl finds it."""
    with kube_client(kubeconfig) as api_client:
        def get(path: str) -> dict[str, Any]:
            response = api_client.call_api(path, "GET", auth_settings=["BearerToken"],
                                           _preload_content=False)
            loaded: dict[str, Any] = json.loads(response.data)
            return loaded

        paths = get("/openapi/v3")["paths"]
        return get(paths[f"apis/{G}/{V}"]["serverRelativeURL"])


def test_openapi_v3_publishes_the_crds_schema_as_the_services_definition(
        kubeconfig: Path) -> None:
    document = _openapi_document(kubeconfig)
    schemas = document["components"]["schemas"]
    definition = schemas["dev.knative.serving.v1.Service"]
    assert definition["x-kubernetes-group-version-kind"] == [
        {"group": G, "version": V, "kind": "Service"}]
    crd_schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert definition["description"] == crd_schema["description"]
    assert definition["properties"]["spec"] == crd_schema["properties"]["spec"]
    # metadata is ObjectMeta, as the API server fills it in for a custom resource
    ref = definition["properties"]["metadata"]["allOf"][0]["$ref"]
    assert ref.removeprefix("#/components/schemas/") in schemas
    # the CRD's own schema (which validates every object) is left as shipped
    assert crd_schema["properties"]["metadata"] == {"type": "object"}
    assert "x-kubernetes-group-version-kind" not in crd_schema
    # no PATCH takes a strategic merge patch, so kubectl apply sends a JSON merge patch
    for item in document["paths"].values():
        if "patch" in item:
            content = item["patch"]["requestBody"]["content"]
            assert "application/strategic-merge-patch+json" not in content


@needs_kubectl
def test_kubectl_explain_describes_the_service_from_the_crd(kubeconfig: Path) -> None:
    done = kubectl(kubeconfig, "explain", "ksvc")
    assert "KIND:       Service" in done.stdout and f"GROUP:      {G}" in done.stdout
    assert "Service acts as a top-level container" in done.stdout
    assert "spec\t<Object>" in done.stdout and "status\t<Object>" in done.stdout
    done = kubectl(kubeconfig, "explain", "ksvc.spec.template")
    assert "FIELD: template <Object>" in done.stdout
    assert "Template holds the latest specification for the Revision" in done.stdout
    done = kubectl(kubeconfig, "explain", "ksvc.metadata")
    assert "FIELD: metadata <ObjectMeta>" in done.stdout
    assert "labels\t<map[string]string>" in done.stdout


@needs_kubectl
def test_kubectl_explain_shows_nested_fields(kubeconfig: Path) -> None:
    done = kubectl(kubeconfig, "explain", "ksvc.spec.traffic")
    assert "FIELD: traffic <[]Object>" in done.stdout
    assert "percent\t<integer>" in done.stdout
    assert "Percent indicates that percentage based routing" in done.stdout
    done = kubectl(kubeconfig, "explain", "ksvc.spec.traffic.percent")
    assert "FIELD: percent <integer>" in done.stdout
    done = kubectl(kubeconfig, "explain", "ksvc", "--recursive")
    assert "containerConcurrency\t<integer>" in done.stdout


@needs_kubectl
def test_kubectl_explain_of_an_unknown_field_is_kubectls_error(kubeconfig: Path) -> None:
    done = kubectl(kubeconfig, "explain", "ksvc.spec.nope", check=False)
    assert done.returncode == 1
    assert 'error: field "nope" does not exist' in done.stderr, done.stderr
    assert "template" not in done.stderr and "panic" not in done.stderr


@needs_kubectl
def test_kubectl_apply_still_merge_patches_and_validates_on_the_server(
        kubeconfig: Path, store: ServiceStore, tmp_path: Path) -> None:
    manifest = tmp_path / "digits.json"
    body = service("digits")
    body["metadata"]["labels"] = {"team": "qa"}
    manifest.write_text(json.dumps(body))
    kubectl(kubeconfig, "apply", "-f", str(manifest))
    body["metadata"]["labels"] = {"tier": "1"}
    manifest.write_text(json.dumps(body))
    done = kubectl(kubeconfig, "apply", "-f", str(manifest), "-v=8")
    assert "Content-Type: application/merge-patch+json" in done.stderr
    assert store.get(NS, "digits")["metadata"]["labels"] == {"tier": "1"}
    body["spec"]["bogus"] = 1
    manifest.write_text(json.dumps(body))
    done = kubectl(kubeconfig, "apply", "-f", str(manifest), check=False)
    assert done.returncode != 0 and 'unknown field "spec.bogus"' in done.stderr
