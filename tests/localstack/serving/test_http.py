"""The ingress's HTTP/1.1 handling through a route URL to a real digits instance: chunked
and sized bodies streamed both ways, keep-alive, HTTP/1.0, malformed requests."""

from __future__ import annotations

import json
import socket
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from raw_http import Raw
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


@pytest.mark.parametrize("raw", [
    b"POST /x HTTP/1.1\r\ncontent-length: 2\r\ntransfer-encoding: chunked\r\n\r\n",
    b"POST /x HTTP/1.1\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\n",
    b"POST /x HTTP/1.1\r\ntransfer-encoding: gzip\r\n\r\n",
], ids=["length-and-chunked", "two-lengths", "not-chunked"])
async def test_a_head_whose_body_framing_is_ambiguous_is_a_bad_request(raw: bytes) -> None:
    """Refused since heads are parsed by httptools (RFC 9112 6.3): a proxy that framed such
    a body one way while the instance framed it another would smuggle a request."""
    import asyncio

    from modelfn.localstack.serving.http import MalformedMessage, read_head

    reader = asyncio.StreamReader()
    reader.feed_data(raw)
    with pytest.raises(MalformedMessage, match="malformed header line"):
        await read_head(reader)


async def test_the_http2_preface_is_its_own_head() -> None:
    import asyncio

    from modelfn.localstack.serving.http import H2_PREFACE, H2_PREFACE_SEEN, read_head

    reader = asyncio.StreamReader()
    reader.feed_data(H2_PREFACE)
    assert await read_head(reader) is H2_PREFACE_SEEN


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



@pytest.mark.parametrize("padding", [0, 200_000], ids=["under-64KiB", "over-64KiB"])
def test_expect_100_continue_is_answered_and_each_client_gets_its_own_answer(
        url: str, digits_request: dict[str, Any], padding: int) -> None:
    """Client A sends ``Expect: 100-continue`` (curl does for bodies over 1 MB) and waits
    for ``100 Continue`` before its body, as curl does; client B sends plain requests right
    after, on the kept-alive instance connection A's request used. The plane answers A's
    100 itself, before it reads the body, and each client gets its own answer: the
    function's interim 100 is never taken for the answer, with the answer left unread on
    a pooled connection for B to get."""
    a_id = "client-A-" + "x" * padding
    body = json.dumps(dict(digits_request, id=a_id)).encode()
    a = Raw(url)
    try:
        a.sock.sendall(b"POST %s HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                       b"content-length: %d\r\nexpect: 100-continue\r\n\r\n"
                       % (INFER.encode(), len(body)))
        heads = [a.head(2.0)]  # curl waits 1 s for it, then sends the body anyway
        a.sock.sendall(body)
        heads.append(a.head(10.0))
        with httpx.Client(base_url=url, timeout=30) as client:
            b_ids = [client.post(INFER, json=dict(digits_request, id="client-B")).json()["id"]
                     for _ in range(3)]
        while heads[-1][9:10] == b"1":
            heads.append(a.head(2.0))
        assert b_ids == ["client-B"] * 3
        assert heads[0] == b"HTTP/1.1 100 Continue"
        assert len(heads) == 2 and heads[1].startswith(b"HTTP/1.1 200 "), heads
        assert json.loads(a.body(heads[1]))["id"] == a_id
    finally:
        a.sock.close()


async def test_interim_answers_are_dropped_and_a_spoiled_connection_is_never_pooled() -> None:
    """forward() against an instance that sends 1xx interim answers (103 Early Hints, a 100
    nobody asked for) before its answer: the client gets its 100 from the ingress and then
    the answer alone, and the connection is reused. An instance that answers 101, or what
    is not a status, gets its connection closed: the next request opens a new one and
    never reads what the spoiled one still held."""
    import asyncio

    from modelfn.localstack.serving.http import BadGateway, UpstreamPool, forward, read_head

    answers = [
        b"HTTP/1.1 103 Early Hints\r\nlink: </x>\r\n\r\nHTTP/1.1 100 Continue\r\n\r\n"
        b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nfirst",
        b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nsecond",
        b"HTTP/1.1 101 Switching Protocols\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n"
        b"stale",
        b"HTTP/1.1 2x0 OK\r\ncontent-length: 5\r\n\r\nstale",
        b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nfifth",
    ]
    seen: list[bytes] = []
    connections = 0
    closed = asyncio.Event()

    async def instance(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        try:
            while head := await r.readuntil(b"\r\n\r\n"):
                seen.append(head + await r.readexactly(2))
                w.write(answers.pop(0))
        except asyncio.IncompleteReadError:
            closed.set()  # the ingress closed this connection
        finally:
            w.close()

    server = await asyncio.start_server(instance, "127.0.0.1", 0)
    pool = UpstreamPool("127.0.0.1", server.sockets[0].getsockname()[1])
    near, far = socket.socketpair()
    client_reader, far_writer = await asyncio.open_connection(sock=far)
    _, client = await asyncio.open_connection(sock=near)

    async def send(expect: bool = False) -> bool:
        reader = asyncio.StreamReader()
        reader.feed_data(b"POST /v2/models/m/infer HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n"
                         + (b"Expect: 100-continue\r\n" if expect else b"") + b"\r\n{}")
        head = await read_head(reader)
        assert head is not None
        return await forward(head, reader, client, pool, timeout_s=5, keep_alive=True)

    try:
        async with asyncio.timeout(20):
            assert await send(expect=True)
            assert await client_reader.readuntil(b"first") == (
                b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nfirst")
            assert b"expect" not in seen[0].lower()
            assert await send()
            assert (await client_reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200 OK")
            assert await client_reader.readexactly(6) == b"second"
            assert connections == 1
            for spoiled in (1, 2):
                with pytest.raises(BadGateway, match="status"):
                    await send()
                await asyncio.wait_for(closed.wait(), 5)
                closed.clear()
                assert connections == spoiled  # the second opened a new connection
            assert await send()
            assert (await client_reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200 OK")
            assert await client_reader.readexactly(5) == b"fifth"
            assert connections == 3
    finally:
        pool.close()
        client.close()
        far_writer.close()
        server.close()
        await server.wait_closed()
