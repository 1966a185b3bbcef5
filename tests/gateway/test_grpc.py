"""The gateway's gRPC port with the real `tritonclient.grpc`: calls routed by model and
version to functions that speak gRPC (`modelfn serve --grpc-port`, real processes),
passed through unparsed; API keys as metadata; a cold function retried until it answers;
a model whose function speaks REST (a Lambda function URL) refused with UNIMPLEMENTED
naming why. Nothing is mocked."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from functions import DIGITS, Function, GatewayProcess, digits_repository, start_gateway
from tritonclient.utils import InferenceServerException

from modelfn.model_store.routes import ModelRoutes, RouteSource, VersionRoute
from modelfn.process.supervisor import Process, free_port

if TYPE_CHECKING:
    from collections.abc import Iterator

KEY = "s3cret"
ROWS = np.random.default_rng(7).random((3, 64), dtype=np.float32)


def serve_grpc(repository: Path, grpc_port: int) -> Process:
    """`modelfn serve` of ``repository`` with gRPC on ``grpc_port`` (REST on a free port)."""
    return Process([sys.executable, "-m", "modelfn.cli.main", "serve", str(repository),
                    "--host", "127.0.0.1", "--port", str(free_port()),
                    "--grpc-port", str(grpc_port)], name=f"grpc function:{grpc_port}").start()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    root = tmp_path_factory.mktemp("grpc-gateway")
    one_port, cold_port = free_port(), free_port()
    one = serve_grpc(digits_repository(root / "one", 1), one_port)
    rest = Function(digits_repository(root / "rest", 1), free_port()).start()
    routes = root / "routes"
    source = RouteSource(directory=routes)
    source.write(ModelRoutes("digits", "local", split={1: 100}, versions={
        1: VersionRoute(f"http://127.0.0.1:{one_port}", protocol="grpc"),
        2: VersionRoute(f"http://127.0.0.1:{cold_port}", protocol="grpc")}))
    source.write(ModelRoutes("onlambda", "lambda", split={1: 100}, versions={
        1: VersionRoute(rest.url, concurrency=1)}))
    source.write(ModelRoutes("mislabelled", "local", split={1: 100}, versions={
        1: VersionRoute(rest.url, protocol="grpc")}))  # a table that is wrong about it
    keys = root / "keys"
    keys.write_text(KEY + "\n")
    grpc_port = free_port()
    gateway: GatewayProcess | None = None
    try:
        one.wait_ready(lambda: _serving(one_port), timeout=60)
        rest.wait_ready()
        gateway = start_gateway(routes, "--grpc-port", str(grpc_port), "--api-keys", str(keys),
                                "--cold-budget", "60")
        yield {"root": root, "grpc": f"127.0.0.1:{grpc_port}", "gateway": gateway,
               "cold_port": cold_port}
    finally:
        if gateway is not None:
            gateway.process.stop()
        one.stop()
        rest.stop()


def _serving(port: int) -> bool:
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
    try:
        return bool(client.is_server_ready())
    except InferenceServerException:
        return False
    finally:
        client.close()


def infer(address: str, model: str = "digits", version: str = "", key: str | None = KEY
          ) -> grpcclient.InferResult:
    client = grpcclient.InferenceServerClient(address)
    tensor = grpcclient.InferInput("input", list(ROWS.shape), "FP32")
    tensor.set_data_from_numpy(ROWS)
    headers = {"authorization": f"Bearer {key}"} if key is not None else None
    try:
        return client.infer(model, [tensor], model_version=version, headers=headers)
    finally:
        client.close()


def expected() -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(DIGITS / "1" / "model.onnx"))
    return session.run(["label"], {"input": ROWS})[0].ravel()


def test_infer_is_passed_through_to_the_version_asked_for(world: dict[str, object]) -> None:
    result = infer(str(world["grpc"]), version="1")
    assert result.get_response().model_version == "1"
    np.testing.assert_array_equal(result.as_numpy("label").ravel(), expected())
    unpinned = infer(str(world["grpc"]))
    np.testing.assert_array_equal(unpinned.as_numpy("label").ravel(), expected())


def test_a_version_is_read_as_the_function_reads_it(world: dict[str, object]) -> None:
    """As Triton (``std::stol``): "01" and " 1" are version 1; "²" (a digit to
    ``str.isdigit``) names no number at all, INVALID_ARGUMENT in the function's words."""
    for version in ("01", " 1", "+1"):
        assert infer(str(world["grpc"]), version=version).get_response().model_version == "1"
    for version in ("\u00b2", "\u0663"):
        with pytest.raises(InferenceServerException) as refused:
            infer(str(world["grpc"]), version=version)
        assert refused.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert "failed to get model version" in str(refused.value.message())
    with pytest.raises(InferenceServerException) as unknown:
        infer(str(world["grpc"]), version="07")
    assert unknown.value.status() == "StatusCode.NOT_FOUND"


def test_model_ready_of_an_unknown_model_or_version_is_false(
        world: dict[str, object]) -> None:
    """As Triton and the function itself answer it: ready false, not NOT_FOUND."""
    client = grpcclient.InferenceServerClient(str(world["grpc"]))
    headers = {"authorization": f"Bearer {KEY}"}
    try:
        assert client.is_model_ready("digits", "1", headers=headers)
        assert not client.is_model_ready("digits", "7", headers=headers)
        assert not client.is_model_ready("nope", headers=headers)
    finally:
        client.close()


def test_api_keys_travel_as_metadata(world: dict[str, object]) -> None:
    for key, status in ((None, "StatusCode.UNAUTHENTICATED"),
                        ("wrong", "StatusCode.PERMISSION_DENIED")):
        with pytest.raises(InferenceServerException) as refused:
            infer(str(world["grpc"]), version="1", key=key)
        assert refused.value.status() == status
    client = grpcclient.InferenceServerClient(str(world["grpc"]))
    assert client.is_server_live()  # health stays open, as over REST
    client.close()


def test_a_rest_function_is_refused_with_the_reason(world: dict[str, object]) -> None:
    with pytest.raises(InferenceServerException) as refused:
        infer(str(world["grpc"]), model="onlambda")
    assert refused.value.status() == "StatusCode.UNIMPLEMENTED"
    assert "Lambda function URL carries HTTP/1.1 only" in str(refused.value.message())
    with pytest.raises(InferenceServerException) as unknown:
        infer(str(world["grpc"]), model="nope")
    assert unknown.value.status() == "StatusCode.NOT_FOUND"


def test_rpcs_a_function_does_not_serve_are_unimplemented_at_the_gateway(
        world: dict[str, object]) -> None:
    """Shared memory, model load, an unknown RPC: UNIMPLEMENTED, as the function answers
    them. The gateway used to forward them as if they named a model (INVALID_ARGUMENT)."""
    import grpc

    client = grpcclient.InferenceServerClient(str(world["grpc"]))
    try:
        for call in (client.get_system_shared_memory_status,
                     lambda: client.load_model("digits")):
            with pytest.raises(InferenceServerException) as refused:
                call()
            assert refused.value.status() == "StatusCode.UNIMPLEMENTED", refused.value
    finally:
        client.close()
    with grpc.insecure_channel(str(world["grpc"])) as channel:
        unknown = channel.unary_unary("/inference.GRPCInferenceService/NoSuchRpc")
        with pytest.raises(grpc.RpcError) as raw:
            unknown(b"", metadata=(("authorization", f"Bearer {KEY}"),), timeout=10)
        assert raw.value.code() is grpc.StatusCode.UNIMPLEMENTED


def test_a_rest_function_routed_as_grpc_is_refused_at_once(world: dict[str, object]) -> None:
    """No retries until the cold budget (60 s here) is spent: HTTP/1.x is not cold."""
    with pytest.raises(InferenceServerException) as refused:
        infer(str(world["grpc"]), model="mislabelled")
    assert refused.value.status() == "StatusCode.UNIMPLEMENTED"
    assert "answered in HTTP/1.x, not gRPC" in str(refused.value.message())


def test_rest_to_a_grpc_function_says_where_to_go(world: dict[str, object]) -> None:
    gateway = world["gateway"]
    assert isinstance(gateway, GatewayProcess)
    answer = httpx.post(f"{gateway.url}/v2/models/digits/versions/1/infer", json={},
                        headers={"x-api-key": KEY}, timeout=10)
    assert answer.status_code == 501
    assert "gateway's gRPC port" in answer.json()["error"]


def test_a_cold_function_is_retried_until_it_answers(world: dict[str, object]) -> None:
    """Version 2's function is not running when the call arrives: the gateway retries
    within its cold budget while the function starts, and the caller gets the answer."""
    port = int(str(world["cold_port"]))
    function = serve_grpc(digits_repository(Path(str(world["root"])) / "cold", 2), port)
    try:
        result = infer(str(world["grpc"]), version="2")
        assert result.get_response().model_version == "2"
    finally:
        function.stop()
    gateway = world["gateway"]
    assert isinstance(gateway, GatewayProcess)
    metrics = httpx.get(f"{gateway.url}/metrics", timeout=10).text
    retries = [line for line in metrics.splitlines()
               if line.startswith('modelfn_gateway_retries_total{model="digits",version="2"}')]
    assert retries and float(retries[0].rsplit(" ", 1)[1]) >= 1

