"""The ``--dry-run`` recorder: reads reach the client, changes are recorded by name."""

from __future__ import annotations

from typing import Any

import pytest

from modelfn.deploy.recorder import CallRecorder


def test_positional_arguments_are_named_as_the_real_client_names_them() -> None:
    from kubernetes import client

    recorder = CallRecorder(client.CustomObjectsApi())  # never reached: changes are recorded
    assert recorder.patch_namespaced_custom_object(
        "serving.knative.dev", "v1", "default", "services", "digits",
        {"spec": {"traffic": []}}) == {}
    recorder.delete_namespaced_custom_object("serving.knative.dev", "v1", "default",
                                             "services", "digits", grace_period_seconds=0)
    assert recorder.calls == [
        {"call": "patch_namespaced_custom_object",
         "params": {"group": "serving.knative.dev", "version": "v1", "namespace": "default",
                    "plural": "services", "name": "digits", "body": {"spec": {"traffic": []}}}},
        {"call": "delete_namespaced_custom_object",
         "params": {"group": "serving.knative.dev", "version": "v1", "namespace": "default",
                    "plural": "services", "name": "digits", "grace_period_seconds": 0}}]


class _Platform:
    def __init__(self) -> None:
        self.changed: list[str] = []

    def get_alias(self, **params: Any) -> dict[str, Any]:
        return {"FunctionVersion": "3", **params}

    def list_aliases(self, **params: Any) -> dict[str, Any]:
        return {"Aliases": []}

    def update_alias(self, **params: Any) -> dict[str, Any]:
        self.changed.append("update_alias")
        return {}


def test_reads_go_through_changes_are_answered_and_waiters_return_at_once() -> None:
    platform = _Platform()
    recorder = CallRecorder(platform, lambda method, params: {"Recorded": params["Name"]})
    assert recorder.get_alias(FunctionName="f", Name="live")["FunctionVersion"] == "3"
    assert recorder.list_aliases(FunctionName="f") == {"Aliases": []}
    assert recorder.update_alias(FunctionName="f", Name="live") == {"Recorded": "live"}
    recorder.get_waiter("function_updated_v2").wait(FunctionName="f")
    assert platform.changed == []
    assert recorder.calls == [{"call": "update_alias",
                               "params": {"FunctionName": "f", "Name": "live"}}]


def test_a_method_the_client_does_not_have_is_an_attribute_error() -> None:
    recorder = CallRecorder(_Platform())
    with pytest.raises(AttributeError):
        recorder.delete_everything(FunctionName="f")
    assert recorder.calls == []
