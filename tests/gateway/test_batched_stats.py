"""Triton's statistics and metrics where the gateway batches, and callers that hang up while
queued: real `modelfn serve` functions behind a real `modelfn gateway`, whose routes say
their instances take one request at a time (as on Lambda), so the gateway batches for
them. Read with tritonclient and prometheus_client's parser, as dashboards read them."""

from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import tritonclient.http as triton
from functions import DIGITS, Function, GatewayProcess, route_config, start_gateway
from onnx_models import save, simple_graph
from prometheus_client.parser import text_string_to_metric_families

from modelfn.model_store.routes import ModelRoutes, RouteSource, VersionRoute
from modelfn.process.supervisor import free_port

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

#: a second in the queue (of the gateway, then of the function), and room for two requests
HELD_CONFIG = """name: "held"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]
dynamic_batching { max_queue_delay_microseconds: 1000000
                   default_queue_policy { max_queue_size: 2 } }
instance_group [ { kind: KIND_CPU } ]
"""
HELD = "/v2/models/held/versions/1/infer"


@pytest.fixture(scope="module")
def held(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Function]:
    root = tmp_path_factory.mktemp("held")
    save(root / "held", simple_graph(), config=HELD_CONFIG)
    function = Function(root, free_port()).start()
    try:
        function.wait_ready()
        yield function
    finally:
        function.stop()


@pytest.fixture
def batching(functions: dict[int, Function], held: Function, tmp_path: Path
             ) -> Iterator[GatewayProcess]:
    """A fresh gateway: digits version 1 and held batched by it, digits version 2 not."""
    routes = RouteSource(directory=tmp_path / "routes")
    routes.write(ModelRoutes(model="digits", target="local", split={1: 50, 2: 50}, versions={
        1: VersionRoute(functions[1].url, max_batch_size=64, concurrency=1,
                        config=route_config(DIGITS)),
        2: VersionRoute(functions[2].url, max_batch_size=64, concurrency=16)}))
    routes.write(ModelRoutes(model="held", target="local", split={1: 100}, versions={
        1: VersionRoute(held.url, max_batch_size=8, concurrency=1,
                        config=route_config(HELD_CONFIG))}))
    assert routes.directory is not None
    gateway = start_gateway(routes.directory, "--batch-concurrency", "1")
    try:
        yield gateway
    finally:
        gateway.process.stop()


def rows(n: int, width: int = 64) -> dict[str, Any]:
    return {"inputs": [{"name": "input", "datatype": "FP32", "shape": [n, width],
                        "data": [0.25] * (n * width)}]}


def held_body(n: int) -> dict[str, Any]:
    return {"inputs": [{"name": name, "datatype": "FP32", "shape": [n, 16],
                        "data": [1.0] * (n * 16)} for name in ("INPUT0", "INPUT1")]}


def counts(stats: dict[str, Any]) -> tuple[int, int, int, int]:
    """(success, fail, inference_count, execution_count) of one model_stats entry."""
    inference = stats["inference_stats"]
    return (inference["success"]["count"], inference["fail"]["count"],
            stats["inference_count"], stats["execution_count"])


def statistics(address: str, model: str = "", version: str = "") -> list[dict[str, Any]]:
    client = triton.InferenceServerClient(address)
    try:
        return client.get_inference_statistics(model, version)["model_stats"]  # type: ignore[no-any-return]
    finally:
        client.close()


def samples(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """The counters and gauges of ``url``'s /metrics, by family name (the parser's: a
    counter's without ``_total``) and labels."""
    text = httpx.get(f"{url}/metrics").text
    return {(family.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text)
            if family.type in ("counter", "gauge") for s in family.samples}


def sample(found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str,
           **labels: str) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


def test_a_batched_versions_statistics_count_its_callers_as_triton_does(
    batching: GatewayProcess, functions: dict[int, Function],
) -> None:
    """23 callers (1, 3 and 7 rows, then 20 at once), three 400s and a 404: the gateway
    answers Triton's per-caller counts, where the function saw only invocations."""
    digits1 = f"{batching.url}/v2/models/digits/versions/1/infer"
    direct_before = counts(statistics(f"127.0.0.1:{functions[1].port}", "digits", "1")[0])
    metrics_before = samples(batching.url)
    with httpx.Client(timeout=60) as client:
        assert [client.post(digits1, json=rows(n)).status_code for n in (1, 3, 7)] == [200] * 3
        assert client.post(digits1, json=rows(1, 63)).status_code == 400  # decode: OTHER
        assert client.post(digits1, json=rows(1, 65)).status_code == 400  # decode: OTHER
        assert client.post(digits1, json=rows(65)).status_code == 400  # too many rows: OTHER
        assert client.post(f"{batching.url}/v2/models/digits/versions/9/infer",
                           json=rows(1)).status_code == 404
        for _ in range(2):  # through the gateway to a version it does not batch
            assert client.post(f"{batching.url}/v2/models/digits/versions/2/infer",
                               json=rows(2)).status_code == 200
    barrier = threading.Barrier(20)

    def caller(_: int) -> int:
        barrier.wait(timeout=30)
        return httpx.post(digits1, json=rows(1), timeout=60).status_code

    with ThreadPoolExecutor(20) as pool:
        assert list(pool.map(caller, range(20))) == [200] * 20
    metrics = samples(batching.url)
    labels = {"model": "digits", "version": "1"}
    invocations = (sample(metrics, "modelfn_gateway_invocations", **labels, code="200")
                   - sample(metrics_before, "modelfn_gateway_invocations", **labels,
                            code="200"))

    version = statistics(batching.address, "digits", "1")
    assert [(s["name"], s["version"]) for s in version] == [("digits", "1")]
    assert counts(version[0]) == (23, 3, 31, invocations)
    assert version[0]["inference_stats"]["queue"]["count"] == 23
    assert sum(b["compute_infer"]["count"] for b in version[0]["batch_stats"]) == invocations
    direct = counts(statistics(f"127.0.0.1:{functions[1].port}", "digits", "1")[0])
    # what the function counted: one request per invocation, none of the 400s
    assert [a - b for a, b in zip(direct, direct_before, strict=True)] == [
        invocations, 0, 31, invocations]

    # the model: version 1 from the gateway, version 2 from its function, as it answers
    by_version = {s["version"]: s for s in statistics(batching.address, "digits")}
    assert by_version.keys() == {"1", "2"}
    assert counts(by_version["1"]) == (23, 3, 31, invocations)
    two = statistics(f"127.0.0.1:{functions[2].port}", "digits", "2")
    assert by_version["2"] == two[0]
    assert statistics(batching.address, "digits", "2") == two  # still the function's
    # every model: held's batched version too, none of it counted yet
    everything = {(s["name"], s["version"]): s for s in statistics(batching.address)}
    assert everything.keys() == {("digits", "1"), ("digits", "2"), ("held", "1")}
    assert counts(everything[("digits", "1")]) == (23, 3, 31, invocations)
    assert everything[("digits", "2")] == two[0]
    assert counts(everything[("held", "1")]) == (0, 0, 0, 0)

    # the same counts on the gateway's /metrics, with Triton's names
    assert sample(metrics, "nv_inference_request_success", **labels) == 23
    assert sample(metrics, "nv_inference_request_failure", **labels, reason="OTHER") == 3
    assert sample(metrics, "nv_inference_count", **labels) == 31
    assert sample(metrics, "nv_inference_exec_count", **labels) == invocations
    assert sample(metrics, "nv_inference_pending_request_count", **labels) == 0
    assert not any(name.startswith("nv_") and ("version", "2") in found
                   for name, found in metrics)  # version 2's are its function's own


def test_a_full_gateway_queue_is_counted_rejected(batching: GatewayProcess) -> None:
    """held's queue takes two requests for a second: the third caller's 503 is the
    gateway's own, counted as Triton counts a full queue."""
    barrier = threading.Barrier(3)

    def caller(_: int) -> httpx.Response:
        barrier.wait(timeout=30)
        return httpx.post(f"{batching.url}{HELD}", json=held_body(1), timeout=60)

    # the first request reads the config: every caller then meets the same queue
    assert httpx.post(f"{batching.url}{HELD}", json=held_body(1), timeout=60).status_code == 200
    with ThreadPoolExecutor(3) as pool:
        answers = list(pool.map(caller, range(3)))
    assert sorted(a.status_code for a in answers) == [200, 200, 503]
    assert "Exceeds maximum queue size" in next(
        a.json()["error"] for a in answers if a.status_code == 503)
    stats = statistics(batching.address, "held", "1")[0]
    assert counts(stats)[:3] == (3, 1, 3)
    labels = {"model": "held", "version": "1"}
    metrics = samples(batching.url)
    assert sample(metrics, "nv_inference_request_failure", **labels, reason="REJECTED") == 1
    assert sample(metrics, "nv_inference_request_success", **labels) == 3


def test_a_caller_that_hangs_up_while_queued_is_withdrawn(
    batching: GatewayProcess, held: Function,
) -> None:
    """A caller that leaves while its 3 rows wait a second for a batch: its rows never reach
    the function, it counts as a disconnect and CANCELED, not a 200; a caller queued beside
    it gets its own answer."""
    assert httpx.post(f"{batching.url}{HELD}", json=held_body(1), timeout=60).status_code == 200
    direct_before = counts(statistics(f"127.0.0.1:{held.port}", "held", "1")[0])
    before = samples(batching.url)
    payload = httpx.Request("POST", f"{batching.url}{HELD}", json=held_body(3)).read()
    gone = socket.create_connection(("127.0.0.1", batching.port))
    gone.sendall(b"POST %s HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (HELD.encode(), len(payload), payload))
    stayed: list[httpx.Response] = []
    stay = threading.Thread(target=lambda: stayed.append(
        httpx.post(f"{batching.url}{HELD}", json=held_body(1), timeout=60)))
    stay.start()
    time.sleep(0.3)  # both queued: the batch waits up to a second for more
    gone.close()
    stay.join(timeout=60)
    assert stayed[0].status_code == 200
    assert stayed[0].json()["outputs"][0]["data"] == [2.0] * 16

    after = samples(batching.url)
    labels = {"model": "held", "version": "1"}

    def delta(name: str, **extra: str) -> float:
        return sample(after, name, **labels, **extra) - sample(before, name, **labels, **extra)

    assert delta("modelfn_gateway_requests", code="200") == 1
    assert (sample(after, "modelfn_http_client_disconnects")
            - sample(before, "modelfn_http_client_disconnects")) == 1
    assert delta("nv_inference_request_failure", reason="CANCELED") == 1
    assert delta("nv_inference_request_success") == 1
    assert delta("nv_inference_count") == 1  # the caller that stayed: one row
    direct = counts(statistics(f"127.0.0.1:{held.port}", "held", "1")[0])
    assert direct[2] - direct_before[2] == 1  # the function got that row only
