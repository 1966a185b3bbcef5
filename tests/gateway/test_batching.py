"""The gateway batching for Lambda: digits functions on the local Lambda platform (real
``awslambdaric`` environments, one invocation at a time each) behind a real
``modelfn gateway``, driven by tritonclient and httpx. Invocations are counted at the
platform; every answer is checked against onnxruntime on the caller's own input."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np
import onnxruntime as ort
import orjson
import pytest
import tritonclient.http as triton
from functions import (
    DIGITS,
    GatewayProcess,
    digits_repository,
    lambda_function,
    route_config,
    start_gateway,
)
from onnx_models import lookup_graph, save

from modelfn.model_store.routes import ModelRoutes, RouteSource, VersionRoute
from modelfn.process.supervisor import free_port

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from modelfn.localstack.lambda_platform import LocalLambda

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "requests"
REQUEST = json.loads((EXAMPLES / "digits.json").read_text())
EXPECTED = json.loads((EXAMPLES / "digits_expected.json").read_text())["label"]
TABLE = [float(10 * i) for i in range(10)]
LOOKUP_CONFIG = """name: "lookup"
platform: "onnxruntime_onnx"
max_batch_size: 16
input [ { name: "INDEX" data_type: TYPE_INT64 dims: [ 1 ] } ]
output [ { name: "VALUE" data_type: TYPE_FP32 dims: [ 1 ] label_filename: "labels.txt" } ]
dynamic_batching { }
instance_group [ { kind: KIND_CPU } ]
"""
#: batches in flight per version, as the gateway is told
CAP = 4


@pytest.fixture(scope="module")
def aws() -> Iterator[LocalLambda]:
    from modelfn.localstack.lambda_platform import LocalLambda

    with LocalLambda(idle_s=300) as platform:
        yield platform


@pytest.fixture(scope="module")
def functions(aws: LocalLambda, tmp_path_factory: pytest.TempPathFactory
              ) -> dict[str, tuple[str, str]]:
    """digits versions 1 and 2, and the lookup model: one Lambda function each."""
    root = tmp_path_factory.mktemp("functions")
    save(root / "lookup" / "lookup", lookup_graph(TABLE), config=LOOKUP_CONFIG)
    (root / "lookup" / "lookup" / "labels.txt").write_text("only\n")
    return {"digits1": lambda_function(aws, digits_repository(root, 1)),
            "digits2": lambda_function(aws, digits_repository(root, 2)),
            "lookup": lambda_function(aws, root / "lookup")}


@pytest.fixture(scope="module")
def gateway(functions: dict[str, tuple[str, str]], tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[GatewayProcess]:
    routes = RouteSource(directory=tmp_path_factory.mktemp("routes"))
    # the live alias URL goes nowhere: where the gateway batches, it chooses the version itself
    routes.write(ModelRoutes(
        model="digits", target="lambda", url="http://127.0.0.1:9/", split={1: 70, 2: 30},
        versions={1: VersionRoute(functions["digits1"][1], max_batch_size=64, concurrency=1,
                                 config=route_config(DIGITS)),
                  2: VersionRoute(functions["digits2"][1], max_batch_size=64, concurrency=1,
                                 config=route_config(DIGITS))}))
    routes.write(ModelRoutes(
        model="lookup", target="lambda", split={1: 100},
        versions={1: VersionRoute(functions["lookup"][1], max_batch_size=16, concurrency=1,
                                    config=route_config(LOOKUP_CONFIG))}))
    assert routes.directory is not None
    gw = start_gateway(routes.directory, "--batch-concurrency", str(CAP), "--cold-budget", "60")
    try:
        for model in ("digits/versions/1", "digits/versions/2", "lookup/versions/1"):
            # the first request warms one environment
            warm = httpx.post(f"{gw.url}/v2/models/{model}/infer", timeout=120, json=REQUEST
                              if model.startswith("digits") else lookup_request([1]))
            assert warm.status_code == 200, warm.text + gw.process.tail()
        yield gw
    finally:
        gw.process.stop()


@pytest.fixture(scope="module")
def digits_session() -> ort.InferenceSession:
    return ort.InferenceSession(str(DIGITS / "1" / "model.onnx"))


def lookup_request(indices: list[int]) -> dict[str, Any]:
    return {"inputs": [{"name": "INDEX", "datatype": "INT64", "shape": [len(indices), 1],
                        "data": indices}]}


def all_at_once(n: int, call: Callable[[int], Any]) -> list[Any]:
    """``call(i)`` for i < n from n threads released together."""
    barrier = threading.Barrier(n)

    def released(i: int) -> Any:
        barrier.wait(timeout=30)
        return call(i)

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(released, range(n)))


def metric(text: str, name: str, **labels: str) -> float:
    """The sample of ``name`` with exactly ``labels`` (0 when absent)."""
    wanted = "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"
    for line in text.splitlines():
        if line.startswith(name + wanted + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_concurrent_callers_share_invocations_and_each_gets_its_own_rows(
    gateway: GatewayProcess, functions: dict[str, tuple[str, str]], aws: LocalLambda,
    digits_session: ort.InferenceSession,
) -> None:
    """32 callers (tritonclient JSON and binary, the example request, two malformed ones)
    through a cap of 4 batches in flight: fewer invocations than requests, and every caller
    its own rows; the malformed requests fail alone with the function's own 400."""
    function, function_url = functions["digits1"]
    rounds, bad = 4, {0: "shape", 1: "datatype"}
    bad_bodies = {
        "shape": {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 63],
                              "data": [0.5] * 63}]},
        "datatype": {"inputs": [{"name": "input", "datatype": "FP64", "shape": [1, 64],
                                 "data": [0.5] * 64}]},
    }

    def caller(i: int) -> list[tuple[Any, ...]]:
        if i in bad:
            with httpx.Client(base_url=gateway.url, timeout=60) as client:
                return [(i, "bad", client.post("/v2/models/digits/versions/1/infer",
                                               json=bad_bodies[bad[i]])) for _ in range(rounds)]
        if i == 2:
            with httpx.Client(base_url=gateway.url, timeout=60) as client:
                return [(i, "example", client.post("/v2/models/digits/versions/1/infer",
                                                   json=REQUEST)) for _ in range(rounds)]
        client = triton.InferenceServerClient(gateway.address, network_timeout=60)
        answers = []
        try:
            for r in range(rounds):
                rows = np.random.default_rng([i, r]).random((1 + (i + r) % 4, 64),
                                                            dtype=np.float32)
                binary = i % 2 == 1
                tensor = triton.InferInput("input", list(rows.shape), "FP32")
                tensor.set_data_from_numpy(rows, binary_data=binary)
                result = client.infer("digits", [tensor], model_version="1", outputs=[
                    triton.InferRequestedOutput("label", binary_data=binary),
                    triton.InferRequestedOutput("probabilities", binary_data=binary)])
                answers.append((i, "rows", rows, binary, result))
        finally:
            client.close()
        return answers

    before = aws.counts(function).invocations
    answers = [answer for batch in all_at_once(32, caller) for answer in batch]
    invocations = aws.counts(function).invocations - before
    good = [a for a in answers if a[1] != "bad"]
    assert len(answers) == 32 * rounds
    assert 0 < invocations < len(good) // 2, (invocations, len(good))
    for answer in answers:
        if answer[1] == "bad":
            response: httpx.Response = answer[2]
            direct = httpx.post(f"{function_url}v2/models/digits/versions/1/infer",
                                json=bad_bodies[bad[answer[0]]], timeout=60)
            assert response.status_code == direct.status_code == 400, response.text
            assert response.json() == direct.json()
        elif answer[1] == "example":
            assert answer[2].status_code == 200, answer[2].text
            outputs = {o["name"]: o for o in answer[2].json()["outputs"]}
            assert outputs["label"]["data"] == EXPECTED
        else:
            _, _, rows, binary, result = answer
            label, probabilities = digits_session.run(None, {"input": rows})
            np.testing.assert_array_equal(result.as_numpy("label").ravel(), label)
            np.testing.assert_allclose(result.as_numpy("probabilities"), probabilities,
                                       rtol=1e-5, atol=1e-6)
            sent = {o["name"]: o for o in result.get_response()["outputs"]}
            for output in sent.values():  # binary in binary out, JSON in JSON out
                assert ("binary_data_size" in output.get("parameters", {})) == binary
                assert ("data" in output) == (not binary)
            assert result.get_response()["model_version"] == "1"


def test_metrics_show_the_batch_sizes_and_the_invocations(
    gateway: GatewayProcess, functions: dict[str, tuple[str, str]], aws: LocalLambda,
) -> None:
    function = functions["digits1"][0]
    labels = {"model": "digits", "version": "1"}
    one_row = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 64],
                           "data": REQUEST["inputs"][0]["data"][:64]}]}

    def scrape() -> str:
        return httpx.get(f"{gateway.url}/metrics").text

    def calls(i: int) -> int:
        with httpx.Client(base_url=gateway.url, timeout=60) as client:
            return sum(client.post("/v2/models/digits/versions/1/infer",
                                   json=one_row).status_code == 200 for _ in range(8))

    text, before = scrape(), aws.counts(function).invocations
    assert sum(all_at_once(16, calls)) == 128
    after, invocations = scrape(), aws.counts(function).invocations - before

    def delta(name: str, **extra: str) -> float:
        return metric(after, name, **labels, **extra) - metric(text, name, **labels, **extra)

    assert delta("modelfn_gateway_batch_size_sum") == 128  # every row went in some batch
    assert delta("modelfn_gateway_batch_size_count") == invocations < 128
    assert delta("modelfn_gateway_invocations_total", code="200") == invocations
    assert delta("modelfn_gateway_requests_total", code="200") == 128
    # one-row requests: batches above one row are batches of several callers
    assert delta("modelfn_gateway_batch_size_bucket", le="1") < invocations
    assert "# TYPE modelfn_gateway_batch_size histogram" in after


def test_a_function_error_fails_only_its_own_batch(
    gateway: GatewayProcess, functions: dict[str, tuple[str, str]],
) -> None:
    """An index outside the table makes the function's model fail: every caller in that
    batch gets the function's own status and V2 error, and everyone else their value."""
    direct = httpx.post(f"{functions['lookup'][1]}v2/models/lookup/infer",
                        json=lookup_request([99]), timeout=60)
    assert direct.status_code >= 400
    poison = 7

    def call(i: int) -> httpx.Response:
        index = 99 if i == poison else i % 10
        return httpx.post(f"{gateway.url}/v2/models/lookup/versions/1/infer",
                          json=lookup_request([index]), timeout=60)

    before = httpx.get(f"{gateway.url}/metrics").text
    answers = all_at_once(24, call)
    after = httpx.get(f"{gateway.url}/metrics").text
    failed = [i for i, a in enumerate(answers) if a.status_code != 200]
    assert poison in failed
    for i in failed:
        assert answers[i].status_code == direct.status_code
        assert answers[i].json() == direct.json()
    for i, answer in enumerate(answers):
        if i not in failed:
            assert answer.json()["outputs"][0]["data"] == [TABLE[i % 10]]
    labels = {"model": "lookup", "version": "1"}
    code = str(direct.status_code)
    failed_invocations = (metric(after, "modelfn_gateway_invocations_total", **labels, code=code)
                          - metric(before, "modelfn_gateway_invocations_total", **labels,
                                   code=code))
    assert failed_invocations == 1  # one batch failed
    assert len(failed) <= 16 < len(answers)  # that batch's callers only: the rest answered


def test_a_lone_request_gets_the_functions_own_answer(
    gateway: GatewayProcess, functions: dict[str, tuple[str, str]],
) -> None:
    """One caller at a time is a batch of one: the same bytes as the function answers, for
    JSON, binary, an output subset with classification, an id, and a raw binary body."""
    rows = np.random.default_rng(5).random((3, 64), dtype=np.float32)
    raw = rows[:1].tobytes()
    bodies: list[tuple[bytes, dict[str, str]]] = [
        (orjson.dumps({**REQUEST, "id": "r-1"}), {}),
        (orjson.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [3, 64],
                                   "data": rows.ravel().tolist()}],
                       "outputs": [{"name": "probabilities",
                                    "parameters": {"classification": 3}}]}), {}),
        (raw, {"Inference-Header-Content-Length": "0"}),
    ]
    tensor = triton.InferInput("input", [3, 64], "FP32")
    tensor.set_data_from_numpy(rows, binary_data=True)
    body, length = triton.InferenceServerClient.generate_request_body(
        [tensor], outputs=[triton.InferRequestedOutput("label", binary_data=True)])
    bodies.append((bytes(body), {"Inference-Header-Content-Length": str(length)}))
    for content, headers in bodies:
        through = httpx.post(f"{gateway.url}/v2/models/digits/versions/1/infer",
                             content=content, headers=headers, timeout=60)
        direct = httpx.post(f"{functions['digits1'][1]}v2/models/digits/versions/1/infer",
                            content=content, headers=headers, timeout=60)
        assert through.status_code == direct.status_code == 200, through.text
        assert through.content == direct.content
        for header in ("content-type", "inference-header-content-length"):
            assert through.headers.get(header) == direct.headers.get(header)


def test_unpinned_requests_follow_the_split_by_version(gateway: GatewayProcess) -> None:
    """The alias URL in the table goes nowhere: the gateway picks the version first."""
    with httpx.Client(base_url=gateway.url, timeout=60) as client:
        seen = Counter(client.post("/v2/models/digits/infer", json=REQUEST).json()
                       ["model_version"] for _ in range(200))
    assert set(seen) == {"1", "2"}
    assert 110 <= seen["1"] <= 170, seen  # Binomial(200, 0.7): 140 ± 6.5
    text = httpx.get(f"{gateway.url}/metrics").text
    assert metric(text, "modelfn_gateway_requests_total", model="digits", version="split",
                  code="200") == 0


def test_classification_with_class_labels_goes_to_the_function_as_it_came(
    gateway: GatewayProcess, functions: dict[str, tuple[str, str]],
) -> None:
    """Only the function has the label file: such a request is not batched but forwarded."""
    body = {**lookup_request([3]),
            "outputs": [{"name": "VALUE", "parameters": {"classification": 1}}]}
    labels = {"model": "lookup", "version": "1"}
    before = httpx.get(f"{gateway.url}/metrics").text
    through = httpx.post(f"{gateway.url}/v2/models/lookup/versions/1/infer", json=body,
                         timeout=60)
    after = httpx.get(f"{gateway.url}/metrics").text
    direct = httpx.post(f"{functions['lookup'][1]}v2/models/lookup/versions/1/infer", json=body,
                        timeout=60)
    assert through.status_code == direct.status_code == 200, through.text
    assert through.json() == direct.json()
    assert through.json()["outputs"][0]["data"] == ["30.000000:0:only"]
    for name in ("modelfn_gateway_batch_size_count", "modelfn_gateway_invocations_total"):
        extra = {"code": "200"} if name.endswith("_total") else {}
        assert metric(after, name, **labels, **extra) == metric(before, name, **labels, **extra)
    assert metric(after, "modelfn_gateway_requests_total", **labels, code="200") == metric(
        before, "modelfn_gateway_requests_total", **labels, code="200") + 1


def test_callers_waiting_on_a_function_that_never_comes_get_503_together(
    tmp_path: Path,
) -> None:
    """Everyone waiting is batched (the config comes with the route, the function is not
    asked for it); when the cold budget runs out they all get the 503 at once, and the
    next request tries again."""
    port = free_port()
    routes = RouteSource(directory=tmp_path)
    routes.write(ModelRoutes(model="digits", target="lambda", split={1: 100}, versions={
        1: VersionRoute(f"http://127.0.0.1:{port}/", max_batch_size=64, concurrency=1,
                        config=route_config(DIGITS))}))
    gw = start_gateway(tmp_path, "--cold-budget", "1")
    try:
        started = time.monotonic()
        answers = all_at_once(16, lambda _: httpx.post(f"{gw.url}/v2/models/digits/infer",
                                                       json=REQUEST, timeout=30))
        waited = time.monotonic() - started
        assert {a.status_code for a in answers} == {503}
        assert all(f"127.0.0.1:{port}" in a.json()["error"] for a in answers)
        assert waited < 5  # batches in flight together, not sixteen calls in turn
        again = httpx.post(f"{gw.url}/v2/models/digits/infer", json=REQUEST, timeout=30)
        assert again.status_code == 503 and "did not answer within" in again.json()["error"]
    finally:
        gw.process.stop()


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
def test_a_compressed_caller_is_inflated_batched_and_answered_compressed(
        gateway: GatewayProcess, coding: str) -> None:
    """The gateway decodes what it batches: a compressed body is inflated first (held to
    the function's limit once inflated), and the answer compressed as the caller accepts.
    tritonclient's own options, then the refusals, and the gateway still batches."""
    import gzip
    import zlib

    client = triton.InferenceServerClient(gateway.address, network_timeout=120)
    rows = np.asarray(REQUEST["inputs"][0]["data"], np.float32).reshape(4, 64)
    try:
        for binary in (False, True):
            tensor = triton.InferInput("input", [4, 64], "FP32")
            tensor.set_data_from_numpy(rows, binary_data=binary)
            result = client.infer("digits", [tensor], model_version="1", outputs=[
                triton.InferRequestedOutput("label", binary_data=binary)],
                request_compression_algorithm=coding, response_compression_algorithm=coding)
            assert result.as_numpy("label").ravel().tolist() == EXPECTED
    finally:
        client.close()
    packed = gzip.compress if coding == "gzip" else zlib.compress
    url = f"{gateway.url}/v2/models/digits/versions/1/infer"
    with httpx.Client(timeout=120) as http:
        answer = http.send(http.build_request(
            "POST", url, content=packed(orjson.dumps(REQUEST)),
            headers={"content-encoding": coding, "accept-encoding": coding}), stream=True)
        raw = b"".join(answer.iter_raw())
        assert answer.status_code == 200 and answer.headers["content-encoding"] == coding
        unpacked = gzip.decompress(raw) if coding == "gzip" else zlib.decompress(raw)
        assert labels_of(orjson.loads(unpacked)) == EXPECTED
        bomb = http.post(url, content=packed(b" " * (64 << 20)),
                         headers={"content-encoding": coding})
        assert bomb.status_code == 413
        assert "inflates past the limit of 6291456 bytes" in bomb.json()["error"]
        corrupt = http.post(url, content=b"not compressed", headers={"content-encoding": coding})
        assert corrupt.status_code == 400, corrupt.text
        assert corrupt.json()["error"].startswith(f"the request body is not valid {coding}")
        again = http.post(url, json=REQUEST)
        assert again.status_code == 200 and labels_of(again.json()) == EXPECTED


def labels_of(body: dict[str, Any]) -> list[int]:
    return next(o for o in body["outputs"] if o["name"] == "label")["data"]  # type: ignore[no-any-return]
