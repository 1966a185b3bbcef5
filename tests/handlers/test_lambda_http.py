"""A Lambda HTTP invocation's two edges (handlers/lambda_http.py), with the real awslambdaric
encoder and the real Mangum: events checked before Mangum reads them, responses counted as
the runtime interface client will send them."""

from __future__ import annotations

import asyncio
import base64
import copy
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from awslambdaric.lambda_runtime_marshaller import to_json
from mangum import Mangum
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from modelfn.handlers.lambda_http import (
    PAYLOAD_LIMIT,
    InvalidEvent,
    check_event,
    encoded_size,
    within_limit,
)

if TYPE_CHECKING:
    from starlette.requests import Request

EVENTS = Path(__file__).resolve().parents[1] / "events"


def url_event() -> dict[str, Any]:
    event: dict[str, Any] = json.loads((EVENTS / "function_url_get.json").read_text())
    return event


def text_response(text: str) -> dict[str, Any]:
    body = json.dumps({"outputs": [{"name": "OUT", "datatype": "BYTES", "shape": [1],
                                    "data": [text]}]}, ensure_ascii=False)
    return {"statusCode": 200, "headers": {"content-type": "application/json"},
            "body": body, "isBase64Encoded": False}


@pytest.mark.parametrize(("runtime", "fits"), [("AWS_Lambda_python3.12", True),
                                               ("AWS_Lambda_python3.11", False)])
def test_text_is_counted_as_the_runtime_encodes_it(monkeypatch: pytest.MonkeyPatch,
                                                   runtime: str, fits: bool) -> None:
    """1.8M 'é' are 3.6 MB in UTF-8 (python3.12+ runtimes) but 10.8 MB as \\u escapes."""
    monkeypatch.setenv("AWS_EXECUTION_ENV", runtime)
    response = text_response("é" * 1_800_000)
    assert encoded_size(response) == len(to_json(response).encode())
    answer = within_limit(response)
    if fits:
        assert answer is response
    else:
        assert answer["statusCode"] == 413
        assert "exceeds the Lambda response limit" in json.loads(answer["body"])["error"]


def test_base64_bodies_count_as_their_characters(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_EXECUTION_ENV", "AWS_Lambda_python3.12")
    body = base64.b64encode(b"\0" * (PAYLOAD_LIMIT // 4 * 3 + 3)).decode()
    response = {"statusCode": 200, "headers": {}, "body": body, "isBase64Encoded": True}
    assert within_limit(response)["statusCode"] == 413
    smaller = {**response, "body": body[: PAYLOAD_LIMIT - 200]}
    assert within_limit(smaller) is smaller


def _without(event: dict[str, Any], *path: str) -> dict[str, Any]:
    event = copy.deepcopy(event)
    target = event
    for key in path[:-1]:
        target = target[key]
    del target[path[-1]]
    return event


@pytest.mark.parametrize(("event", "message"), [
    (_without(url_event(), "requestContext", "http", "path"),
     "the payload 2.0 event has no requestContext.http.path"),
    (_without(url_event(), "requestContext", "http", "sourceIp"),
     "the payload 2.0 event has no requestContext.http.sourceIp"),
    ({**url_event(), "headers": {"host": "x:abc"}}, "the Host header 'x:abc' has no valid port"),
    ({**url_event(), "headers": {"x-forwarded-port": "eighty"}},
     "the X-Forwarded-Port header 'eighty' is not a port"),
    ({**url_event(), "headers": {"accept": 5}}, "the event's header 'accept' must be a string"),
    ({**url_event(), "rawQueryString": 5},
     "the payload 2.0 event's rawQueryString must be a string"),
])
def test_a_malformed_event_is_a_400_not_an_invocation_error(event: dict[str, Any],
                                                            message: str) -> None:
    response = check_event(event)["response"]
    assert response["statusCode"] == 400
    assert json.loads(response["body"]) == {"error": message}


def post_event() -> dict[str, Any]:
    event: dict[str, Any] = json.loads((EVENTS / "function_url_post_json.json").read_text())
    return event


API_GATEWAY_V1 = {"resource": "/{proxy+}", "path": "/v2/health/ready", "httpMethod": "GET",
                  "headers": {}, "requestContext": {"identity": {"sourceIp": "203.0.113.17"}},
                  "body": None, "isBase64Encoded": False}
NOT_TEXT = "the event's body must be a string (a JSON body arrives as text), not "


@pytest.mark.parametrize(("event", "message"), [
    ({**post_event(), "body": {"inputs": []}}, NOT_TEXT + "an object"),
    ({**post_event(), "body": [1, 2]}, NOT_TEXT + "a list"),
    ({**post_event(), "body": 42}, NOT_TEXT + "a number"),
    ({**post_event(), "body": True}, NOT_TEXT + "a boolean"),
    ({**post_event(), "body": {"a": 1}, "isBase64Encoded": True}, NOT_TEXT + "an object"),
    ({**post_event(), "body": "abc", "isBase64Encoded": True},
     "the event's body is not valid base64 (isBase64Encoded is true)"),
    ({**post_event(), "body": "@@@@", "isBase64Encoded": True},
     "the event's body is not valid base64 (isBase64Encoded is true)"),
    ({**post_event(), "body": "\ud800"}, "the event's body is not valid Unicode text"),
    ({**post_event(), "isBase64Encoded": "yes"},
     "the event's isBase64Encoded must be true or false"),
    ({**API_GATEWAY_V1, "body": {"a": 1}}, NOT_TEXT + "an object"),
    ({**API_GATEWAY_V1, "requestContext": []},
     "the API Gateway event's requestContext must be an object"),
    ({**API_GATEWAY_V1, "httpMethod": 5}, "the API Gateway event has no httpMethod"),
    ({k: v for k, v in API_GATEWAY_V1.items() if k != "resource"},
     "the API Gateway event has no resource"),
])
def test_a_malformed_body_or_context_is_a_400(event: dict[str, Any], message: str) -> None:
    response = check_event(event)["response"]
    assert response["statusCode"] == 400
    assert json.loads(response["body"]) == {"error": message}


@pytest.mark.parametrize(("body", "encoded", "expected"), [
    ('{"a": 1}', False, b'{"a": 1}'),
    (base64.b64encode(b"\x00\xff").decode(), True, b"\x00\xff"),
    (None, False, b""),
    ("", True, b""),
])
def test_a_body_reaches_mangum_decoded_once(body: str | None, encoded: bool,
                                            expected: bytes) -> None:
    checked = check_event({**post_event(), "body": body, "isBase64Encoded": encoded})["event"]
    assert (checked["body"], checked["isBase64Encoded"]) == (expected, False)


def test_what_aws_may_leave_out_is_filled_in_for_mangum() -> None:
    seen: list[tuple[str, bytes, tuple[str, int] | None]] = []

    async def echo(request: Request) -> JSONResponse:
        server = request.scope.get("server")
        seen.append((request.url.path, request.scope["query_string"], server))
        return JSONResponse({"ok": True})

    event = _without(url_event(), "version")
    event["rawQueryString"] = None
    event["headers"] = None
    checked = check_event(event)["event"]

    def invoke() -> dict[str, Any]:
        """As a Lambda process does, on a thread's own loop (closed here, not leaked)."""
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)  # Mangum makes and runs on the thread's current loop
        try:
            adapter = Mangum(Starlette(routes=[Route("/{path:path}", echo)]), lifespan="off")
            return adapter(checked, {})  # type: ignore[arg-type]
        finally:
            asyncio.set_event_loop(None)
            loop.close()

    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(invoke).result()
    assert answer["statusCode"] == 200
    assert seen == [(url_event()["rawPath"], b"", ("mangum", 80))]


def test_a_non_http_event_is_the_invocation_error() -> None:
    with pytest.raises(InvalidEvent, match="not an HTTP request"):
        check_event({"hello": "world"})
