"""The gateway holds requests for Lambda functions to the function's own limits: Lambda's
6 MB invocation payload, from Content-Length before reading and while streaming, on the
batching path and the plain one; and it splits a batch that would be one invocation over
that limit. Real Lambda functions on the local platform behind a real ``modelfn gateway``;
httpx, tritonclient and a raw socket as clients."""

from __future__ import annotations

import socket
import threading
from typing import TYPE_CHECKING

import httpx
import numpy as np
import orjson
import pytest
import tritonclient.http as triton
from functions import GatewayProcess, lambda_function, route_config, start_gateway
from onnx import TensorProto
from onnx_models import identity_graph, save

from modelfn.model_store.routes import ModelRoutes, RouteSource, VersionRoute

if TYPE_CHECKING:
    from collections.abc import Iterator

    from modelfn.localstack.lambda_platform import LocalLambda

LIMIT = 6 * 1024 * 1024
WIDTH = 1_000_000  # 4 MB of FP32 a row: one row fits an invocation, two do not
#: waits for three callers (up to a second), so three rows are one batch
WIDE = f"""name: "wide"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ {WIDTH} ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ {WIDTH} ] }} ]
dynamic_batching {{ preferred_batch_size: [ 3 ] max_queue_delay_microseconds: 3000000 }}
instance_group [ {{ kind: KIND_CPU }} ]
"""
FLAT = """name: "flat"
platform: "onnxruntime_onnx"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { kind: KIND_CPU } ]
"""


@pytest.fixture(scope="module")
def aws() -> Iterator[LocalLambda]:
    from modelfn.localstack.lambda_platform import LocalLambda

    with LocalLambda(idle_s=300) as platform:
        yield platform


@pytest.fixture(scope="module")
def function(aws: LocalLambda, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """One Lambda function serving ``wide`` (batching) and ``flat`` (not): name, URL."""
    root = tmp_path_factory.mktemp("repository")
    save(root / "wide", identity_graph(TensorProto.FLOAT, ["N", WIDTH]), config=WIDE)
    save(root / "flat", identity_graph(TensorProto.FLOAT, [4]), config=FLAT)
    return lambda_function(aws, root)


@pytest.fixture(scope="module")
def gateway(function: tuple[str, str], tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[GatewayProcess]:
    routes = RouteSource(directory=tmp_path_factory.mktemp("routes"))
    url = function[1]
    routes.write(ModelRoutes(model="wide", target="local-lambda", split={1: 100}, versions={
        1: VersionRoute(url, max_batch_size=8, concurrency=1, config=route_config(WIDE))}))
    routes.write(ModelRoutes(model="flat", target="lambda", split={1: 100}, url=url,
                             versions={1: VersionRoute(url, concurrency=1)}))
    assert routes.directory is not None
    gw = start_gateway(routes.directory, "--batch-concurrency", "1", "--cold-budget", "60")
    try:
        yield gw
    finally:
        gw.process.stop()


def declared_only(gateway: GatewayProcess, path: str, length: int) -> tuple[int, dict[str, str]]:
    """POST with ``Content-Length: length`` and no body sent: the status and error the
    gateway answers without waiting for the body."""
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=20) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {length}\r\n\r\n".encode())
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), orjson.loads(body)


@pytest.mark.parametrize("model", ["wide/versions/1", "flat"])
def test_a_declared_body_over_lambdas_limit_is_refused_before_it_is_read(
    gateway: GatewayProcess, model: str,
) -> None:
    status, doc = declared_only(gateway, f"/v2/models/{model}/infer", 60 * 1024 * 1024)
    assert status == 413, doc
    assert str(LIMIT) in doc["error"]
    assert httpx.get(f"{gateway.url}/v2/health/ready").status_code == 200


def test_a_json_body_over_lambdas_limit_never_reaches_the_batch(gateway: GatewayProcess) -> None:
    """20 MiB of JSON (a valid one-row request, padded) is what the function would refuse."""
    request = orjson.dumps({"inputs": [{"name": "IN", "datatype": "FP32", "shape": [1, WIDTH],
                                        "data": [0] * WIDTH}]})
    body = request + b" " * (20 * 2**20 - len(request))
    answer = httpx.post(f"{gateway.url}/v2/models/wide/versions/1/infer", content=body,
                        headers={"content-type": "application/json"}, timeout=60)
    assert answer.status_code == 413, answer.text[:300]
    assert str(LIMIT) in answer.json()["error"]


def test_a_streamed_body_is_refused_once_it_passes_the_limit(gateway: GatewayProcess) -> None:
    sent = 0

    def chunks() -> Iterator[bytes]:
        nonlocal sent
        for _ in range(16):
            sent += 2**20
            yield b" " * 2**20

    try:
        answer = httpx.post(f"{gateway.url}/v2/models/wide/versions/1/infer", content=chunks(),
                            headers={"content-type": "application/json"}, timeout=60)
    except httpx.WriteError:  # the gateway answered and closed while the rest was sent
        return
    assert answer.status_code == 413, answer.text[:300]
    assert str(LIMIT) in answer.json()["error"]


def test_a_batch_over_the_invocation_limit_is_split_into_invocations_that_fit(
    gateway: GatewayProcess, function: tuple[str, str], aws: LocalLambda,
) -> None:
    """Three 4 MB rows are one batch of 12 MB: too large for one invocation, so it goes as
    invocations of one row each, and every caller gets its own row back."""
    barrier = threading.Barrier(3)
    answers: dict[int, np.ndarray] = {}
    errors: list[BaseException] = []

    def call(i: int) -> None:
        client = triton.InferenceServerClient(gateway.address, network_timeout=120)
        try:
            row = np.full((1, WIDTH), float(i + 1), dtype=np.float32)
            tensor = triton.InferInput("IN", [1, WIDTH], "FP32")
            tensor.set_data_from_numpy(row, binary_data=True)
            barrier.wait(timeout=30)
            result = client.infer("wide", [tensor], model_version="1", outputs=[
                triton.InferRequestedOutput("OUT", binary_data=True)])
            answers[i] = result.as_numpy("OUT")
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)
        finally:
            client.close()

    before = aws.counts(function[0]).invocations
    threads = [threading.Thread(target=call, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(180)
    assert not errors, errors
    for i in range(3):
        assert answers[i].shape == (1, WIDTH) and np.all(answers[i] == i + 1)
    # config read, then one-row invocations: more than the one batch, none over the limit
    assert aws.counts(function[0]).invocations - before >= 3
    metrics = httpx.get(f"{gateway.url}/metrics").text
    assert 'modelfn_gateway_invocations_total{model="wide",version="1",code="413"}' \
        not in metrics
