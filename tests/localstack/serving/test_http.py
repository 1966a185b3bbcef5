"""The ingress's HTTP/1.1 handling through a route URL to a real digits instance: chunked
and sized bodies streamed both ways, keep-alive, HTTP/1.0, malformed requests."""

from __future__ import annotations

import json
import socket
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from serving_support import NS, spec, wait_settled

from modelfn.localstack.plane import RevisionState, RouteSpec, TrafficTarget
from modelfn.localstack.serving import LocalServingPlane

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

INFER = "/v2/models/digits/infer"


@pytest.fixture(scope="module")
def url(repos: dict[int, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with LocalServingPlane(log_dir=tmp_path_factory.mktemp("logs")) as plane:
        plane.ensure_revision(spec("digits-00001", repos[1], min_scale=1))
        urls = plane.set_route(RouteSpec(NS, "digits", (TrafficTarget("digits-00001", 100),)))
        assert wait_settled(plane, "digits-00001") is RevisionState.READY
        yield urls.url


def raw(url: str, request: bytes) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(request)
        chunks = []
        while data := sock.recv(65536):
            chunks.append(data)
    return b"".join(chunks)


def test_a_chunked_request_body_is_streamed_to_the_instance(
        url: str, digits_request: dict[str, Any], digits_labels: list[int]) -> None:
    body = json.dumps(digits_request).encode()

    def pieces() -> Iterator[bytes]:
        for start in range(0, len(body), 1000):
            yield body[start:start + 1000]

    response = httpx.post(url + INFER, content=pieces(), timeout=30,
                          headers={"content-type": "application/json"})
    assert response.status_code == 200, response.text
    label = next(o for o in response.json()["outputs"] if o["name"] == "label")
    assert label["data"] == digits_labels


def test_keep_alive_connections_are_reused_and_errors_pass_through(url: str) -> None:
    with httpx.Client(base_url=url, timeout=30) as client:
        for _ in range(20):
            assert client.get("/v2/health/ready").status_code == 200
        missing = client.post("/v2/models/nope/infer", json={"inputs": []})
        assert missing.status_code == 404
        assert "nope" in missing.json()["error"]
        assert client.get("/v2/models/digits").json()["name"] == "digits"


def test_http_1_0_gets_its_answer_and_the_connection_closes(url: str) -> None:
    answer = raw(url, b"GET /v2/health/ready HTTP/1.0\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200")
    assert b"connection: close" in answer.lower()


def test_a_malformed_request_gets_400(url: str) -> None:
    answer = raw(url, b"GET /v2/health/ready HTTP/1.1\r\nbroken header line\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400")
    assert b'"error"' in answer
    # the route still serves
    assert httpx.get(url + "/v2/health/ready", timeout=30).status_code == 200


async def test_a_dead_instance_is_instance_gone_with_the_request_to_replay() -> None:
    """forward() against an instance that refuses connections, and one that accepts and
    closes without answering (a kept-alive connection to a process that died): both are
    InstanceGone carrying the whole request, so the ingress can hand it to another."""
    import asyncio

    from modelfn.localstack.serving.http import InstanceGone, UpstreamPool, forward, read_head
    from modelfn.process.supervisor import free_port

    request = b"POST /v2/models/m/infer HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}"
    reader = asyncio.StreamReader()
    reader.feed_data(request)
    head = await read_head(reader)
    assert head is not None

    async def closes(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.close()

    server = await asyncio.start_server(closes, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = asyncio.StreamWriter  # never written to: forward fails before answering
    for pool in (UpstreamPool("127.0.0.1", free_port()), UpstreamPool("127.0.0.1", port)):
        with pytest.raises(InstanceGone) as gone:
            await forward(head, reader, client, pool, timeout_s=5,  # type: ignore[arg-type]
                          keep_alive=True)
        assert gone.value.replay is not None and gone.value.replay.endswith(b"\r\n\r\n{}")
        reader = asyncio.StreamReader()  # the next attempt reads the body afresh
        reader.feed_data(b"{}")
    server.close()
    await server.wait_closed()
