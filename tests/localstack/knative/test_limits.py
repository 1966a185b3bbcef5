"""What one request may cost the local Knative API: its body's size, a YAML document's
aliases, an object's annotations. Each limit is the API server's own."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

import pytest
from knative_support import NS, G, P, V, raw_client, service
from kubernetes import client

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    import httpx

BASE = f"/apis/{G}/{V}/namespaces/{NS}/{P}"
MiB = 1024 * 1024
APPLY = {"content-type": "application/apply-patch+yaml"}


@pytest.fixture
def http(kubeconfig: Path) -> Iterator[httpx.Client]:
    with raw_client(kubeconfig) as raw:
        yield raw


def laughs(levels: int) -> str:
    """An applied Service whose args hold ``10**levels`` strings through nested aliases."""
    lines = ['l0: &l0 "lol"']
    for level in range(1, levels + 1):
        lines.append(f"l{level}: &l{level} [{', '.join([f'*l{level - 1}'] * 10)}]")
    anchors = "\n".join(f"  {line}" for line in lines)
    return (f"apiVersion: {G}/{V}\nkind: Service\nmetadata:\n  name: digits\n"
            f"  labels: {{}}\nx-anchors:\n{anchors}\n"
            f"spec:\n  template:\n    spec:\n      containers:\n      - image: x\n"
            f"        args: *l{levels}\n")


def test_nested_yaml_aliases_are_refused(http: httpx.Client,
                                         caplog: pytest.LogCaptureFixture) -> None:
    body = laughs(6)
    assert len(body) < 2048
    answer = http.patch(f"{BASE}/digits", content=body.encode(), headers=APPLY)
    assert answer.status_code == 400, answer.text[:300]
    assert answer.json()["reason"] == "BadRequest" and "alias" in answer.json()["message"]
    recursive = (f"apiVersion: {G}/{V}\nkind: Service\nmetadata: &m\n  name: digits\n"
                 "  labels: *m\n")
    answer = http.patch(f"{BASE}/digits", content=recursive.encode(), headers=APPLY)
    assert answer.status_code == 400 and "alias" in answer.json()["message"]
    answer = http.post(BASE, content=body.encode(), headers={"content-type": "application/yaml"})
    assert answer.status_code == 400
    assert http.get(BASE).json()["items"] == []
    # aliases a person writes, a few times over, are read as before
    made = http.patch(f"{BASE}/digits", content=laughs(1).encode(), headers=APPLY)
    assert made.status_code == 201, made.text
    assert made.json()["spec"]["template"]["spec"]["containers"][0]["args"] == ["lol"] * 10
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_body_over_3_mib_is_refused_before_it_is_read(http: httpx.Client) -> None:
    big = service("digits")
    big["metadata"]["labels"] = {"pad": "x"}
    big["spec"]["template"]["spec"]["containers"][0]["args"] = ["x" * 1024] * (4 * 1024)
    raw = json.dumps(big).encode()
    assert len(raw) > 4 * MiB
    answer = http.post(BASE, content=raw, headers={"content-type": "application/json"})
    assert answer.status_code == 413, answer.text[:300]
    assert answer.json()["kind"] == "Status"
    assert answer.json()["reason"] == "RequestEntityTooLarge"

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted while it streams
        for at in range(0, len(raw), 64 * 1024):
            yield raw[at:at + 64 * 1024]

    answer = http.post(BASE, content=chunks(), headers={"content-type": "application/json"})
    assert answer.status_code == 413, answer.text[:300]
    assert http.get(BASE).json()["items"] == []
    small = service("digits")
    small["spec"]["template"]["spec"]["containers"][0]["args"] = ["x" * 1024] * 1024
    assert http.post(BASE, json=small).status_code == 201  # 1 MiB is fine


def test_annotations_over_256_kib_are_invalid(custom: client.CustomObjectsApi) -> None:
    body = service("digits")
    body["metadata"]["annotations"] = {"a": "x" * (128 * 1024), "b": "y" * (128 * 1024)}
    with pytest.raises(client.ApiException) as info:
        custom.create_namespaced_custom_object(G, V, NS, P, body)
    status = json.loads(info.value.body)
    assert info.value.status == 422 and status["reason"] == "Invalid"
    assert status["details"]["causes"][0]["field"] == "metadata.annotations"
    assert "Too long: must have at most 262144 bytes" in status["message"]
    body["metadata"]["annotations"] = {"a": "x" * (128 * 1024)}
    custom.create_namespaced_custom_object(G, V, NS, P, body)
    with pytest.raises(client.ApiException) as info:
        custom.patch_namespaced_custom_object(G, V, NS, P, "digits", {
            "metadata": {"annotations": {"b": "y" * (128 * 1024)}}})
    assert info.value.status == 422
