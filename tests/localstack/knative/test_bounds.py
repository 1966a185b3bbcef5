"""Knative's bounds on a template's numbers, as the local API admits Services: a value out
of range is a 422 naming the annotation (or field) and the range, through the official
``kubernetes`` client, and the API keeps serving. A min-scale of 10^20 used to be
admitted, and its revision then started instances without end."""

from __future__ import annotations

import json
from typing import Any

import pytest
from knative_support import NS, G, P, V, service
from kubernetes import client

from modelfn.platforms import knative as kn

BIG = "100000000000000000000"
ANNOTATIONS = "spec.template.metadata.annotations"


def with_annotations(name: str, **annotations: str) -> dict[str, Any]:
    body = service(name)
    body["spec"]["template"]["metadata"] = {"annotations": annotations}
    return body


def refused(custom: client.CustomObjectsApi, body: dict[str, Any]) -> dict[str, Any]:
    with pytest.raises(client.ApiException) as info:
        custom.create_namespaced_custom_object(G, V, NS, P, body)
    assert info.value.status == 422, info.value.body
    status: dict[str, Any] = json.loads(info.value.body)
    assert status["reason"] == "Invalid" and "\n" not in status["message"]
    return status


@pytest.mark.parametrize(("annotation", "value", "message"), [
    (kn.MIN_SCALE, BIG, f"expected 0 <= {BIG} <= 2147483647"),
    (kn.MAX_SCALE, BIG, f"expected 0 <= {BIG} <= 2147483647"),
    (kn.MIN_SCALE_CAMEL, "2147483648", "expected 0 <= 2147483648 <= 2147483647"),
    (kn.MIN_SCALE, "-1", "expected 0 <= -1 <= 2147483647"),
    (kn.MIN_SCALE, "1.5", "invalid value: 1.5"),
    (kn.INITIAL_SCALE, BIG, f"expected 0 <= {BIG} <= 2147483647"),
    (kn.INITIAL_SCALE, "0", "initial-scale=0 not allowed by cluster"),
    (kn.TARGET, "0.001", "target 0.001 should be at least 0.01"),
    (kn.TARGET, "inf", "invalid value: inf"),
    (kn.TARGET, "nan", "invalid value: nan"),
    (kn.TARGET_UTILIZATION, "0.5", "expected 1 <= 0.5 <= 100"),
    (kn.TARGET_UTILIZATION, "101", "expected 1 <= 101 <= 100"),
    (kn.WINDOW, "5s", "expected 6s <= 5s <= 1h0m0s"),
    (kn.WINDOW, "2h", "expected 6s <= 2h <= 1h0m0s"),
    (kn.WINDOW, "6500ms", "at most second precision"),
    (kn.PANIC_WINDOW_PERCENTAGE, "0", "expected 1 <= 0 <= 100"),
    (kn.PANIC_THRESHOLD_PERCENTAGE, "100", "expected 110 <= 100 <= 1000"),
    (kn.PANIC_THRESHOLD_PERCENTAGE, "1001", "expected 110 <= 1001 <= 1000"),
    (kn.SCALE_DOWN_DELAY, "61m", "expected 0s <= 61m <= 1h0m0s"),
    (kn.RETENTION, "2h", "expected 0s <= 2h <= 1h0m0s"),
    (kn.TARGET_BURST_CAPACITY, "-2", "invalid value: -2"),
    (kn.PROGRESS_DEADLINE, "0s", "expected 1s <= 0s <="),
])
def test_an_annotation_out_of_range_is_refused_naming_it_and_the_range(
        custom: client.CustomObjectsApi, annotation: str, value: str, message: str) -> None:
    status = refused(custom, with_annotations("digits", **{annotation: value}))
    field = f"{ANNOTATIONS}.{annotation}"
    assert f"{field}: " in status["message"] and message in status["message"]
    assert [c["field"] for c in status["details"]["causes"]] == [field]
    assert custom.list_namespaced_custom_object(G, V, NS, P)["items"] == []


def test_max_scale_below_min_scale_is_refused(custom: client.CustomObjectsApi) -> None:
    status = refused(custom, with_annotations("digits", **{kn.MIN_SCALE: "5",
                                                          kn.MAX_SCALE: "2"}))
    assert "max-scale=2 is less than min-scale=5" in status["message"]


@pytest.mark.parametrize(("field", "value", "message"), [
    ("containerConcurrency", 1001, "expected 0 <= 1001 <= 1000"),
    ("containerConcurrency", -1, "expected 0 <= -1 <= 1000"),
    ("containerConcurrency", 2**31, "expected 0 <= 2147483648 <= 1000"),
    ("timeoutSeconds", 601, "expected 0 <= 601 <= 600"),
    ("timeoutSeconds", -5, "expected 0 <= -5 <= 600"),
])
def test_a_spec_number_out_of_range_is_refused(custom: client.CustomObjectsApi, field: str,
                                               value: int, message: str) -> None:
    body = service("digits")
    body["spec"]["template"]["spec"][field] = value
    status = refused(custom, body)
    assert f"spec.template.spec.{field}: {message}" in status["message"]


def test_the_bounds_themselves_are_admitted(custom: client.CustomObjectsApi) -> None:
    body = with_annotations("digits", **{
        kn.MIN_SCALE: "0", kn.MAX_SCALE: "2147483647", kn.INITIAL_SCALE: "1",
        kn.TARGET: "0.01", kn.TARGET_UTILIZATION: "100", kn.WINDOW: "1h",
        kn.PANIC_WINDOW_PERCENTAGE: "1", kn.PANIC_THRESHOLD_PERCENTAGE: "1000",
        kn.SCALE_DOWN_DELAY: "0s", kn.RETENTION: "1h", kn.TARGET_BURST_CAPACITY: "-1"})
    body["spec"]["template"]["spec"].update(containerConcurrency=1000, timeoutSeconds=0)
    made = custom.create_namespaced_custom_object(G, V, NS, P, body)
    assert made["spec"]["template"]["spec"]["timeoutSeconds"] == 300  # 0 is the default
