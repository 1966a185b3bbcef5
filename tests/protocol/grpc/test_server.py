"""`modelfn serve --grpc-port` as a real process on 127.0.0.1, driven by tritonclient.grpc.

One server serves REST and gRPC from one process; the tests check what a V2 gRPC client
sees (metadata, inference with raw and typed contents, BYTES, every error status) and
that both protocols reach the same batchers.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import grpc
import httpx
import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as tg
import tritonclient.http as th
from onnx import TensorProto
from onnx_models import failing_graph, identity_graph, save, simple_graph, slow_graph
from prometheus_client.parser import text_string_to_metric_families
from servers import Server, free_port
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

#: small enough to reach in a test, large enough for every other request here
MAX_RECEIVE = 1 << 20
MAX_SEND = 1 << 16
WORDS = ["hello", "wörld", "", "日本語", "x" * 300]

SLOW = """
max_batch_size: 0
instance_group [{ count: 1 kind: KIND_CPU }]
parameters { key: "intra_op_thread_count" value: { string_value: "1" } }
dynamic_batching { default_queue_policy {
  max_queue_size: 2 allow_timeout_override: true default_timeout_microseconds: 600000000 } }
"""
FAILING = (
    'max_batch_size: 0\ninput [{ name: "X" data_type: TYPE_FP32 dims: [-1, 4] },'
    '{ name: "target" data_type: TYPE_INT64 dims: [-1] }]\n'
    'output [{ name: "Y" data_type: TYPE_FP32 dims: [-1] }]\n'
    'model_warmup [{ name: "w" batch_size: 1 inputs { key: "X" value: '
    '{ data_type: TYPE_FP32 dims: [1, 4] zero_data: true } } inputs { key: "target" '
    'value: { data_type: TYPE_INT64 dims: [1] input_data_file: "four" } } }]\n'
)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("grpc") / "models"
    save(root / "simple", simple_graph(width=16), config=(
        'name: "simple"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 32\n'
        "dynamic_batching {}\n"
        'instance_group [{ count: 1 kind: KIND_CPU }]\n'))
    # a batch runs only once it has two requests (or after 10 minutes): two requests that
    # finish together were batched together
    save(root / "pair", simple_graph(width=4), config=(
        'name: "pair"\nmax_batch_size: 2\n'
        "dynamic_batching { preferred_batch_size: [2] max_queue_delay_microseconds: 600000000 }\n"
        'instance_group [{ count: 1 kind: KIND_CPU }]\n'))
    save(root / "strings", identity_graph(TensorProto.STRING, ["N", 2]),
         config='name: "strings"\nmax_batch_size: 8\ndynamic_batching {}\n')
    save(root / "echo", identity_graph(TensorProto.FLOAT, ["N", "M"]),
         config='name: "echo"\nmax_batch_size: 0\n')
    save(root / "slow", slow_graph(), config=SLOW)
    save(root / "failing", failing_graph(), config=FAILING)
    (root / "failing" / "warmup").mkdir()
    (root / "failing" / "warmup" / "four").write_bytes(np.array([4], np.int64).tobytes())
    return root


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[Server]:
    srv = Server(repo, "--grpc-max-receive-bytes", str(MAX_RECEIVE),
                 "--grpc-max-send-bytes", str(MAX_SEND), grpc=True)
    try:
        srv.wait_ready(timeout=90)
        yield srv
    finally:
        log = srv.stop()
        assert srv.proc.returncode == 0, log
        assert "drained after SIGTERM" in log


@pytest.fixture
def client(server: Server) -> Iterator[tg.InferenceServerClient]:
    with tg.InferenceServerClient(server.grpc_url) as c:
        yield c


@pytest.fixture(scope="module")
def reference(repo: Path) -> ort.InferenceSession:
    return ort.InferenceSession(str(repo / "simple" / "1" / "model.onnx"))


def simple_inputs(a: np.ndarray, b: np.ndarray) -> list[tg.InferInput]:
    inputs = [tg.InferInput("INPUT0", list(a.shape), "FP32"),
              tg.InferInput("INPUT1", list(b.shape), "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs


def refused(call: Callable[[], Any], code: grpc.StatusCode, match: str) -> str:
    with pytest.raises(InferenceServerException) as info:
        call()
    assert info.value.status() == str(code), info.value
    assert match in (info.value.message() or ""), info.value
    return info.value.message() or ""


def stats(client: tg.InferenceServerClient, model: str) -> Any:
    """The model's ModelStatistics message."""
    found = client.get_inference_statistics(model).model_stats
    assert len(found) == 1
    return found[0]


def pending(server: Server, model: str) -> int:
    text = httpx.get(f"http://{server.url}/metrics").text
    return int(sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
                   if s.name == "nv_inference_pending_request_count"
                   and s.labels.get("model") == model))


def wait_until(check: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


# ------------------------------------------------------------------ health and metadata
def test_health_and_metadata(client: tg.InferenceServerClient) -> None:
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("simple") and client.is_model_ready("simple", "1")
    server = client.get_server_metadata(as_json=True)
    assert server["name"] == "modelfn" and "statistics" in server["extensions"]
    meta = client.get_model_metadata("simple", as_json=True)
    assert meta["versions"] == ["1"] and meta["platform"] == "onnxruntime_onnx"
    assert meta["inputs"][0] == {"name": "INPUT0", "datatype": "FP32", "shape": ["-1", "16"]}
    assert [o["name"] for o in meta["outputs"]] == ["OUTPUT0", "OUTPUT1"]


def test_model_config_is_the_completed_config(client: tg.InferenceServerClient) -> None:
    config = client.get_model_config("simple").config
    assert (config.name, config.platform, config.backend) == (
        "simple", "onnxruntime_onnx", "onnxruntime")
    assert config.max_batch_size == 32
    assert [(i.name, i.data_type, list(i.dims)) for i in config.input] == [
        ("INPUT0", tg.model_config_pb2.TYPE_FP32, [16]),
        ("INPUT1", tg.model_config_pb2.TYPE_FP32, [16])]
    assert config.HasField("dynamic_batching")
    assert [(g.count, g.kind) for g in config.instance_group] == [
        (1, tg.model_config_pb2.ModelInstanceGroup.KIND_CPU)]
    assert config.version_policy.latest.num_versions == 1
    pair = client.get_model_config("pair").config.dynamic_batching
    assert list(pair.preferred_batch_size) == [2]
    assert pair.max_queue_delay_microseconds == 600000000
    slow = client.get_model_config("slow").config
    assert slow.dynamic_batching.default_queue_policy.max_queue_size == 2
    assert slow.parameters["intra_op_thread_count"].string_value == "1"


def test_repository_index(client: tg.InferenceServerClient) -> None:
    index = client.get_model_repository_index(as_json=True)["models"]
    assert {m["name"] for m in index} == {"simple", "pair", "strings", "echo", "slow", "failing"}
    assert all(m["state"] == "READY" and m["version"] == "1" for m in index)


# ------------------------------------------------------------------ inference
def test_raw_contents_match_onnxruntime(client: tg.InferenceServerClient,
                                        reference: ort.InferenceSession) -> None:
    rng = np.random.default_rng(7)
    a = rng.standard_normal((4, 16), dtype=np.float32)
    b = rng.standard_normal((4, 16), dtype=np.float32)
    result = client.infer("simple", simple_inputs(a, b), request_id="abc")
    expected = reference.run(None, {"INPUT0": a, "INPUT1": b})
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), expected[0])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), expected[1])
    response = result.get_response()
    assert (response.model_name, response.model_version, response.id) == ("simple", "1", "abc")
    only = client.infer("simple", simple_inputs(a, b), model_version="1",
                        outputs=[tg.InferRequestedOutput("OUTPUT1")])
    assert [o.name for o in only.get_response().outputs] == ["OUTPUT1"]
    np.testing.assert_array_equal(only.as_numpy("OUTPUT1"), expected[1])


def test_typed_contents_match_onnxruntime(server: Server,
                                          reference: ort.InferenceSession) -> None:
    a = np.arange(32, dtype=np.float32).reshape(2, 16) / 7
    b = np.full((2, 16), -1.5, np.float32)
    request = service_pb2.ModelInferRequest(model_name="simple", id="typed")
    for name, array in (("INPUT0", a), ("INPUT1", b)):
        tensor = request.inputs.add(name=name, datatype="FP32", shape=array.shape)
        tensor.contents.fp32_contents.extend(array.ravel().tolist())
    with grpc.insecure_channel(server.grpc_url) as channel:
        response = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request)
    result = tg.InferResult(response)
    expected = reference.run(None, {"INPUT0": a, "INPUT1": b})
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), expected[0])
    assert response.id == "typed" and len(response.raw_output_contents) == 2


def test_bytes_raw_and_typed(server: Server, client: tg.InferenceServerClient) -> None:
    words = np.array([[w.encode(), (w + "!").encode()] for w in WORDS], dtype=object)
    tensor = tg.InferInput("IN", list(words.shape), "BYTES")
    tensor.set_data_from_numpy(words)
    result = client.infer("strings", [tensor])
    assert result.as_numpy("OUT").tolist() == words.tolist()
    # typed: bytes_contents, one element each, no length prefixes
    request = service_pb2.ModelInferRequest(model_name="strings")
    typed = request.inputs.add(name="IN", datatype="BYTES", shape=words.shape)
    typed.contents.bytes_contents.extend(words.ravel().tolist())
    with grpc.insecure_channel(server.grpc_url) as channel:
        response = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request)
    assert tg.InferResult(response).as_numpy("OUT").tolist() == words.tolist()


def test_classification(client: tg.InferenceServerClient) -> None:
    a = np.array([[0, 5, 1, 9] + [0] * 12], np.float32)
    result = client.infer("simple", simple_inputs(a, np.zeros_like(a)),
                          outputs=[tg.InferRequestedOutput("OUTPUT0", class_count=2)])
    assert result.as_numpy("OUTPUT0").tolist() == [[b"9.000000:3", b"5.000000:1"]]


def test_concurrent_callers_share_batches(client: tg.InferenceServerClient,
                                          server: Server,
                                          reference: ort.InferenceSession) -> None:
    before = stats(client, "simple")
    workers, per_worker = 32, 25

    def worker(seed: int) -> int:
        rng = np.random.default_rng(seed)
        with tg.InferenceServerClient(server.grpc_url) as own:
            for _ in range(per_worker):
                a = rng.standard_normal((1, 16), dtype=np.float32)
                b = np.full((1, 16), seed, dtype=np.float32)  # tags the caller
                result = own.infer("simple", simple_inputs(a, b))
                expected = reference.run(None, {"INPUT0": a, "INPUT1": b})
                np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), expected[0])
        return per_worker

    with ThreadPoolExecutor(workers) as pool:
        assert sum(pool.map(worker, range(workers))) == workers * per_worker
    after = stats(client, "simple")
    count = after.inference_count - before.inference_count
    execs = after.execution_count - before.execution_count
    assert count == workers * per_worker
    assert execs < count, "concurrent requests should have been batched together"


def test_rest_and_grpc_requests_share_one_batcher(client: tg.InferenceServerClient,
                                                  server: Server) -> None:
    """'pair' runs a batch only when two requests wait, or after ten minutes: one REST and
    one gRPC request that both come back were answered by one batch of two."""
    before = stats(client, "pair")
    a = np.ones((1, 4), np.float32)

    def over_grpc() -> np.ndarray:
        with tg.InferenceServerClient(server.grpc_url) as own:
            result = own.infer("pair", simple_inputs(a, 2 * a))
            return np.asarray(result.as_numpy("OUTPUT0"))

    def over_rest() -> np.ndarray:
        rest = th.InferenceServerClient(server.url, network_timeout=600)
        inputs = [th.InferInput("INPUT0", [1, 4], "FP32"), th.InferInput("INPUT1", [1, 4], "FP32")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(3 * a)
        try:
            return np.asarray(rest.infer("pair", inputs).as_numpy("OUTPUT0"))
        finally:
            rest.close()

    with ThreadPoolExecutor(2) as pool:
        by_grpc, by_rest = pool.submit(over_grpc), pool.submit(over_rest)
        np.testing.assert_array_equal(by_grpc.result(), 3 * a)
        np.testing.assert_array_equal(by_rest.result(), 4 * a)
    after = stats(client, "pair")
    assert after.execution_count - before.execution_count == 1
    assert after.inference_count - before.inference_count == 2
    assert [b.batch_size for b in after.batch_stats] == [2]
    # the same record over REST: one model version, one batcher, one set of statistics
    rest = httpx.get(f"http://{server.url}/v2/models/pair/stats").json()["model_stats"][0]
    assert rest["execution_count"] == after.execution_count


# ------------------------------------------------------------------ errors
def test_unknown_model_or_version_is_not_found(client: tg.InferenceServerClient) -> None:
    a = np.ones((1, 16), np.float32)
    refused(lambda: client.infer("nope", simple_inputs(a, a)), grpc.StatusCode.NOT_FOUND,
            "Request for unknown model: 'nope' is not found")
    refused(lambda: client.infer("simple", simple_inputs(a, a), model_version="7"),
            grpc.StatusCode.NOT_FOUND, "'simple' version 7 is not found")
    refused(lambda: client.get_model_metadata("nope"), grpc.StatusCode.NOT_FOUND, "nope")


def test_model_ready_for_an_unknown_model_or_version_is_false(
        client: tg.InferenceServerClient) -> None:
    """Triton's ModelIsReady: ready false, status OK, for what it does not serve."""
    assert client.is_model_ready("nope") is False
    assert client.is_model_ready("simple", "7") is False
    assert client.is_model_ready("simple") is True


def test_versions_are_read_as_triton_reads_them(client: tg.InferenceServerClient) -> None:
    """std::stol: "01" and "+1" are version 1; no number, or a negative one, is invalid."""
    a = np.ones((1, 16), np.float32)
    assert client.get_model_metadata("simple", "01", as_json=True)["versions"] == ["1"]
    assert client.get_model_config("simple", "+1").config.name == "simple"
    assert client.is_model_ready("simple", "01") is True
    result = client.infer("simple", simple_inputs(a, a), model_version="001")
    assert result.get_response().model_version == "1"
    [found] = client.get_inference_statistics("simple", "01").model_stats
    assert found.version == "1"
    refused(lambda: client.infer("simple", simple_inputs(a, a), model_version="abc"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "failed to get model version from specified version string 'abc' (details: stol), "
            "version should be an integral value > 0")
    for call in (lambda: client.is_model_ready("simple", "-1"),
                 lambda: client.get_model_metadata("simple", "-1"),
                 lambda: client.get_model_config("simple", "-1"),
                 lambda: client.get_inference_statistics("simple", "-1")):
        refused(call, grpc.StatusCode.INVALID_ARGUMENT,
                "invalid model version specified '-1' , version should be an integral value > 0")
    refused(lambda: client.get_model_metadata("simple", "2"), grpc.StatusCode.NOT_FOUND,
            "'simple' version 2 is not found")


def test_bad_inputs_are_invalid_argument(client: tg.InferenceServerClient) -> None:
    a = np.ones((1, 15), np.float32)
    refused(lambda: client.infer("simple", simple_inputs(a, a)),
            grpc.StatusCode.INVALID_ARGUMENT,
            "unexpected shape for input 'INPUT0' for model 'simple': expected [-1,16], got [1,15]")
    ints = np.ones((1, 16), np.int32)
    wrong = [tg.InferInput("INPUT0", [1, 16], "INT32"), tg.InferInput("INPUT1", [1, 16], "INT32")]
    wrong[0].set_data_from_numpy(ints)
    wrong[1].set_data_from_numpy(ints)
    refused(lambda: client.infer("simple", wrong), grpc.StatusCode.INVALID_ARGUMENT,
            "input 'INPUT0' has datatype INT32 but the model expects FP32")
    refused(lambda: client.infer("simple", simple_inputs(np.ones((33, 16), np.float32),
                                                         np.ones((33, 16), np.float32))),
            grpc.StatusCode.INVALID_ARGUMENT, "the model takes 1 to 32")
    text = tg.InferInput("IN", [1, 2], "BYTES")
    text.set_data_from_numpy(np.array([[b"ok", b"\xff"]], dtype=object))
    refused(lambda: client.infer("strings", [text]), grpc.StatusCode.INVALID_ARGUMENT,
            "BYTES element 1 is not valid UTF-8")
    assert client.infer("simple", simple_inputs(np.ones((1, 16), np.float32),
                                                np.ones((1, 16), np.float32))).as_numpy("OUTPUT0") \
        is not None


def test_messages_over_the_limits_are_resource_exhausted(client: tg.InferenceServerClient) -> None:
    def echo(elements: int) -> Any:
        tensor = tg.InferInput("IN", [1, elements], "FP32")
        tensor.set_data_from_numpy(np.ones((1, elements), np.float32))
        return client.infer("echo", [tensor])

    refused(lambda: echo(MAX_RECEIVE // 4 + 1024), grpc.StatusCode.RESOURCE_EXHAUSTED,
            "larger than max")
    message = refused(lambda: echo(MAX_SEND // 4 + 1024), grpc.StatusCode.RESOURCE_EXHAUSTED,
                      f"exceeds the server's limit of {MAX_SEND} bytes per message")
    assert "The response of" in message
    assert echo(16).as_numpy("OUT").shape == (1, 16)


def test_an_answer_refused_for_size_counts_once_as_the_models_success(
        client: tg.InferenceServerClient) -> None:
    """The model answered; gRPC then refuses to send an answer over MAX_SEND. Triton's core
    has counted the success by then, and so has modelfn: one request, counted once."""
    before = stats(client, "echo").inference_stats
    tensor = tg.InferInput("IN", [1, MAX_SEND // 4], "FP32")
    tensor.set_data_from_numpy(np.ones((1, MAX_SEND // 4), np.float32))
    refused(lambda: client.infer("echo", [tensor]), grpc.StatusCode.RESOURCE_EXHAUSTED,
            "The response of")
    after = stats(client, "echo").inference_stats
    assert (after.success.count - before.success.count,
            after.fail.count - before.fail.count) == (1, 0)


def test_shared_memory_is_unimplemented_beside_raw_inputs(server: Server) -> None:
    """One input in shared memory, the other raw: shared memory is the refusal, not the
    count of raw_input_contents."""
    request = service_pb2.ModelInferRequest(model_name="simple")
    shm = request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 16])
    shm.parameters["shared_memory_region"].string_param = "in0"
    shm.parameters["shared_memory_byte_size"].int64_param = 64
    request.inputs.add(name="INPUT1", datatype="FP32", shape=[1, 16])
    request.raw_input_contents.append(np.zeros((1, 16), np.float32).tobytes())
    with grpc.insecure_channel(server.grpc_url) as channel, \
            pytest.raises(grpc.RpcError) as info:
        service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request)
    assert info.value.code() is grpc.StatusCode.UNIMPLEMENTED
    assert info.value.details() == "input 'INPUT0' uses shared memory, which is not supported"


def test_a_failing_model_is_internal(client: tg.InferenceServerClient) -> None:
    inputs = [tg.InferInput("X", [1, 4], "FP32"), tg.InferInput("target", [1], "INT64")]
    inputs[0].set_data_from_numpy(np.ones((1, 4), np.float32))
    inputs[1].set_data_from_numpy(np.array([3], np.int64))
    refused(lambda: client.infer("failing", inputs), grpc.StatusCode.INTERNAL, "Reshape")


def test_unserved_rpcs_are_unimplemented(client: tg.InferenceServerClient) -> None:
    refused(client.get_system_shared_memory_status, grpc.StatusCode.UNIMPLEMENTED, "")


def test_a_very_long_name_is_not_found_not_a_broken_status(
        client: tg.InferenceServerClient) -> None:
    """The status message repeats the name; over gRPC's 16 KiB trailer limit the client
    saw RESOURCE_EXHAUSTED instead of NOT_FOUND. The message is cut to 4 KiB."""
    message = refused(lambda: client.get_model_metadata("x" * 20_000),
                      grpc.StatusCode.NOT_FOUND, "xxxx")
    assert len(message.encode()) <= 4096 and message.endswith("...")
    refused(lambda: client.get_model_metadata("simple", "1" * 20_000),
            grpc.StatusCode.INVALID_ARGUMENT, "")


def test_a_rest_port_in_use_stops_grpc_before_exiting(repo: Path) -> None:
    """uvicorn exits (status 3) when it cannot bind; the gRPC server started before it
    is stopped first, not left to be collected after the loop has closed. (`modelfn serve`
    refuses a busy port before loading, so this runs the server itself: the port can
    still be taken between that check and the bind.)"""
    code = ("import logging, sys\n"
            "from pathlib import Path\n"
            "from modelfn.handlers.http import run\n"
            "from modelfn.runtime.repository import open_repository\n"
            "logging.basicConfig(level='INFO')\n"
            "run(open_repository(Path(sys.argv[1]), ['simple']), host='127.0.0.1',\n"
            "    port=int(sys.argv[2]), grpc_port=int(sys.argv[3]))\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        rest_port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-c", code, str(repo), str(rest_port), str(free_port())],
            capture_output=True, text=True, timeout=120, check=False)
    out = done.stdout + done.stderr
    assert done.returncode == 3, out
    assert "address already in use" in out
    assert "REST did not start: stopping gRPC" in out
    assert "Exception ignored" not in out and "Traceback" not in out, out


class Slow:
    """Requests to 'slow' (one instance, one at a time, max_queue_size 2) in flight."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.pool = ThreadPoolExecutor(8)

    def send(self, value: float = 1.0, **kw: Any) -> Any:
        def call() -> np.ndarray:
            with tg.InferenceServerClient(self.server.grpc_url) as own:
                tensor = tg.InferInput("x", [1, 1], "FP32")
                tensor.set_data_from_numpy(np.full((1, 1), value, np.float32))
                return np.asarray(own.infer("slow", [tensor], **kw).as_numpy("y"))
        return self.pool.submit(call)

    def busy(self, queued: int) -> list[Any]:
        """One request running and ``queued`` waiting behind it."""
        futures = [self.send(float(i + 1)) for i in range(queued + 1)]
        wait_until(lambda: pending(self.server, "slow") == queued,
                   f"{queued} requests should queue behind the running one")
        return futures


def test_a_full_queue_is_unavailable(server: Server, client: tg.InferenceServerClient) -> None:
    slow = Slow(server)
    futures = slow.busy(queued=2)
    with pytest.raises(InferenceServerException) as info:
        slow.send().result()
    assert info.value.status() == str(grpc.StatusCode.UNAVAILABLE)
    assert info.value.message() == "Exceeds maximum queue size"
    assert [float(f.result()[0, 0]) for f in futures] == pytest.approx([1.0, 2.0, 3.0])
    assert float(slow.send(5.0).result()[0, 0]) == pytest.approx(5.0)


def test_queue_timeouts_are_unavailable_and_deadlines_deadline_exceeded(
        server: Server, client: tg.InferenceServerClient) -> None:
    slow = Slow(server)
    futures = slow.busy(queued=1)
    # the request's queue timeout (microseconds) expires: Triton's dynamic batcher rejects
    # it with UNAVAILABLE
    with pytest.raises(InferenceServerException) as info:
        slow.send(timeout=1000).result()
    assert info.value.status() == str(grpc.StatusCode.UNAVAILABLE)
    assert info.value.message() == "Request timeout expired"
    # the client's deadline passes while its request waits behind two slow ones
    with pytest.raises(InferenceServerException) as info:
        slow.send(client_timeout=0.1).result()
    assert info.value.status() == str(grpc.StatusCode.DEADLINE_EXCEEDED)
    assert [float(f.result()[0, 0]) for f in futures] == pytest.approx([1.0, 2.0])
    # the abandoned request left the queue: the model keeps answering
    wait_until(lambda: pending(server, "slow") == 0, "the expired requests should leave")
    assert float(slow.send(7.0).result()[0, 0]) == pytest.approx(7.0)
    assert stats(client, "slow").inference_stats.fail.count >= 2


def test_calls_that_arrived_before_sigterm_are_answered(repo: Path) -> None:
    """grpc core cancels the calls it holds but has not handed to a handler when the
    server stops: 49 of 50 calls that arrived while the server was busy (here: stopped
    with SIGSTOP) came back CANCELLED after a SIGTERM. The server now settles first,
    handing them over, and drains them."""
    import os
    import signal

    srv = Server(repo, grpc=True)
    srv.wait_ready()
    x = np.ones((1, 16), np.float32)

    def call() -> str:
        with tg.InferenceServerClient(srv.grpc_url) as own:
            tensors = [tg.InferInput(name, [1, 16], "FP32") for name in ("INPUT0", "INPUT1")]
            for tensor in tensors:
                tensor.set_data_from_numpy(x)
            try:
                own.infer("simple", tensors, client_timeout=60)
            except InferenceServerException as exc:
                return str(exc.status())
            return "OK"

    call()  # warm
    pool = ThreadPoolExecutor(20)
    os.kill(srv.proc.pid, signal.SIGSTOP)
    try:
        futures = [pool.submit(call) for _ in range(20)]
        time.sleep(1.0)  # the calls reach the stopped server's kernel queue and grpc core
    finally:
        os.kill(srv.proc.pid, signal.SIGTERM)
        os.kill(srv.proc.pid, signal.SIGCONT)
    outcomes = [f.result(timeout=60) for f in futures]
    pool.shutdown()
    assert srv.proc.wait(60) == 0, srv.proc.tail()
    assert outcomes == ["OK"] * 20, outcomes
