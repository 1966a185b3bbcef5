"""A function's queue timeout is final at the gateway: its 503 / UNAVAILABLE "Request
timeout expired" says the request waited as long as its ``timeout`` (or the model's queue
policy) allowed, so the gateway hands it to the caller instead of retrying it as a cold
start. One real `modelfn serve` (REST and gRPC) behind a real `modelfn gateway`; the
function's own statistics count how many times the request reached it."""

from __future__ import annotations

import shutil
import sys
from typing import TYPE_CHECKING

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from functions import DIGITS, GatewayProcess, http_probe, start_gateway
from tritonclient.utils import InferenceServerException

from modelfn.model_store.routes import ModelRoutes, RouteSource, VersionRoute
from modelfn.process.supervisor import Process, free_port

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

#: a batch waits up to 5 s to fill; a request's queue timeout is 200 ms: it expires first
SLOW_BATCHING = """
version_policy: { all { } }
dynamic_batching {
  preferred_batch_size: [ 64 ]
  max_queue_delay_microseconds: 5000000
  default_queue_policy { timeout_action: REJECT default_timeout_microseconds: 200000 }
}
"""
ROWS = np.random.default_rng(3).random((2, 64), dtype=np.float32)


def slow_repository(root: Path) -> Path:
    """Digits versions 1 and 2 whose requests time out in the queue."""
    model = root / "digits"
    for version in (1, 2):
        (model / str(version)).mkdir(parents=True)
        shutil.copy(DIGITS / "1" / "model.onnx", model / str(version) / "model.onnx")
    config = (DIGITS / "config.pbtxt").read_text().replace("dynamic_batching { }", "")
    (model / "config.pbtxt").write_text(config + SLOW_BATCHING)
    return root


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    root = tmp_path_factory.mktemp("queue-timeout")
    rest_port, grpc_port, gateway_grpc = free_port(), free_port(), free_port()
    function = Process([sys.executable, "-m", "modelfn.cli.main", "serve",
                        str(slow_repository(root / "repository")), "--host", "127.0.0.1",
                        "--port", str(rest_port), "--grpc-port", str(grpc_port)],
                       name="slow function").start()
    function_url = f"http://127.0.0.1:{rest_port}"
    source = RouteSource(directory=root / "routes")
    source.write(ModelRoutes("digits", "local", split={1: 100}, versions={
        1: VersionRoute(function_url),
        2: VersionRoute(f"http://127.0.0.1:{grpc_port}", protocol="grpc")}))
    gateway: GatewayProcess | None = None
    try:
        function.wait_ready(http_probe(f"{function_url}/v2/health/ready"), timeout=60)
        # a budget the retries of a 503 would take: the old gateway retried for 20 s
        gateway = start_gateway(root / "routes", "--grpc-port", str(gateway_grpc),
                                "--cold-budget", "20")
        yield {"function": function_url, "gateway": gateway.url,
               "grpc": f"127.0.0.1:{gateway_grpc}"}
    finally:
        if gateway is not None:
            gateway.process.stop()
        function.stop()


def reached_function(world: dict[str, str], version: int) -> int:
    """How many requests for ``version`` the function refused as timed out."""
    answer = httpx.get(f"{world['function']}/v2/models/digits/versions/{version}/stats",
                       timeout=10)
    stats = answer.json()["model_stats"][0]["inference_stats"]
    assert stats["success"]["count"] == 0
    return int(stats["fail"]["count"])


def retries(world: dict[str, str], version: int) -> float:
    text = httpx.get(f"{world['gateway']}/metrics", timeout=10).text
    prefix = f'modelfn_gateway_retries_total{{model="digits",version="{version}"}}'
    found = [line for line in text.splitlines() if line.startswith(prefix)]
    return float(found[0].rsplit(" ", 1)[1]) if found else 0.0


def test_rest_a_queue_timeout_reaches_the_caller_unretried(world: dict[str, str]) -> None:
    answer = httpx.post(f"{world['gateway']}/v2/models/digits/versions/1/infer", timeout=60,
                        json={"inputs": [{"name": "input", "datatype": "FP32", "shape": [2, 64],
                                          "data": ROWS.ravel().tolist()}]})
    assert answer.status_code == 503
    assert answer.json() == {"error": "Request timeout expired"}
    assert reached_function(world, 1) == 1
    assert retries(world, 1) == 0


def test_grpc_a_queue_timeout_reaches_the_caller_unretried(world: dict[str, str]) -> None:
    client = grpcclient.InferenceServerClient(world["grpc"])
    tensor = grpcclient.InferInput("input", list(ROWS.shape), "FP32")
    tensor.set_data_from_numpy(ROWS)
    try:
        with pytest.raises(InferenceServerException) as refused:
            client.infer("digits", [tensor], model_version="2")
    finally:
        client.close()
    assert refused.value.status() == "StatusCode.UNAVAILABLE"
    assert refused.value.message() == "Request timeout expired"
    assert reached_function(world, 2) == 1
    assert retries(world, 2) == 0
