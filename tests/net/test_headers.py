"""The one hop-by-hop set, as each proxy of modelfn applies it: the serving ingress (raw
heads), a function URL (a function's answer) and the gRPC relay (call metadata)."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from modelfn.localstack.function_url import render_response
from modelfn.localstack.lambda_service import InvocationResult
from modelfn.localstack.serving.http import read_head
from modelfn.net.grpc_relay import forwarded
from modelfn.net.headers import FRAMING, HOP_BY_HOP, latin1


def test_connection_headers_and_framing_are_apart() -> None:
    assert not HOP_BY_HOP & FRAMING
    assert all(name == name.lower() for name in HOP_BY_HOP | FRAMING)
    assert latin1(FRAMING) == {b"content-length", b"transfer-encoding"}


@pytest.mark.parametrize("name", sorted(HOP_BY_HOP))
async def test_the_ingress_drops_a_connection_header_and_keeps_the_framing(name: str) -> None:
    reader = asyncio.StreamReader()
    reader.feed_data(f"POST /x HTTP/1.1\r\nHost: a\r\n{name.title()}: v\r\n"
                     "Transfer-Encoding: chunked\r\nX-Kept: 1\r\n\r\n".encode())
    head = await read_head(reader)
    assert head is not None and head.chunked
    assert head.headers == b"Host: a\r\nTransfer-Encoding: chunked\r\nX-Kept: 1\r\n"


def test_a_function_url_frames_the_answer_itself() -> None:
    headers = {name.title(): "v" for name in HOP_BY_HOP | FRAMING}
    payload = orjson.dumps({"statusCode": 200, "headers": {**headers, "X-Kept": "1"},
                            "body": "{}"})
    response = render_response(InvocationResult("r", payload, None, False, None, 1.0))
    assert {name for name, _ in response.headers} == {
        b"x-kept", b"content-type", b"x-amzn-requestid"}


def test_the_grpc_relay_forwards_no_connection_metadata() -> None:
    metadata = [(name, "v") for name in sorted(HOP_BY_HOP)]
    assert forwarded([*metadata, ("x-kept", "1")]) == [("x-kept", "1")]
