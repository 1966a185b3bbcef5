"""The patch formats: JSON merge patch (RFC 7386) and JSON patch (RFC 6902)."""

from __future__ import annotations

from typing import Any

import pytest

from modelfn.localstack.knative.errors import MalformedRequest
from modelfn.localstack.knative.patches import PatchFailed, json_patch, merge_patch


@pytest.mark.parametrize(("target", "patch", "result"), [  # RFC 7386's examples
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
])
def test_merge_patch_follows_rfc_7386(target: object, patch: object, result: object) -> None:
    assert merge_patch(target, patch) == result


def test_json_patch_applies_its_operations_in_order() -> None:
    doc: dict[str, Any] = {"spec": {"a": 1, "list": [1, 2]}, "x/y": {"~": 0}}
    out = json_patch(doc, [
        {"op": "replace", "path": "/spec/a", "value": 2},
        {"op": "add", "path": "/spec/list/-", "value": 3},
        {"op": "add", "path": "/spec/list/0", "value": 0},
        {"op": "remove", "path": "/spec/list/1"},
        {"op": "copy", "from": "/spec/a", "path": "/spec/b"},
        {"op": "move", "from": "/x~1y/~0", "path": "/spec/c"},
        {"op": "test", "path": "/spec/list", "value": [0, 2, 3]},
    ])
    assert out == {"spec": {"a": 2, "list": [0, 2, 3], "b": 2, "c": 0}, "x/y": {}}
    assert doc["spec"]["a"] == 1  # the input is left alone


@pytest.mark.parametrize(("operations", "error"), [
    ([{"op": "test", "path": "/a", "value": 2}], PatchFailed),
    ([{"op": "remove", "path": "/missing/deeper"}], PatchFailed),
    ([{"op": "replace", "path": "/nope", "value": 1}], PatchFailed),
    ([{"op": "frobnicate", "path": "/a"}], MalformedRequest),
    ([{"op": "add", "path": "a", "value": 1}], MalformedRequest),
    ({"op": "add"}, MalformedRequest),
])
def test_a_json_patch_that_cannot_apply_is_refused(operations: Any, error: type) -> None:
    with pytest.raises(error):
        json_patch({"a": 1}, operations)
