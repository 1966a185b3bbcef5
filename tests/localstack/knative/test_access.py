"""Who may call the local Knative API, and what it reads: the kubeconfig's bearer token,
the Kubernetes API's content types, no browsers. A hostile client is plain HTTP."""

from __future__ import annotations

import json
import stat
from typing import TYPE_CHECKING

import httpx
import pytest
import yaml
from knative_support import NS, G, P, V, raw_client, service, token_of

from modelfn.localstack.knative import ApiServer, ServiceStore

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

BASE = f"/apis/{G}/{V}/namespaces/{NS}/{P}"


@pytest.fixture
def http(kubeconfig: Path) -> Iterator[httpx.Client]:
    with raw_client(kubeconfig) as client:
        yield client


def test_a_request_without_the_kubeconfigs_token_is_unauthorized(
        server: ApiServer, kubeconfig: Path, http: httpx.Client) -> None:
    token = token_of(kubeconfig)
    wrong = [{}, {"authorization": "Bearer modelfn-dev"},
             {"authorization": f"Bearer {token}x"}, {"authorization": f"Bearer {token[:-1]}"},
             {"authorization": f"Basic {token}"}, {"authorization": token}]
    with httpx.Client(base_url=server.url, timeout=10, verify=False) as anyone:
        for headers in wrong:
            created = anyone.post(BASE, json=service("evil"), headers=headers)
            assert created.status_code == 401, headers
            assert created.json()["kind"] == "Status"
            assert created.json()["reason"] == "Unauthorized"
            assert anyone.get(BASE, headers=headers).status_code == 401
            assert anyone.get("/apis", headers=headers).status_code == 401
    assert http.get(BASE).json()["items"] == []  # nothing was made; the token's holder is in
    assert http.post(BASE, json=service("digits")).status_code == 201


def test_each_server_has_its_own_token_in_a_private_kubeconfig(
        server: ApiServer, kubeconfig: Path) -> None:
    assert stat.S_IMODE(kubeconfig.stat().st_mode) == 0o600
    assert len(token_of(kubeconfig)) >= 32
    other = ApiServer(ServiceStore()).start()
    try:
        path = kubeconfig.with_name("other")
        path.write_text("world-readable before")
        path.chmod(0o644)
        other.write_kubeconfig(path)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert token_of(path) != token_of(kubeconfig)
        assert yaml.safe_load(path.read_text())["clusters"][0]["cluster"]["server"] == other.url
        mine = {"authorization": f"Bearer {token_of(kubeconfig)}"}
        with httpx.Client(verify=False, timeout=10) as http:  # a token opens its server only
            assert http.get(f"{other.url}{BASE}", headers=mine).status_code == 401
        with raw_client(path) as theirs:
            assert theirs.get(BASE).status_code == 200
    finally:
        other.stop()


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x", None])
def test_only_the_kubernetes_apis_content_types_are_read(http: httpx.Client,
                                                        content_type: str | None) -> None:
    body = json.dumps(service("digits")).encode()  # JSON, under another name
    headers = {} if content_type is None else {"content-type": content_type}
    created = http.post(BASE, content=body, headers=headers)
    assert created.status_code == 415, created.text
    assert created.json()["reason"] == "UnsupportedMediaType"
    assert "application/json" in created.json()["message"]
    assert http.get(BASE).json()["items"] == []
    made = http.post(BASE, content=yaml.safe_dump(service("digits")).encode(),
                     headers={"content-type": "application/yaml"})
    assert made.status_code == 201, made.text
    replaced = http.put(f"{BASE}/digits", content=b"{}", headers=headers)
    assert replaced.status_code == 415
    patched = http.patch(f"{BASE}/digits", content=b"{}", headers=headers)
    assert patched.status_code == 415


def test_a_browser_is_refused_even_with_the_token(http: httpx.Client) -> None:
    """A web page can make a browser send a request here; its Origin gives it away."""
    for origin in ("https://attacker.example", "null", "http://127.0.0.1:8080"):
        created = http.post(BASE, json=service("evil"), headers={"origin": origin})
        assert created.status_code == 403
        assert created.json()["reason"] == "Forbidden"
        assert "browser" in created.json()["message"]
        assert http.get(BASE, headers={"origin": origin}).status_code == 403
    assert http.get(BASE).json()["items"] == []
