"""Who may call the gateway from a browser: no origin unless allowed. A real gateway in
front of real digits functions; httpx plays the browser (it sends what a page's fetch
sends: ``Origin``, a ``text/plain`` body, a preflight)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from functions import Function, GatewayProcess, digits_routes, start_gateway

from modelfn.model_store.routes import RouteSource

REQUEST = json.loads((Path(__file__).resolve().parents[2] / "examples" / "requests"
                      / "digits.json").read_text())
INFER = "/v2/models/digits/infer"
EVIL = "https://evil.example"
APP = "https://app.example.com"


def test_a_cross_site_text_plain_post_is_refused(gateway: GatewayProcess) -> None:
    """What any page can make a browser send without a preflight: refused before any
    function sees it, with one line saying why; the gateway keeps serving."""
    answer = httpx.post(gateway.url + INFER, content=json.dumps(REQUEST),
                        headers={"content-type": "text/plain", "origin": EVIL})
    assert answer.status_code == 403, answer.text[:300]
    assert EVIL in answer.json()["error"] and "--allow-origin" in answer.json()["error"]
    assert "access-control-allow-origin" not in answer.headers
    assert httpx.post(gateway.url + INFER, json=REQUEST).status_code == 200  # no Origin


def test_a_preflight_from_an_origin_not_allowed_is_refused(gateway: GatewayProcess) -> None:
    answer = httpx.options(gateway.url + INFER, headers={
        "origin": EVIL, "access-control-request-method": "POST",
        "access-control-request-headers": "content-type"})
    assert answer.status_code == 403
    assert not any(h.startswith("access-control-") for h in answer.headers)


def test_an_allowed_origin_gets_its_preflight_and_its_answers(
        functions: dict[int, Function], routes_dir: Path) -> None:
    RouteSource(directory=routes_dir).write(digits_routes(functions, {1: 100}))
    gw = start_gateway(routes_dir, "--allow-origin", APP)
    try:
        preflight = httpx.options(gw.url + INFER, headers={
            "origin": APP, "access-control-request-method": "POST",
            "access-control-request-headers": "content-type, authorization"})
        assert preflight.status_code == 204
        assert preflight.headers["access-control-allow-origin"] == APP  # never *
        assert "POST" in preflight.headers["access-control-allow-methods"]
        assert "authorization" in preflight.headers["access-control-allow-headers"]
        assert preflight.headers["vary"] == "Origin"
        answer = httpx.post(gw.url + INFER, json=REQUEST, headers={"origin": APP})
        assert answer.status_code == 200
        assert answer.headers["access-control-allow-origin"] == APP
        other = httpx.post(gw.url + INFER, json=REQUEST, headers={"origin": EVIL})
        assert other.status_code == 403
    finally:
        gw.process.stop()


def test_an_unauthenticated_gateway_beyond_loopback_warns(
        functions: dict[int, Function], routes_dir: Path) -> None:
    RouteSource(directory=routes_dir).write(digits_routes(functions, {1: 100}))
    exposed = start_gateway(routes_dir, "--host", "0.0.0.0")
    try:
        assert "WITHOUT API keys" in exposed.process.tail()
    finally:
        exposed.process.stop()
    local = start_gateway(routes_dir)
    try:
        assert "WITHOUT API keys" not in local.process.tail()
    finally:
        local.process.stop()
