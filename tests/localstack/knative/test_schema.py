"""Admission: the Knative CRD's schema (pruning, strict fields) and the webhook's checks."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
from knative_support import service

from modelfn.localstack.knative.errors import Invalid, MalformedRequest
from modelfn.localstack.knative.schema import admit
from modelfn.platforms.knative_schema import crd, version


def fields(exc: Invalid) -> list[str]:
    return [c.field for c in exc.causes]


def invalid(obj: dict[str, Any]) -> Invalid:
    obj["metadata"].setdefault("namespace", "default")
    with pytest.raises(Invalid) as info:
        admit(obj)
    assert info.value.status()["code"] == 422
    return info.value


def test_the_crd_is_knatives_with_its_licence() -> None:
    assert crd()["metadata"]["name"] == "services.serving.knative.dev"
    assert "ksvc" in crd()["spec"]["names"]["shortNames"]
    assert "openAPIV3Schema" in version()["schema"]


def test_a_valid_service_is_admitted_and_unknown_fields_are_pruned() -> None:
    obj = service("digits")
    obj["metadata"].update(namespace="default", bogus=1)
    obj["spec"]["bogus"] = {"x": 1}
    obj["spec"]["template"]["spec"]["containers"][0]["nonsense"] = True
    admitted = admit(copy.deepcopy(obj))
    assert "bogus" not in admitted["spec"] and "bogus" not in admitted["metadata"]
    assert admitted["spec"]["template"]["spec"]["containers"] == [
        {"image": "modelfn-digits:test", "name": "user-container"}]


def test_knatives_defaults_are_filled_in() -> None:
    spec = admit(service("digits"))["spec"]
    assert spec["traffic"] == [{"latestRevision": True, "percent": 100}]
    assert spec["template"]["spec"]["timeoutSeconds"] == 300
    assert spec["template"]["spec"]["containerConcurrency"] == 0
    split = [{"revisionName": "digits-a", "percent": 100}]
    obj = service("digits", traffic=split)
    obj["spec"]["template"]["spec"]["containers"][0]["name"] = "model"
    spec = admit(obj)["spec"]
    assert spec["traffic"] == split
    assert spec["template"]["spec"]["containers"][0]["name"] == "model"


def test_strict_field_validation_refuses_unknown_fields_with_their_paths() -> None:
    obj = service("digits")
    obj["spec"]["template"]["spec"]["containers"][0]["nonsense"] = True
    with pytest.raises(MalformedRequest, match=r'unknown field "spec.template.spec.containers\[0\]'
                                         r'.nonsense"'):
        admit(obj, strict=True)


def test_preserved_unknown_fields_are_kept() -> None:
    obj = service("digits")
    obj["spec"]["template"]["spec"]["affinity"] = {"nodeAffinity": {"anything": 1}}
    assert admit(obj, strict=True)["spec"]["template"]["spec"]["affinity"] == {
        "nodeAffinity": {"anything": 1}}


def test_int_or_string_fields_take_either() -> None:
    obj = service("digits")
    probe = {"httpGet": {"path": "/v2/health/ready", "port": 8080}}
    obj["spec"]["template"]["spec"]["containers"][0]["readinessProbe"] = probe
    admit(copy.deepcopy(obj))
    probe["httpGet"]["port"] = "http"
    admit(copy.deepcopy(obj))
    probe["httpGet"]["port"] = 1.5
    assert "containers[0].readinessProbe.httpGet.port" in fields(invalid(obj))[0]


def test_wrong_types_and_missing_fields_name_each_field() -> None:
    obj = service("digits")
    obj["spec"]["template"]["spec"]["containers"][0]["image"] = 3
    obj["spec"]["template"]["spec"]["containerConcurrency"] = "many"
    exc = invalid(obj)
    assert fields(exc) == ["spec.template.spec.containerConcurrency",
                           "spec.template.spec.containers[0].image"]
    assert "must be of type string" in exc.message
    assert exc.status()["details"]["causes"][1]["field"] == "spec.template.spec.containers[0].image"
    obj = service("digits")
    obj["spec"]["template"]["spec"]["containers"][0]["env"] = [{"value": "x"}]
    exc = invalid(obj)
    assert fields(exc) == ["spec.template.spec.containers[0].env[0].name"]
    assert exc.causes[0].reason == "FieldValueRequired"


@pytest.mark.parametrize(("change", "field"), [
    (lambda o: o["metadata"].update(name="Digits_1"), "metadata.name"),
    (lambda o: o["spec"]["template"].update(metadata={"name": "other-v2"}),
     "spec.template.metadata.name"),
    (lambda o: o["spec"]["template"].update(metadata={"name": "digits-v1-" + "a" * 60}),
     "spec.template.metadata.name"),
    (lambda o: o["spec"]["template"].update(metadata={"name": "digits-V1"}),
     "spec.template.metadata.name"),
    (lambda o: o["spec"].update(traffic=[{"latestRevision": True, "percent": 60}]),
     "spec.traffic"),
    (lambda o: o["spec"].update(traffic=[{"percent": 100}]), "spec.traffic[0].revisionName"),
    (lambda o: o["spec"].update(traffic=[{"latestRevision": True, "percent": 50, "tag": "a"},
                                         {"revisionName": "digits-1", "percent": 50, "tag": "a"}]),
     "spec.traffic[1].tag"),
    (lambda o: o["spec"]["template"].update(
        metadata={"annotations": {"autoscaling.knative.dev/max-scale": "lots"}}),
     "spec.template.metadata.annotations.autoscaling.knative.dev/max-scale"),
    (lambda o: o["spec"]["template"]["spec"]["containers"][0].update(
        resources={"limits": {"memory": "a lot"}}),
     "spec.template.spec.containers[0].resources.limits.memory"),
    (lambda o: o["spec"]["template"]["spec"]["containers"][0].update(
        env=[{"name": "PORT", "value": "1"}]),
     "spec.template.spec.containers[0].env[0].name"),
])
def test_knatives_webhook_checks_name_the_field(change: Any, field: str) -> None:
    obj = service("digits")
    change(obj)
    assert field in fields(invalid(obj))


def test_a_template_name_with_the_service_prefix_and_a_full_split_are_admitted() -> None:
    obj = service("digits", traffic=[
        {"revisionName": "digits-v1", "percent": 50, "tag": "one"},
        {"latestRevision": True, "percent": 50, "tag": "latest"}])
    obj["spec"]["template"]["metadata"] = {"name": "digits-v2"}
    admit(obj)


def test_an_object_of_another_kind_is_a_bad_request() -> None:
    obj = service("digits")
    obj["kind"] = "Deployment"
    with pytest.raises(MalformedRequest, match="not a Service"):
        admit(obj)


def test_a_clusters_limits_are_what_admission_checks() -> None:
    """A fresh Knative allows timeoutSeconds up to 600; Cloud Run (or a tuned cluster) more."""
    from modelfn.platforms import cloudrun

    obj = service("digits")
    obj["metadata"]["namespace"] = "default"
    obj["spec"]["template"]["spec"]["timeoutSeconds"] = 900
    assert "spec.template.spec.timeoutSeconds" in fields(invalid(copy.deepcopy(obj)))
    admitted = admit(copy.deepcopy(obj), defaults=cloudrun.DEFAULTS)
    assert admitted["spec"]["template"]["spec"]["timeoutSeconds"] == 900


@pytest.mark.parametrize(("field", "value", "message"), [
    ("labels", {"team": 1}, "cannot unmarshal number into Go struct field "
                            "ObjectMeta.metadata.labels of type string"),
    ("annotations", {"a": True}, "cannot unmarshal bool into Go struct field "
                                 "ObjectMeta.metadata.annotations of type string"),
    ("labels", ["a"], "cannot unmarshal array into Go struct field ObjectMeta.metadata.labels "
                      "of type map[string]string"),
])
def test_labels_and_annotations_that_are_not_strings_are_refused(
        field: str, value: Any, message: str) -> None:
    """A label stored as a number was found by no selector and dropped by kubectl label."""
    obj = service("hello")
    obj["metadata"][field] = value
    with pytest.raises(MalformedRequest, match=re.escape(message)):
        admit(obj)
    obj["metadata"][field] = {"team": "qa"}
    assert admit(obj)["metadata"][field] == {"team": "qa"}
