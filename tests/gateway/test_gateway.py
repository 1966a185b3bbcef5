"""The gateway end to end: real `modelfn serve` functions behind a real `modelfn gateway`,
driven by tritonclient and httpx."""

from __future__ import annotations

import json
import math
import threading
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import numpy as np
import pytest
import tritonclient.http as triton
from functions import Function, digits_repository, digits_routes, start_gateway
from raw_http import Raw

from modelfn.gateway.auth import hash_key
from modelfn.model_store.routes import RouteSource
from modelfn.process.supervisor import free_port
from modelfn.runtime.errors import JsonTooLarge

if TYPE_CHECKING:
    from functions import GatewayProcess

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "requests"
REQUEST = json.loads((EXAMPLES / "digits.json").read_text())
EXPECTED = json.loads((EXAMPLES / "digits_expected.json").read_text())["label"]
ROWS = np.array(REQUEST["inputs"][0]["data"], dtype=np.float32).reshape(4, 64)


def labels(body: dict[str, object]) -> list[int]:
    outputs = body["outputs"]
    assert isinstance(outputs, list)
    return next(o for o in outputs if o["name"] == "label")["data"]  # type: ignore[no-any-return]


def within(observed: int, n: int, p: float, sigmas: float = 4.5) -> bool:
    return abs(observed - n * p) <= sigmas * math.sqrt(n * p * (1 - p))


def test_tritonclient_json_and_binary_through_the_gateway(gateway: GatewayProcess) -> None:
    client = triton.InferenceServerClient(gateway.address)
    try:
        assert client.is_server_live()
        assert client.is_model_ready("digits", "1")
        for binary in (False, True):
            tensor = triton.InferInput("input", [4, 64], "FP32")
            tensor.set_data_from_numpy(ROWS, binary_data=binary)
            result = client.infer("digits", [tensor], model_version="2", outputs=[
                triton.InferRequestedOutput("label", binary_data=binary)])
            assert result.as_numpy("label").ravel().tolist() == EXPECTED
            assert result.get_response()["model_version"] == "2"
        metadata = client.get_model_metadata("digits", "1")
        assert metadata["name"] == "digits"
        server = client.get_server_metadata()  # the gateway's own, as over gRPC
        assert server["name"] == "modelfn-gateway"
        # every extension it serves, as the function's /v2 names them
        assert server["extensions"] == ["binary_tensor_data", "classification",
                                        "model_configuration", "model_repository",
                                        "schedule_policy", "statistics", "parameters"]
        assert {(m["name"], m["version"]) for m in client.get_model_repository_index()} >= {
            ("digits", "1"), ("digits", "2")}  # model_repository
        stats = client.get_inference_statistics()  # statistics, server-wide
        assert {s["name"] for s in stats["model_stats"]} >= {"digits"}
    finally:
        client.close()


def test_pinned_versions_go_to_their_function_and_unpinned_follow_the_split(
    gateway: GatewayProcess,
) -> None:
    with httpx.Client(base_url=gateway.url) as client:
        for version in ("1", "2"):
            answer = client.post(f"/v2/models/digits/versions/{version}/infer", json=REQUEST)
            assert answer.status_code == 200, answer.text
            assert answer.json()["model_version"] == version
            assert labels(answer.json()) == EXPECTED
        n = 400
        seen = Counter(client.post("/v2/models/digits/infer", json=REQUEST).json()["model_version"]
                       for _ in range(n))
    assert set(seen) == {"1", "2"}
    assert within(seen["1"], n, 0.7), seen


def test_unknown_models_and_versions_are_the_gateways_404(gateway: GatewayProcess) -> None:
    with httpx.Client(base_url=gateway.url) as client:
        unknown = client.post("/v2/models/iris/infer", json=REQUEST)
        assert unknown.status_code == 404
        assert unknown.json() == {"error": "Request for unknown model: 'iris' is not found"}
        version = client.post("/v2/models/digits/versions/9/infer", json=REQUEST)
        assert version.status_code == 404
        assert "'digits' version 9 is not found" in version.json()["error"]
        empty = client.post("/v2/models/digits/versions//infer", json=REQUEST)
        assert empty.status_code == 404
        assert "'digits' version '' is not found" in empty.json()["error"]
        assert client.get("/v2/nothing").status_code == 404


def test_function_errors_come_back_unchanged(gateway: GatewayProcess,
                                             functions: dict[int, Function]) -> None:
    bad = {"inputs": [{"name": "input", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}]}
    direct = httpx.post(f"{functions[1].url}/v2/models/digits/infer", json=bad)
    through = httpx.post(f"{gateway.url}/v2/models/digits/versions/1/infer", json=bad)
    assert through.status_code == direct.status_code == 400
    assert through.json() == direct.json()


def test_index_health_and_metrics(gateway: GatewayProcess) -> None:
    with httpx.Client(base_url=gateway.url) as client:
        assert client.get("/v2/health/live").json() == {"live": True}
        assert client.get("/v2/health/ready").json() == {"ready": True}
        index = client.get("/v2/models").json()["models"]
        assert index == [{"name": "digits", "target": "local", "versions": [1, 2],
                          "split": {"1": 70, "2": 30}}]
        assert client.post("/v2/repository/index").json() == [
            {"name": "digits", "version": "1", "state": "READY"},
            {"name": "digits", "version": "2", "state": "READY"}]
        client.post("/v2/models/digits/versions/1/infer", json=REQUEST)
        client.post("/v2/models/digits/versions/1/infer", json={"inputs": []})
        text = client.get("/metrics").text
    assert 'modelfn_gateway_requests_total{model="digits",version="1",code="200"}' in text
    assert 'modelfn_gateway_requests_total{model="digits",version="1",code="400"} 1' in text
    assert 'modelfn_gateway_upstream_latency_seconds_count{model="digits",version="1"}' in text
    assert "modelfn_http_heads_too_large_total " in text  # the gateway's own HTTP edge


def test_api_keys(functions: dict[int, Function], routes_dir: Path, tmp_path: Path) -> None:
    RouteSource(directory=routes_dir).write(digits_routes(functions, {1: 100, 2: 0}))
    keys = tmp_path / "keys"
    keys.write_text(f"# the team's key\n{hash_key('s3cret')}\n")
    assert "s3cret" not in keys.read_text()
    gw = start_gateway(routes_dir, "--api-keys", str(keys))
    try:
        url = f"{gw.url}/v2/models/digits/infer"
        missing = httpx.post(url, json=REQUEST)
        assert missing.status_code == 401
        assert "API key is required" in missing.json()["error"]
        assert httpx.post(url, json=REQUEST, headers={"X-API-Key": "nope"}).status_code == 403
        ok = httpx.post(url, json=REQUEST, headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200
        assert httpx.get(f"{gw.url}/v2/models", headers={"X-API-Key": "s3cret"}).status_code \
            == 200
        assert httpx.get(f"{gw.url}/v2/models").status_code == 401
        assert missing.headers["www-authenticate"] == 'Bearer realm="modelfn-gateway"'
        assert httpx.get(f"{gw.url}/v2/health/ready").status_code == 200  # open by default
        assert httpx.get(f"{gw.url}/metrics").status_code == 200

        keys.write_text(f"{hash_key('rotated')}\n")  # rotate: the old key is revoked
        deadline = time.monotonic() + 30
        while httpx.post(url, json=REQUEST, headers={"X-API-Key": "s3cret"}).status_code \
                == 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert httpx.post(url, json=REQUEST, headers={"X-API-Key": "s3cret"}).status_code \
            == 403
        assert httpx.post(url, json=REQUEST, headers={"X-API-Key": "rotated"}).status_code \
            == 200
    finally:
        gw.process.stop()


def test_a_routes_reload_under_load_drops_nothing(functions: dict[int, Function],
                                                  routes_dir: Path) -> None:
    source = RouteSource(directory=routes_dir)
    source.write(digits_routes(functions, {1: 100, 2: 0}))
    gw = start_gateway(routes_dir)
    statuses: Counter[int] = Counter()
    versions: Counter[str] = Counter()
    stop = threading.Event()

    def load() -> None:
        with httpx.Client(base_url=gw.url) as client:
            while not stop.is_set():
                answer = client.post("/v2/models/digits/infer", json=REQUEST)
                statuses[answer.status_code] += 1
                if answer.status_code == 200:
                    versions[answer.json()["model_version"]] += 1

    threads = [threading.Thread(target=load) for _ in range(4)]
    try:
        for thread in threads:
            thread.start()
        time.sleep(0.5)
        source.write(digits_routes(functions, {1: 0, 2: 100}))  # promote under load
        deadline = time.monotonic() + 10
        while versions["2"] < 20 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        gw.process.stop()
    assert set(statuses) == {200}, statuses
    assert versions["1"] > 0 and versions["2"] >= 20, versions


def test_a_cold_function_is_retried_within_the_budget(routes_dir: Path, tmp_path: Path) -> None:
    function = Function(digits_repository(tmp_path, 1), free_port())
    RouteSource(directory=routes_dir).write(digits_routes({1: function}, {1: 100}))
    gw = start_gateway(routes_dir, "--cold-budget", "60")
    try:
        starter = threading.Timer(0.5, function.start)  # the platform starts it a bit later
        starter.start()
        started = time.monotonic()
        answer = httpx.post(f"{gw.url}/v2/models/digits/infer", json=REQUEST, timeout=90)
        waited = time.monotonic() - started
        starter.join()
        assert answer.status_code == 200, answer.text
        assert labels(answer.json()) == EXPECTED
        assert waited >= 0.5
        text = httpx.get(f"{gw.url}/metrics").text
        retries = next(line for line in text.splitlines()
                       if line.startswith('modelfn_gateway_retries_total{model="digits"'))
        assert float(retries.rsplit(" ", 1)[1]) > 0
    finally:
        gw.process.stop()
        function.stop()


def test_a_function_that_never_comes_is_a_503_naming_it(routes_dir: Path) -> None:
    port = free_port()
    function = Function(Path("unused"), port)
    RouteSource(directory=routes_dir).write(digits_routes({1: function}, {1: 100}))
    gw = start_gateway(routes_dir, "--cold-budget", "1")
    try:
        answer = httpx.post(f"{gw.url}/v2/models/digits/infer", json=REQUEST, timeout=30)
        assert answer.status_code == 503
        assert f"127.0.0.1:{port}" in answer.json()["error"]
        assert "did not answer within" in answer.json()["error"]
    finally:
        gw.process.stop()


@pytest.mark.parametrize("body", [b"{", b"x" * 10])
def test_malformed_bodies_reach_the_function_unchanged(gateway: GatewayProcess,
                                                       body: bytes) -> None:
    answer = httpx.post(f"{gateway.url}/v2/models/digits/versions/1/infer", content=body)
    assert answer.status_code == 400
    assert "error" in answer.json()


@pytest.mark.parametrize("padding", [0, 200_000], ids=["under-64KiB", "over-64KiB"])
def test_expect_100_continue_is_answered_and_each_client_gets_its_own_answer(
        gateway: GatewayProcess, padding: int) -> None:
    """Client A sends ``Expect: 100-continue`` (curl does for bodies over 1 MB) and waits
    for ``100 Continue`` before its body; client B sends plain requests right after, on the
    function connection A's request used. The gateway answers A's 100 itself, does not pass
    ``Expect`` on (it sends the function the whole body at once), and each client gets its
    own answer."""
    path = "/v2/models/digits/versions/1/infer"
    a_id = "client-A-" + "x" * padding
    body = json.dumps(dict(REQUEST, id=a_id)).encode()
    a = Raw(gateway.url)
    try:
        a.sock.sendall(b"POST %s HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                       b"content-length: %d\r\nexpect: 100-continue\r\n\r\n"
                       % (path.encode(), len(body)))
        heads = [a.head(2.0)]  # curl waits 1 s for it, then sends the body anyway
        a.sock.sendall(body)
        heads.append(a.head(10.0))
        with httpx.Client(base_url=gateway.url, timeout=30) as client:
            b_answers = [client.post(path, json=dict(REQUEST, id="client-B")) for _ in range(3)]
        while heads[-1][9:10] == b"1":
            heads.append(a.head(2.0))
        assert [(b.status_code, b.json().get("id")) for b in b_answers] == [
            (200, "client-B")] * 3
        assert heads[0] == b"HTTP/1.1 100 Continue"
        assert len(heads) == 2 and heads[1].startswith(b"HTTP/1.1 200 "), heads
        assert json.loads(a.body(heads[1]))["id"] == a_id
    finally:
        a.sock.close()


@pytest.mark.parametrize("version", ["%C2%B2", "%D9%A3", "%EF%BC%91", "01", "+1", "1%20",
                                     "0", "-1"])
def test_a_version_that_is_not_plain_decimal_is_a_v2_404(gateway: GatewayProcess,
                                                          version: str) -> None:
    """Only ``[1-9][0-9]*`` names a version, as the function reads a REST path: not
    superscript, Arabic-Indic or fullwidth digits (which ``str.isdigit`` accepts and
    ``int`` chokes on or reads), nor "01" (which the function would not find)."""
    with httpx.Client(base_url=gateway.url) as client:
        answer = client.post(f"/v2/models/digits/versions/{version}/infer", json=REQUEST)
        assert answer.status_code == 404, answer.text
        assert "is not found" in answer.json()["error"]
        assert client.post("/v2/models/digits/versions/1/infer", json=REQUEST).status_code \
            == 200


def test_head_is_answered_as_get_without_a_body(gateway: GatewayProcess,
                                                functions: dict[int, Function]) -> None:
    """The gateway's client reads whole answers, so HEAD goes on as GET: the caller gets
    GET's status and headers, and no body (it used to wait out the cold budget, then 503)."""
    for path in ("/v2/models/digits/versions/1", "/v2/models/digits/versions/1/ready",
                 "/v2/models/digits/versions/1/config"):
        direct = httpx.get(f"{functions[1].url}{path}")
        head = httpx.head(f"{gateway.url}{path}", timeout=10)
        assert head.status_code == direct.status_code == 200, path
        assert head.content == b""
        assert head.headers["content-length"] == str(len(direct.content))
    missing = httpx.head(f"{gateway.url}/v2/models/digits/versions/9", timeout=10)
    assert missing.status_code == 404 and missing.content == b""
    text = httpx.get(f"{gateway.url}/metrics").text
    assert 'modelfn_gateway_retries_total{model="digits",version="1"} 0' in text


def test_max_body_bytes_sets_the_gateways_limit(functions: dict[int, Function],
                                                routes_dir: Path) -> None:
    RouteSource(directory=routes_dir).write(digits_routes(functions, {1: 100}))
    gw = start_gateway(routes_dir, "--max-body-bytes", "1000")
    try:
        big = httpx.post(f"{gw.url}/v2/models/digits/infer", json=REQUEST)  # over 1000 bytes
        assert big.status_code == 413
        assert "exceeds the limit of 1000 bytes" in big.json()["error"]
    finally:
        gw.process.stop()


def test_a_declared_body_over_the_limit_is_a_413_before_any_of_it(
        functions: dict[int, Function], routes_dir: Path) -> None:
    """A Content-Length over ``--max-body`` is refused at once, as the function refuses
    it: no 100 Continue for a client that waits for one, and no 64 MiB read first."""
    RouteSource(directory=routes_dir).write(digits_routes(functions, {1: 100}))
    gw = start_gateway(routes_dir)
    raw = Raw(gw.url)
    try:
        raw.sock.sendall(b"POST /v2/models/digits/infer HTTP/1.1\r\nhost: x\r\n"
                         b"content-type: application/json\r\ncontent-length: %d\r\n"
                         b"expect: 100-continue\r\n\r\n" % (10 * 2**30))
        head = raw.head(10.0)
        assert head.startswith(b"HTTP/1.1 413 "), head
        # all JSON, so the function's JSON limit, in the function's own words
        assert json.loads(raw.body(head)) == {"error": JsonTooLarge(10 * 2**30, 16 * 2**20).message}
        assert httpx.post(f"{gw.url}/v2/models/digits/infer", json=REQUEST).status_code \
            == 200
    finally:
        raw.sock.close()
        gw.process.stop()
