"""``modelfn.handlers.aws_lambda.handler`` in the real awslambdaric, behind a function URL.

The Runtime API emulator runs the handler as Lambda does (a child process per execution
environment, the module imported once at init); the function URL front turns HTTP into
payload 2.0 events. No mocks: the models are tiny real ONNX files.
"""

from __future__ import annotations

import base64
import gzip
import json
import logging
import os
import re
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.http as triton
from onnx import TensorProto, helper
from onnx_models import save

from modelfn.localstack.function_url import FunctionUrl, build_event
from modelfn.localstack.lambda_service import FunctionConfig, LambdaFunction
from modelfn.model_store import open_store

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from modelfn.localstack.lambda_service import InvocationResult

HANDLER = "modelfn.handlers.aws_lambda.handler"
EVENTS = Path(__file__).parents[1] / "events"
LIMIT = 6 * 1024 * 1024
WEIGHTS = (np.arange(12, dtype=np.float32).reshape(4, 3) - 5) / 10
#: the variables a function reads, blank unless a test sets them (the parent's must not leak)
HERMETIC = dict.fromkeys(
    ("MODELFN_REPOSITORY", "MODELFN_STORE", "MODELFN_MODELS", "MODELFN_MAX_BODY_BYTES"), "")
_CHILD_LINE = re.compile(r"\[(?P<name>\S+) (?P<pid>\d+)\] (?P<line>.*)", re.DOTALL)


def digits_graph() -> object:
    """The model the canned events call: ``output = input @ W``, [N, 4] -> [N, 3]."""
    return helper.make_graph(
        [helper.make_node("MatMul", ["input", "W"], ["output"])],
        "digits",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 3])],
        initializer=[helper.make_tensor("W", TensorProto.FLOAT, [4, 3], WEIGHTS.tobytes(),
                                        raw=True)],
    )


def expand_graph() -> object:
    """``Y = X`` repeated ``COUNT`` times: a tiny request with an output as big as asked.

    A negative ``COUNT`` makes ONNX Runtime fail: the backend error path.
    """
    return helper.make_graph(
        [helper.make_node("Expand", ["X", "COUNT"], ["Y"])],
        "expand",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1]),
         helper.make_tensor_value_info("COUNT", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["M"])],
    )


def make_repo(root: Path) -> Path:
    save(root / "digits", digits_graph())
    save(root / "expand", expand_graph())
    return root


def load_event(name: str) -> dict[str, Any]:
    event: dict[str, Any] = json.loads((EVENTS / f"{name}.json").read_text())
    return event


def http_event(method: str, path: str, body: bytes = b"",
               content_type: str = "application/json") -> dict[str, Any]:
    headers = [("content-type", content_type)] if body else []
    return build_event(method=method, raw_path=path, raw_query="", headers=headers, body=body,
                       source_ip="127.0.0.1", request_id="test", function_name="modelfn",
                       region="us-east-1")


def infer_json(*inputs: tuple[str, list[int], str, list[Any]],
               binary_outputs: tuple[str, ...] = ()) -> bytes:
    request: dict[str, Any] = {"inputs": [
        {"name": name, "shape": shape, "datatype": datatype, "data": data}
        for name, shape, datatype, data in inputs
    ]}
    if binary_outputs:
        request["outputs"] = [{"name": n, "parameters": {"binary_data": True}}
                              for n in binary_outputs]
    return json.dumps(request).encode()


def lambda_function(root: Path, name: str, **env: str) -> LambdaFunction:
    """The handler as a function over ``root/models``; ``env`` adds to (or blanks) variables."""
    return LambdaFunction(FunctionConfig(
        HANDLER, task_root=root, name=name, timeout=60,
        env={**HERMETIC, "MODELFN_REPOSITORY": str(root / "models"), **env},
    ))


def child_lines(caplog: pytest.LogCaptureFixture, name: str) -> list[tuple[int, dict[str, Any]]]:
    """The JSON lines (logs and EMF) function ``name`` printed, with the pid that printed them."""
    lines = []
    for record in caplog.records:
        match = _CHILD_LINE.fullmatch(record.getMessage())
        if match and match["name"] == name and match["line"].lstrip().startswith("{"):
            lines.append((int(match["pid"]), json.loads(match["line"])))
    return lines


def wait_for_lines(caplog: pytest.LogCaptureFixture, name: str,
                   done: Callable[[list[dict[str, Any]]], bool]
                   ) -> list[tuple[int, dict[str, Any]]]:
    """The child's output reaches us through a pipe and a thread: wait until it has."""
    deadline = time.monotonic() + 30
    while True:
        lines = child_lines(caplog, name)
        if done([line for _, line in lines]):
            return lines
        assert time.monotonic() < deadline, f"missing output from {name}: {lines}"
        time.sleep(0.02)


def response_of(result: InvocationResult) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and decoded body of a handler's payload 2.0 response."""
    assert result.ok, result.error
    doc = result.json()
    body = base64.b64decode(doc["body"]) if doc["isBase64Encoded"] else doc["body"].encode()
    return doc["statusCode"], doc.get("headers", {}), body


def split_binary(body: bytes, headers: dict[str, str] | httpx.Headers
                 ) -> tuple[dict[str, Any], bytes]:
    length = int(headers["inference-header-content-length"])
    header: dict[str, Any] = json.loads(body[:length])
    return header, body[length:]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("function")
    make_repo(root / "models")
    return root


@pytest.fixture(scope="module")
def reference(root: Path) -> Callable[[np.ndarray], np.ndarray]:
    """The digits model run by onnxruntime itself, to compare answers with."""
    model = root / "models" / "digits" / "1" / "model.onnx"
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])

    def run(batch: np.ndarray) -> np.ndarray:
        (out,) = session.run(None, {"input": batch})
        return np.asarray(out)

    return run


@pytest.fixture(scope="module")
def function(root: Path) -> Iterator[LambdaFunction]:
    with lambda_function(root, "modelfn") as fn:
        yield fn


@pytest.fixture(scope="module")
def url(function: LambdaFunction) -> Iterator[str]:
    with FunctionUrl(function) as front:
        yield front.url


@pytest.fixture
def client(url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=url, timeout=60) as http:
        yield http


# --- canned events, invoked directly -------------------------------------------------------


def test_canned_ready_event(function: LambdaFunction) -> None:
    status, headers, body = response_of(function.invoke(load_event("function_url_get")))
    assert status == 200
    assert headers["content-type"] == "application/json"
    assert json.loads(body) == {"name": "digits", "ready": True}


def test_canned_json_infer_event_is_answered_in_json_text(
    function: LambdaFunction, reference: Callable[[np.ndarray], np.ndarray]
) -> None:
    event = load_event("function_url_post_json")
    # the canned caller accepts gzip (as curl --compressed, browsers and Go do): as Triton
    # does, the answer is gzip, base64 in the payload
    assert event["headers"]["accept-encoding"] == "gzip, deflate"
    status, headers, body = response_of(function.invoke(event))
    assert status == 200 and headers["content-encoding"] == "gzip"
    assert json.loads(gzip.decompress(body))["id"] == "42"
    del event["headers"]["accept-encoding"]
    result = function.invoke(event)
    assert result.json()["isBase64Encoded"] is False
    status, headers, body = response_of(result)
    assert status == 200 and headers["content-type"] == "application/json"
    answer = json.loads(body)
    assert answer["id"] == "42" and answer["model_name"] == "digits"
    expected = reference(np.array([[0.1, 0.2, 0.3, 0.4]], np.float32))
    (output,) = answer["outputs"]
    assert output["name"] == "output" and output["shape"] == [1, 3]
    np.testing.assert_allclose(output["data"], expected.ravel(), rtol=1e-6)


def test_canned_binary_infer_event_is_answered_in_base64(
    function: LambdaFunction, reference: Callable[[np.ndarray], np.ndarray]
) -> None:
    result = function.invoke(load_event("function_url_post_binary"))
    assert result.json()["isBase64Encoded"] is True
    status, headers, body = response_of(result)
    assert status == 200 and headers["content-type"] == "application/octet-stream"
    header, raw = split_binary(body, headers)
    assert header["model_version"] == "1"
    assert header["outputs"][0]["parameters"]["binary_data_size"] == 12
    expected = reference(np.array([[0.1, 0.2, 0.3, 0.4]], np.float32))
    np.testing.assert_array_equal(np.frombuffer(raw, np.float32).reshape(1, 3), expected)


def test_an_event_that_is_no_http_request_is_a_function_error(function: LambdaFunction) -> None:
    result = function.invoke({"hello": "world"})
    assert result.error is not None and "is not an HTTP request" in result.error.error_message
    assert function.invoke(load_event("function_url_get")).ok  # and the function lives on


# --- through the function URL ----------------------------------------------------------------


def test_httpx_json_infer_matches_onnxruntime(
    client: httpx.Client, reference: Callable[[np.ndarray], np.ndarray]
) -> None:
    batch = np.random.default_rng(0).random((3, 4), dtype=np.float32)
    response = client.post("/v2/models/digits/infer", content=infer_json(
        ("input", [3, 4], "FP32", batch.ravel().tolist())))
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    (output,) = response.json()["outputs"]
    assert output["shape"] == [3, 3]
    np.testing.assert_allclose(np.array(output["data"]).reshape(3, 3), reference(batch), rtol=1e-6)


def test_httpx_binary_request_and_response_survive_base64(
    client: httpx.Client, reference: Callable[[np.ndarray], np.ndarray]
) -> None:
    batch = np.random.default_rng(1).random((2, 4), dtype=np.float32)
    header = json.dumps({
        "inputs": [{"name": "input", "shape": [2, 4], "datatype": "FP32",
                    "parameters": {"binary_data_size": batch.nbytes}}],
        "outputs": [{"name": "output", "parameters": {"binary_data": True}}],
    }).encode()
    response = client.post(
        "/v2/models/digits/versions/1/infer", content=header + batch.tobytes(),
        headers={"content-type": "application/octet-stream",
                 "inference-header-content-length": str(len(header))},
    )
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/octet-stream"
    answer, raw = split_binary(response.content, response.headers)
    assert answer["outputs"][0]["shape"] == [2, 3]
    np.testing.assert_array_equal(np.frombuffer(raw, np.float32).reshape(2, 3), reference(batch))


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_tritonclient_through_the_function_url(
    url: str, binary: bool, reference: Callable[[np.ndarray], np.ndarray]
) -> None:
    client = triton.InferenceServerClient(url.removeprefix("http://"))
    try:
        assert client.is_server_ready() and client.is_model_ready("digits")
        assert client.get_model_metadata("digits")["inputs"][0]["shape"] == [-1, 4]
        batch = np.random.default_rng(2).random((4, 4), dtype=np.float32)
        tensor = triton.InferInput("input", [4, 4], "FP32")
        tensor.set_data_from_numpy(batch, binary_data=binary)
        result = client.infer("digits", [tensor], outputs=[
            triton.InferRequestedOutput("output", binary_data=binary)])
        np.testing.assert_allclose(result.as_numpy("output"), reference(batch), rtol=1e-6)
    finally:
        client.close()


def test_unknown_model_is_a_404_error_not_a_crash(client: httpx.Client) -> None:
    response = client.post("/v2/models/nope/infer", content=infer_json(
        ("input", [1, 4], "FP32", [1, 2, 3, 4])))
    assert response.status_code == 404
    assert response.json() == {"error": "Request for unknown model: 'nope' is not found"}
    assert client.get("/v2/health/ready").status_code == 200


def test_a_failing_backend_is_a_500_error_not_a_crash(
    client: httpx.Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="modelfn.localstack.lambda_service")
    response = client.post("/v2/models/expand/infer", content=infer_json(
        ("X", [1], "FP32", [1.0]), ("COUNT", [1], "INT64", [-5])))
    assert response.status_code == 500
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert error.startswith("onnxruntime failed") and "Expand" in error
    assert client.get("/v2/models/expand/ready").status_code == 200
    lines = wait_for_lines(caplog, "modelfn", lambda out: any(
        "InferenceFailures" in line for line in out))
    (failure,) = [line for _, line in lines if "InferenceFailures" in line]
    assert failure["model"] == "expand" and failure["InferenceFailures"] == [1.0]
    assert "ModelLatency" not in failure


# --- the 6 MB limits -----------------------------------------------------------------------


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_a_response_over_six_megabytes_is_a_413_error(client: httpx.Client, binary: bool) -> None:
    response = client.post("/v2/models/expand/infer", content=infer_json(
        ("X", [1], "FP32", [1.5]), ("COUNT", [1], "INT64", [2_000_000]),
        binary_outputs=("Y",) if binary else ()),
        headers={"accept-encoding": "identity"})  # gzip would make it fit
    assert response.status_code == 413
    error = response.json()["error"]
    assert f"exceeds the Lambda response limit of {LIMIT} bytes" in error


def test_a_four_megabyte_binary_output_fits_once_base64_encoded(client: httpx.Client) -> None:
    count = 1_000_000
    response = client.post("/v2/models/expand/infer", content=infer_json(
        ("X", [1], "FP32", [1.5]), ("COUNT", [1], "INT64", [count]), binary_outputs=("Y",)))
    assert response.status_code == 200
    header, raw = split_binary(response.content, response.headers)
    assert header["outputs"][0]["shape"] == [count]
    np.testing.assert_array_equal(np.frombuffer(raw, np.float32), np.full(count, 1.5, np.float32))


def test_a_request_over_six_megabytes_is_a_413(client: httpx.Client) -> None:
    data = [0.5] * 4 * 400_000
    body = infer_json(("input", [400_000, 4], "FP32", data))
    assert len(body) > LIMIT
    assert client.post("/v2/models/digits/infer", content=body).status_code == 413


def test_a_request_over_the_body_limit_is_a_413_error_from_the_app(tmp_path: Path) -> None:
    make_repo(tmp_path / "models")
    with lambda_function(tmp_path, "small", MODELFN_MAX_BODY_BYTES="4096") as fn:
        body = infer_json(("input", [200, 4], "FP32", [0.25] * 800))
        status, _, answer = response_of(fn.invoke(
            http_event("POST", "/v2/models/digits/infer", body)))
        assert status == 413
        assert json.loads(answer) == {
            "error": f"Request body of {len(body)} bytes exceeds the limit of 4096 bytes"}
        small = infer_json(("input", [1, 4], "FP32", [0.25] * 4))
        status, _, _ = response_of(fn.invoke(http_event("POST", "/v2/models/digits/infer", small)))
        assert status == 200


# --- init, cold start, warm calls ---------------------------------------------------------


def test_cold_start_then_warm_calls_reuse_the_loaded_model(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="modelfn.localstack.lambda_service")
    make_repo(tmp_path / "models")
    infer = http_event("POST", "/v2/models/digits/infer", infer_json(
        ("input", [2, 4], "FP32", [0.5] * 8)))
    with lambda_function(tmp_path, "coldstart") as fn:
        first, second = fn.invoke(infer), fn.invoke(infer)
        assert first.ok and first.cold and first.init_duration_ms is not None
        assert second.ok and not second.cold
        stats = response_of(fn.invoke(http_event("GET", "/v2/models/digits/versions/1/stats")))
    (model_stats,) = json.loads(stats[2])["model_stats"]
    assert model_stats["inference_count"] == 4  # two requests of two rows, one process
    assert model_stats["execution_count"] == 2

    def complete(lines: list[dict[str, Any]]) -> bool:
        return sum("ModelLatency" in line for line in lines) == 2 and sum(
            "stats" in str(line.get("message")) for line in lines) == 1

    lines = wait_for_lines(caplog, "coldstart", complete)
    assert len({pid for pid, _ in lines}) == 1  # one execution environment served everything
    output = [line for _, line in lines]
    assert sum(str(line.get("message", "")).startswith("ready: digits:1") for line in output) == 1
    requests = [line for line in output if "function_request_id" in line]
    assert [line["cold_start"] for line in requests] == [True, False, False]
    assert [line["function_request_id"] for line in requests[:2]] == [
        first.request_id, second.request_id]
    assert requests[0]["message"] == "POST /v2/models/digits/infer 200"
    cold = [line for line in output if "ColdStart" in line]
    assert len(cold) == 1 and cold[0]["ColdStart"] == [1.0]
    assert cold[0]["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "modelfn"
    emf = [line for line in output if "ModelLatency" in line]
    for metrics in emf:
        assert metrics["model"] == "digits" and metrics["version"] == "1"
        assert metrics["BatchSize"] == [2.0] and metrics["ModelLatency"][0] > 0
        (directive,) = metrics["_aws"]["CloudWatchMetrics"]
        assert directive["Namespace"] == "modelfn"
        assert ["model", "version", "service"] in directive["Dimensions"]


def test_a_broken_model_config_is_an_init_error_naming_file_and_line(tmp_path: Path) -> None:
    save(tmp_path / "models" / "digits", digits_graph(),
         config='max_batch_size: 8\nbogus_field: 3\n')
    with lambda_function(tmp_path, "broken") as fn, FunctionUrl(fn) as front:
        result = fn.invoke(load_event("function_url_get"))
        assert result.cold and result.error is not None
        # the function serves no model: init fails with the model's error
        assert result.error.error_type == "NoModelServes"
        assert result.error.error_message.startswith("model 'digits' failed to load: ")
        assert "digits/config.pbtxt:2" in result.error.error_message
        assert "bogus_field" in result.error.error_message
        assert httpx.get(f"{front.url}/v2/health/ready", timeout=60).status_code == 502


def test_models_come_from_the_store_when_the_image_names_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="modelfn.localstack.lambda_service")
    save(tmp_path / "local" / "digits", digits_graph(), config="max_batch_size: 8\n")
    (tmp_path / "store").mkdir()
    open_store(str(tmp_path / "store")).push(tmp_path / "local" / "digits")
    with lambda_function(tmp_path, "fromstore", MODELFN_REPOSITORY="",
                         MODELFN_STORE=f"file://{tmp_path / 'store'}", MODELFN_MODELS="digits",
                         MODELFN_CACHE=str(tmp_path / "cache")) as fn:
        status, _, body = response_of(fn.invoke(load_event("function_url_post_json")))
    assert status == 200 and json.loads(gzip.decompress(body))["model_version"] == "1"
    lines = wait_for_lines(caplog, "fromstore", lambda out: any(
        str(line.get("message", "")).startswith("ready:") for line in out))
    (ready,) = [line["message"] for _, line in lines if line.get("message", "").startswith("ready")]
    assert ready.startswith("ready: digits:1 (cold start ") and " fetch=" in ready


def test_events_no_aws_service_sends_get_clear_errors(tmp_path: Path) -> None:
    """Through the real awslambdaric: a non-HTTP event fails the invocation with a clear
    message; an HTTP event with a malformed part is a 400; headers null is accepted."""
    make_repo(tmp_path / "models")
    with lambda_function(tmp_path, "odd-events") as fn:
        for event, kind in (([1, 2], "list"), (None, "null"), ({"hello": 1}, "not an HTTP")):
            result = fn.invoke(event)
            assert not result.ok
            assert result.error is not None
            doc = json.loads(result.payload)
            assert doc["errorType"] == "InvalidEvent", doc
            assert kind in doc["errorMessage"] and "function URL" in doc["errorMessage"]
        no_http = {"version": "2.0", "rawPath": "/v2/health/ready", "requestContext": {}}
        status, _, body = response_of(fn.invoke(no_http))
        assert status == 400
        assert json.loads(body) == {"error": "the payload 2.0 event has no "
                                             "requestContext.http.method"}
        bad_headers = {**http_event("GET", "/v2/health/ready"), "headers": ["x"]}
        status, _, body = response_of(fn.invoke(bad_headers))
        assert (status, json.loads(body)) == (400, {"error": "the event's headers must be an "
                                                             "object"})
        null_headers = {**http_event("GET", "/v2/health/ready"), "headers": None}
        status, _, body = response_of(fn.invoke(null_headers))
        assert status == 200 and json.loads(body) == {"ready": True}
        status, _, _ = response_of(fn.invoke(http_event("GET", "/v2/health/ready")))
        assert status == 200  # and it keeps serving


def test_a_malformed_body_is_a_400_without_a_traceback(
    function: LambdaFunction, caplog: pytest.LogCaptureFixture
) -> None:
    """Through the real awslambdaric: a JSON object (not a string) as the body, a number, a
    list, bad base64: each a one-line 400, nothing in the logs but that line, and the
    function keeps serving."""
    caplog.set_level(logging.INFO)
    post = load_event("function_url_post_json")
    for body, encoded in (({"inputs": []}, False), (3, False), ([1], False), ("abc", True)):
        event = {**post, "body": body, "isBase64Encoded": encoded}
        status, _, answer = response_of(function.invoke(event))
        assert status == 400 and "the event's body" in json.loads(answer)["error"]
    status, _, _ = response_of(function.invoke(load_event("function_url_post_json")))
    assert status == 200
    printed = [record.getMessage() for record in caplog.records]
    assert not [line for line in printed if "Traceback" in line or "AttributeError" in line]


def test_a_reaped_or_crashed_environment_leaves_no_temp_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The function checks its store's models out into a ``modelfn-repo-*`` directory; the
    environment is then reaped (SIGKILL: no atexit runs) or its runtime dies. Nothing of it
    may be left, in the machine's temp directory or in the one the platform gave it."""
    machine_tmp = tmp_path / "machine-tmp"
    machine_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(machine_tmp))  # what the runtime would inherit
    save(tmp_path / "local" / "digits", digits_graph(), config="max_batch_size: 8\n")
    (tmp_path / "store").mkdir()
    open_store(str(tmp_path / "store")).push(tmp_path / "local" / "digits")
    env = {**HERMETIC, "MODELFN_STORE": f"file://{tmp_path / 'store'}",
           "MODELFN_MODELS": "digits", "MODELFN_CACHE": str(tmp_path / "cache")}
    config = FunctionConfig(HANDLER, task_root=tmp_path, name="tmpdirs", timeout=60, env=env,
                            tmp_root=tmp_path / "environments")
    with LambdaFunction(config) as fn:
        status, _, _ = response_of(fn.invoke(load_event("function_url_post_json")))
        assert status == 200
        assert [p.name for p in (tmp_path / "environments").iterdir()]  # in its own TMPDIR
        assert fn.reap_idle(0) == 1
        status, _, _ = response_of(fn.invoke(load_event("function_url_post_json")))
        assert status == 200
        (pid,) = fn.pids()
        os.kill(pid, signal.SIGKILL)  # died by itself, not discarded by the platform
        deadline = time.monotonic() + 30
        while list((tmp_path / "environments").iterdir()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert list((tmp_path / "environments").iterdir()) == []
    assert list(machine_tmp.glob("modelfn-repo-*")) == []
