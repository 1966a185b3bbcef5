"""The ONNX equivalents of Triton's example models, asked the way Triton's example clients
ask them (tritonclient HTTP and gRPC, the raw gRPC stubs of the explicit-content clients),
so CI covers the requests scripts/triton-examples makes with Triton's own clients."""

from __future__ import annotations

from typing import TYPE_CHECKING

import grpc
import numpy as np
import onnxruntime
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx_models import class_labels, triton_example_repository
from servers import Server
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException, deserialize_bytes_tensor

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

ROW = np.arange(16, dtype=np.int32).reshape(1, 16)
ONES = np.ones((1, 16), dtype=np.int32)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo: Path = tmp_path_factory.mktemp("triton") / "models"
    triton_example_repository(repo)
    return repo


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[Server]:
    server = Server(repo, grpc=True)
    try:
        server.wait_ready()
        yield server
    finally:
        log = server.stop()
        assert server.proc.returncode == 0, log


@pytest.fixture
def http(server: Server) -> Iterator[httpclient.InferenceServerClient]:
    with httpclient.InferenceServerClient(server.url) as client:
        yield client


@pytest.fixture
def grpc_client(server: Server) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        yield client


def http_inputs(datatype: str, *arrays: np.ndarray) -> list[httpclient.InferInput]:
    """INPUT0 as JSON, INPUT1 binary: simple_http_infer_client's mix."""
    inputs = []
    for index, array in enumerate(arrays):
        tensor = httpclient.InferInput(f"INPUT{index}", list(array.shape), datatype)
        tensor.set_data_from_numpy(array, binary_data=index % 2 == 1)
        inputs.append(tensor)
    return inputs


def grpc_inputs(datatype: str, *arrays: np.ndarray) -> list[grpcclient.InferInput]:
    inputs = []
    for index, array in enumerate(arrays):
        tensor = grpcclient.InferInput(f"INPUT{index}", list(array.shape), datatype)
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


def both_outputs() -> list[httpclient.InferRequestedOutput]:
    return [httpclient.InferRequestedOutput("OUTPUT0", binary_data=True),
            httpclient.InferRequestedOutput("OUTPUT1", binary_data=False)]


def test_simple_over_http_sync_and_async(http: httpclient.InferenceServerClient) -> None:
    answer = http.infer("simple", http_inputs("INT32", ROW, ONES), outputs=both_outputs())
    assert answer.as_numpy("OUTPUT0").tolist() == (ROW + 1).tolist()
    assert answer.as_numpy("OUTPUT1").tolist() == (ROW - 1).tolist()
    pending = http.async_infer("simple", http_inputs("INT32", ROW, ROW), request_id="7")
    assert pending.get_result().as_numpy("OUTPUT0").tolist() == (ROW * 2).tolist()


@pytest.mark.parametrize("algorithm", [None, "gzip", "deflate"])
def test_simple_over_grpc(grpc_client: grpcclient.InferenceServerClient,
                          algorithm: str | None) -> None:
    """simple_grpc_infer_client, with its --grpc-compression-algorithm; custom_args's header."""
    answer = grpc_client.infer("simple", grpc_inputs("INT32", ROW, ONES), headers={"test": "1"},
                               compression_algorithm=algorithm)
    assert answer.as_numpy("OUTPUT0").tolist() == (ROW + 1).tolist()
    assert answer.as_numpy("OUTPUT1").tolist() == (ROW - 1).tolist()


def test_health_and_metadata_as_the_health_clients_read_them(
        http: httpclient.InferenceServerClient,
        grpc_client: grpcclient.InferenceServerClient) -> None:
    assert http.is_server_live(query_params={"test_1": 1, "test_2": 2})
    assert http.is_server_ready() and http.is_model_ready("simple")
    assert grpc_client.is_server_live() and grpc_client.is_model_ready("simple")
    metadata = http.get_model_metadata("simple", query_params={"test_1": 1, "test_2": 2})
    assert metadata["name"] == "simple"
    assert [t["name"] for t in metadata["inputs"]] == ["INPUT0", "INPUT1"]
    assert grpc_client.get_model_metadata("simple").name == "simple"
    config = http.get_model_config("simple")
    assert config["max_batch_size"] == 8 and config["input"][0]["dims"] == [16]
    for client in (http, grpc_client):
        with pytest.raises(InferenceServerException, match="Request for unknown model"):
            client.get_model_metadata("wrong_model_name")


def test_simple_string_and_simple_identity(http: httpclient.InferenceServerClient,
                                           grpc_client: grpcclient.InferenceServerClient
                                           ) -> None:
    """simple_{http,grpc}_string_infer_client: decimal strings in, their sums out, then the
    same strings through simple_identity, binary and JSON."""
    numbers = np.array([[str(x).encode() for x in ROW[0]]], dtype=np.object_)
    ones = np.array([[b"1"] * 16], dtype=np.object_)
    answer = http.infer("simple_string", http_inputs("BYTES", numbers, ones),
                        outputs=both_outputs())
    assert [int(x) for x in answer.as_numpy("OUTPUT0")[0]] == (ROW[0] + 1).tolist()
    assert [int(x) for x in answer.as_numpy("OUTPUT1")[0]] == (ROW[0] - 1).tolist()
    answer = grpc_client.infer("simple_string", grpc_inputs("BYTES", numbers, ones))
    assert [int(x) for x in answer.as_numpy("OUTPUT0")[0]] == (ROW[0] + 1).tolist()
    for binary in (True, False):
        tensor = httpclient.InferInput("INPUT0", [1, 16], "BYTES")
        tensor.set_data_from_numpy(numbers, binary_data=binary)
        echoed = http.infer("simple_identity", [tensor], outputs=[
            httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)])
        assert [bytes(x) if binary else str(x).encode() for x in
                echoed.as_numpy("OUTPUT0")[0]] == numbers[0].tolist()


def explicit_request(model: str, field: str, datatype: str, first: list[int | bytes],
                     second: list[int | bytes]) -> service_pb2.ModelInferRequest:
    """The grpc_explicit_*_content clients' request: values in ``contents``, not raw."""
    request = service_pb2.ModelInferRequest(model_name=model, model_version="")
    for name, values in (("INPUT0", first), ("INPUT1", second)):
        tensor = service_pb2.ModelInferRequest.InferInputTensor(
            name=name, datatype=datatype, shape=[1, 16])
        getattr(tensor.contents, field).extend(values)
        request.inputs.append(tensor)
    for name in ("OUTPUT0", "OUTPUT1"):
        request.outputs.append(service_pb2.ModelInferRequest.InferRequestedOutputTensor(name=name))
    return request


def test_explicit_content_clients(server: Server) -> None:
    numbers = list(range(16))
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        for model, datatype, dtype in (("simple", "INT32", np.int32),
                                       ("simple_int8", "INT8", np.int8)):
            answer = stub.ModelInfer(explicit_request(model, "int_contents", datatype,
                                                      numbers, [1] * 16))
            total = np.frombuffer(answer.raw_output_contents[0], dtype=dtype)
            assert total.tolist() == [x + 1 for x in numbers]
        answer = stub.ModelInfer(explicit_request(
            "simple_string", "bytes_contents", "BYTES",
            [str(x).encode() for x in numbers], [b"1"] * 16))
        difference = deserialize_bytes_tensor(answer.raw_output_contents[1])
        assert [int(x) for x in difference] == [x - 1 for x in numbers]


def test_simple_int8_wraps_as_triton_s_does(http: httpclient.InferenceServerClient) -> None:
    big = np.full((1, 16), 120, dtype=np.int8)
    answer = http.infer("simple_int8", http_inputs("INT8", big, np.full((1, 16), -10, np.int8)))
    assert answer.as_numpy("OUTPUT0").tolist() == [[110] * 16]
    assert answer.as_numpy("OUTPUT1").tolist() == [[-126] * 16]  # 130 wrapped to int8


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_memory_growth_client_s_identity(server: Server, protocol: str) -> None:
    """memory_growth_test: a fresh client per request, INT32 [1, 16] echoed."""
    module = httpclient if protocol == "http" else grpcclient
    url = server.url if protocol == "http" else server.grpc_url
    for _ in range(5):
        client = module.InferenceServerClient(url)
        tensor = module.InferInput("INPUT0", [1, 16], "INT32")
        tensor.set_data_from_numpy(ROW)
        answer = client.infer("custom_identity_int32", [tensor],
                              outputs=[module.InferRequestedOutput("OUTPUT0")])
        assert answer.as_numpy("OUTPUT0").tolist() == ROW.tolist()
        client.close()


def test_densenet_as_image_client_and_grpc_client_ask(
        repo: Path, server: Server, http: httpclient.InferenceServerClient,
        grpc_client: grpcclient.InferenceServerClient) -> None:
    """image_client reads the config (NCHW, no batching), sends [3, 224, 224] and asks for
    the top class: 'score:index:label' from densenet_labels.txt. grpc_client sends raw bytes."""
    config = grpc_client.get_model_config("densenet_onnx").config
    assert config.max_batch_size == 0
    assert config.input[0].format == config.input[0].FORMAT_NCHW
    assert list(config.input[0].dims) == [3, 224, 224]
    image = np.random.default_rng(3).random((3, 224, 224), dtype=np.float32)
    session = onnxruntime.InferenceSession(str(repo / "densenet_onnx/1/model.onnx"))
    scores = session.run(None, {"data_0": image[np.newaxis]})[0].reshape(1000)
    top = int(np.argmax(scores))
    labels = class_labels().splitlines()
    for module, client in ((httpclient, http), (grpcclient, grpc_client)):
        tensor = module.InferInput("data_0", [3, 224, 224], "FP32")
        tensor.set_data_from_numpy(image)
        answer = client.infer("densenet_onnx", [tensor], outputs=[
            module.InferRequestedOutput("fc6_1", class_count=1)])
        score, index, label = answer.as_numpy("fc6_1")[0].decode().split(":")
        assert (int(index), label) == (top, labels[top])
        assert float(score) == pytest.approx(scores[top], rel=1e-5)
    request = service_pb2.ModelInferRequest(model_name="densenet_onnx", id="my request id")
    request.inputs.append(service_pb2.ModelInferRequest.InferInputTensor(
        name="data_0", datatype="FP32", shape=[3, 224, 224]))
    request.outputs.append(service_pb2.ModelInferRequest.InferRequestedOutputTensor(name="fc6_1"))
    request.raw_input_contents.append(b"a" * 602112)
    with grpc.insecure_channel(server.grpc_url) as channel:
        answer = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request)
    assert answer.id == "my request id" and list(answer.outputs[0].shape) == [1000]


def test_pytorch_stand_in_answers_python_backend_s_client(
        http: httpclient.InferenceServerClient) -> None:
    """python_backend's pytorch and BLS clients: FP32 [4], no batch dimension."""
    first, second = (np.random.default_rng(seed).random(4, dtype=np.float32) for seed in (1, 2))
    inputs = []
    for name, array in (("INPUT0", first), ("INPUT1", second)):
        tensor = httpclient.InferInput(name, [4], "FP32")
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    answer = http.infer("pytorch", inputs, request_id="1")
    assert np.allclose(answer.as_numpy("OUTPUT0"), first + second)
    assert np.allclose(answer.as_numpy("OUTPUT1"), first - second)


@pytest.mark.parametrize(("model", "datatype", "array", "status", "message"), [
    ("simple", "INT32", np.zeros((1, 15), np.int32), 400, "expected [-1,16], got [1,15]"),
    ("simple", "INT32", np.zeros((9, 16), np.int32), 400, "batch size"),
    ("densenet_onnx", "INT32", np.zeros((3, 224, 224), np.int32), 400, "expects FP32"),
    # Triton's simple_string casts each string to a number in the model: a string that is
    # not one fails in onnxruntime, as it does on Triton
    ("simple_string", "BYTES", np.array([[b"abc"] * 16], np.object_), 500, "Cast"),
])
def test_bad_requests_fail_alone(http: httpclient.InferenceServerClient, model: str,
                                 datatype: str, array: np.ndarray, status: int,
                                 message: str) -> None:
    names = ["data_0"] if model == "densenet_onnx" else ["INPUT0", "INPUT1"]
    inputs = []
    for name in names:
        tensor = httpclient.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    with pytest.raises(InferenceServerException) as failed:
        http.infer(model, inputs)
    assert failed.value.status() == str(status) and message in failed.value.message()
    answer = http.infer("simple", http_inputs("INT32", ROW, ONES))
    assert answer.as_numpy("OUTPUT0").tolist() == (ROW + 1).tolist()
