"""The local Lambda: real awslambdaric child processes, real sockets, no mocks."""

from __future__ import annotations

import base64
import http.client
import json
import os
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from modelfn.localstack.function_url import FunctionUrl, build_event, render_response
from modelfn.localstack.lambda_service import FunctionConfig, LambdaFunction
from modelfn.localstack.runtime_api import REQUEST_LIMIT, RuntimeApiServer
from modelfn.runtime.errors import PayloadTooLarge

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

HANDLERS = Path(__file__).parent / "handlers"
EVENTS = Path(__file__).parents[1] / "events"
CANNED = ("function_url_get", "function_url_post_json", "function_url_post_binary")


@pytest.fixture
def make_function() -> Iterator[Callable[..., LambdaFunction]]:
    functions: list[LambdaFunction] = []

    def make(handler: str, **options: Any) -> LambdaFunction:
        function = LambdaFunction(FunctionConfig(handler, task_root=HANDLERS, **options))
        functions.append(function)
        return function

    try:
        yield make
    finally:
        for function in functions:
            function.close()


@pytest.fixture
def serve() -> Iterator[Callable[[LambdaFunction], httpx.Client]]:
    servers: list[FunctionUrl] = []
    clients: list[httpx.Client] = []

    def start(function: LambdaFunction) -> httpx.Client:
        servers.append(FunctionUrl(function).start())
        clients.append(httpx.Client(base_url=servers[-1].url, timeout=30))
        return clients[-1]

    try:
        yield start
    finally:
        for client in clients:
            client.close()
        for server in servers:
            server.close()


def load_event(name: str) -> dict[str, Any]:
    event: dict[str, Any] = json.loads((EVENTS / f"{name}.json").read_text())
    return event


# --- the Runtime API and the runtime process ---------------------------------------------


def test_cold_start_then_warm_calls_reuse_the_process(
    make_function: Callable[..., LambdaFunction],
) -> None:
    function = make_function("counter.handler", name="counter")
    results = [function.invoke({"n": n}) for n in range(3)]
    assert [r.json()["count"] for r in results] == [1, 2, 3]
    assert len({r.json()["pid"] for r in results}) == 1
    assert [r.cold for r in results] == [True, False, False]
    assert results[0].init_duration_ms is not None and results[0].init_duration_ms > 0
    assert results[1].init_duration_ms is None


def test_event_context_and_environment_reach_the_handler(
    make_function: Callable[..., LambdaFunction],
) -> None:
    function = make_function(
        "echo.handler",
        name="echo",
        memory_mb=2048,
        region="eu-west-1",
        timeout=30,
        env={"MODELFN_TEST_VALUE": "from-env"},
    )
    event = {"inputs": [1, 2, 3], "text": "grüße"}
    result = function.invoke(event, client_context={"custom": {"tenant": "t1"}})
    assert result.ok, result.payload
    body = result.json()
    assert body["event"] == event
    assert body["request_id"] == result.request_id
    assert body["function_arn"] == "arn:aws:lambda:eu-west-1:000000000000:function:echo"
    assert 25_000 < body["remaining_ms"] <= 30_000
    assert body["custom"] == {"tenant": "t1"}
    assert body["trace_id"].startswith("Root=1-")
    assert body["cwd"] == str(HANDLERS.resolve())
    assert body["env"] == {
        "AWS_LAMBDA_FUNCTION_NAME": "echo",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "2048",
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_REGION": "eu-west-1",
        "LAMBDA_TASK_ROOT": str(HANDLERS.resolve()),
        "_HANDLER": "echo.handler",
        "MODELFN_TEST_VALUE": "from-env",
    }


def test_handler_exception_is_an_error_result_and_the_process_stays_warm(
    make_function: Callable[..., LambdaFunction],
) -> None:
    function = make_function("raises.handler")
    result = function.invoke({"value": 42})
    assert not result.ok and result.error is not None
    assert result.error.error_type == "ValueError"
    assert result.error.error_message == "bad input: 42"
    assert any("raises.py" in line for line in result.error.stack_trace)
    assert result.json()["errorMessage"] == "bad input: 42"
    assert function.invoke({"value": 1}).cold is False


def test_init_error_fails_promptly_with_its_message_on_every_invoke(
    make_function: Callable[..., LambdaFunction],
) -> None:
    function = make_function("broken_import.handler", timeout=30)
    for _ in range(2):
        started = time.monotonic()
        result = function.invoke({})
        assert time.monotonic() - started < 10  # the init error, not the timeout
        assert result.error is not None and result.cold
        assert result.error.error_type == "RuntimeError"
        assert result.error.error_message == "model file is missing: /opt/ml/model.onnx"


def test_missing_handler_module_is_an_import_module_error(
    make_function: Callable[..., LambdaFunction],
) -> None:
    result = make_function("no_such_module.handler").invoke({})
    assert result.error is not None
    assert result.error.error_type == "Runtime.ImportModuleError"
    assert "no_such_module" in result.error.error_message


def test_init_that_overruns_its_budget_times_out(
    make_function: Callable[..., LambdaFunction],
) -> None:
    function = make_function("slow_init.handler", init_timeout=0.5)
    started = time.monotonic()
    result = function.invoke({})
    assert time.monotonic() - started < 5
    assert result.error is not None and result.error.error_type == "Sandbox.Timedout"
    assert "Init timed out after 0.50 seconds" in result.error.error_message


def test_runtime_crash_fails_the_invocation_and_the_next_invoke_restarts(
    make_function: Callable[..., LambdaFunction],
) -> None:
    function = make_function("misbehave.handler")
    first = function.invoke({})
    crashed = function.invoke({"do": "crash"})
    assert crashed.error is not None
    assert crashed.error.error_type == "Runtime.ExitError"
    assert crashed.error.error_message == (
        f"RequestId: {crashed.request_id} Error: Runtime exited with error: exit status 3"
    )
    after = function.invoke({})
    assert after.ok and after.cold
    assert after.json()["pid"] != first.json()["pid"]


def test_timeout_kills_the_process_and_the_next_invoke_is_cold(
    make_function: Callable[..., LambdaFunction],
) -> None:
    function = make_function("misbehave.handler", timeout=30)
    first = function.invoke({})
    started = time.monotonic()
    result = function.invoke({"do": "sleep", "seconds": 30}, timeout=0.5)
    assert time.monotonic() - started < 5
    assert result.error is not None and result.error.error_type == "Sandbox.Timedout"
    assert "Task timed out after 0.50 seconds" in result.error.error_message
    with pytest.raises(ProcessLookupError):
        os.kill(first.json()["pid"], 0)
    after = function.invoke({})
    assert after.ok and after.cold and after.json()["pid"] != first.json()["pid"]


def test_response_over_six_megabytes_is_a_function_error(
    make_function: Callable[..., LambdaFunction],
) -> None:
    function = make_function("misbehave.handler")
    result = function.invoke({"do": "big", "size": 6_300_000})
    assert result.error is not None
    assert result.error.error_type == "Function.ResponseSizeTooLarge"
    assert "6291556 bytes" in result.error.error_message
    assert function.invoke({}).ok  # a fresh environment if the runtime gave up


def test_request_over_six_megabytes_is_refused_before_invoking(
    make_function: Callable[..., LambdaFunction],
) -> None:
    function = make_function("counter.handler")
    with pytest.raises(PayloadTooLarge):
        function.invoke("x" * REQUEST_LIMIT)
    assert function.invoke({}).json()["count"] == 1


def test_concurrent_environments_up_to_max_concurrency(
    make_function: Callable[..., LambdaFunction],
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    function = make_function("misbehave.handler", max_concurrency=2)
    with ThreadPoolExecutor(4) as pool:
        results = list(
            pool.map(lambda _: function.invoke({"do": "sleep", "seconds": 0.3}), range(4))
        )
    assert all(r.ok for r in results)
    assert sum(r.cold for r in results) == 2


def test_runtime_api_rejects_unknown_request_ids_and_paths() -> None:
    server = RuntimeApiServer("arn:aws:lambda:us-east-1:000000000000:function:f")
    connection = http.client.HTTPConnection(server.address, timeout=5)
    try:
        connection.request("POST", "/2018-06-01/runtime/invocation/nope/response", b"{}")
        response = connection.getresponse()
        assert response.status == 400
        assert json.loads(response.read())["errorType"] == "InvalidRequestID"
        connection.request("GET", "/2018-06-01/runtime/other")
        response = connection.getresponse()
        assert response.status == 404
        response.read()
    finally:
        connection.close()
        server.close()


def test_warm_invoke_latency(
    make_function: Callable[..., LambdaFunction], capsys: pytest.CaptureFixture[str]
) -> None:
    function = make_function("counter.handler")
    function.invoke({})
    timings = []
    for _ in range(300):
        started = time.perf_counter()
        function.invoke({"x": 1})
        timings.append((time.perf_counter() - started) * 1000)
    timings.sort()
    with capsys.disabled():
        print(
            f"\nwarm invoke through the Runtime API emulator: median "
            f"{statistics.median(timings):.2f} ms, p90 {timings[269]:.2f} ms, "
            f"p99 {timings[296]:.2f} ms (n=300)"
        )


# --- the function URL front ----------------------------------------------------------------


def test_get_with_query_string_and_cookies(
    make_function: Callable[..., LambdaFunction],
    serve: Callable[[LambdaFunction], httpx.Client],
) -> None:
    client = serve(make_function("echo.handler", name="digits"))
    response = client.get(
        "/v2/models/digits/ready?tag=a&tag=b&empty=&name=J%C3%BCrgen",
        headers=[("Cookie", "session=abc; theme=dark"), ("X-Multi", "1"), ("X-Multi", "2")],
    )
    assert response.status_code == 200  # a bare JSON return is a 200 application/json
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    event = body["event"]
    assert response.headers["x-amzn-requestid"] == event["requestContext"]["requestId"]
    assert body["request_id"] == event["requestContext"]["requestId"]
    assert event["version"] == "2.0" and event["routeKey"] == "$default"
    assert event["rawPath"] == "/v2/models/digits/ready"
    assert event["rawQueryString"] == "tag=a&tag=b&empty=&name=J%C3%BCrgen"
    assert event["queryStringParameters"] == {"tag": "a,b", "empty": "", "name": "Jürgen"}
    assert event["cookies"] == ["session=abc", "theme=dark"]
    assert "cookie" not in event["headers"]
    assert event["headers"]["x-multi"] == "1,2"
    assert event["headers"]["x-forwarded-for"] == "127.0.0.1"
    assert "body" not in event and event["isBase64Encoded"] is False
    context = event["requestContext"]
    assert context["accountId"] == "anonymous" and context["stage"] == "$default"
    assert context["http"]["method"] == "GET"
    assert context["http"]["sourceIp"] == "127.0.0.1"
    assert context["http"]["userAgent"].startswith("python-httpx/")
    assert context["domainName"] == f"{context['apiId']}.lambda-url.us-east-1.on.aws"


def test_post_json_round_trip(
    make_function: Callable[..., LambdaFunction],
    serve: Callable[[LambdaFunction], httpx.Client],
) -> None:
    client = serve(make_function("echo.mirror"))
    payload = {"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1.5]}]}
    response = client.post("/v2/models/m/infer", json=payload)
    assert response.status_code == 201
    assert response.json() == payload
    assert response.headers["content-type"] == "application/json"
    assert response.headers["x-method"] == "POST"
    assert response.headers["x-base64"] == "false"
    assert response.headers.get_list("set-cookie") == [
        "seen=1; Path=/",
        "flavour=oat; Max-Age=60",
    ]


def test_post_binary_round_trip_is_base64_in_the_event(
    make_function: Callable[..., LambdaFunction],
    serve: Callable[[LambdaFunction], httpx.Client],
) -> None:
    client = serve(make_function("echo.mirror"))
    payload = bytes(range(256)) * 1024
    response = client.post(
        "/v2/models/m/infer", content=payload, headers={"content-type": "application/octet-stream"}
    )
    assert response.status_code == 201
    assert response.headers["x-base64"] == "true"
    assert response.content == payload


def test_oversize_request_is_413_without_invoking(
    make_function: Callable[..., LambdaFunction],
    serve: Callable[[LambdaFunction], httpx.Client],
) -> None:
    function = make_function("counter.handler")
    client = serve(function)
    too_big = client.post("/", content=b"{" + b" " * REQUEST_LIMIT + b"}")
    assert too_big.status_code == 413
    assert f"limit of {REQUEST_LIMIT} bytes" in too_big.json()["message"]
    # 5 MB of binary is under the limit raw, over it once base64-encoded in the event.
    binary = client.post("/", content=b"\0" * 5_000_000)
    assert binary.status_code == 413
    assert client.get("/").json()["count"] == 1


def test_function_errors_are_502_internal_server_error(
    make_function: Callable[..., LambdaFunction],
    serve: Callable[[LambdaFunction], httpx.Client],
) -> None:
    raising = serve(make_function("raises.handler"))
    response = raising.post("/", json={"value": 1})
    assert response.status_code == 502
    assert response.text == "Internal Server Error"
    big = serve(make_function("misbehave.handler"))
    assert big.post("/", json={"do": "big", "size": 6_300_000}).status_code == 502


# --- canned events ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", CANNED)
def test_canned_events_have_the_shape_build_event_makes(name: str) -> None:
    canned = load_event(name)
    built = build_event(
        method=canned["requestContext"]["http"]["method"],
        raw_path=canned["rawPath"],
        raw_query=canned["rawQueryString"],
        headers=[*canned["headers"].items(), ("cookie", "; ".join(canned.get("cookies", [])))],
        body=base64.b64decode(canned["body"])
        if canned["isBase64Encoded"]
        else canned.get("body", "").encode(),
        source_ip=canned["requestContext"]["http"]["sourceIp"],
        request_id=canned["requestContext"]["requestId"],
        function_name="digits",
        region="us-east-1",
        epoch_ms=canned["requestContext"]["timeEpoch"],
    )
    assert built == canned


@pytest.mark.parametrize("name", CANNED)
def test_canned_events_through_a_handler(
    name: str, make_function: Callable[..., LambdaFunction]
) -> None:
    event = load_event(name)
    result = make_function("echo.mirror").invoke(event)
    response = render_response(result)
    assert response.status == 201
    body = event.get("body", "")
    expected = base64.b64decode(body) if event["isBase64Encoded"] else body.encode()
    assert response.body == expected
