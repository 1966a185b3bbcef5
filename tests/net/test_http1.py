"""HTTP/1.1: the head codec on heads as clients and functions write them (and as they
should not), and the gateway's client against real sockets on 127.0.0.1: a small asyncio
server answers the way functions (and broken networks) do: with a length, chunked, closing
after the answer, closing idle kept-alive connections, stopping mid-answer, never
answering."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest

from modelfn.net.http1 import (
    ConnectError,
    ConnectionLost,
    Head,
    Http1Client,
    MalformedHead,
    encode_request_head,
    encode_response_head,
    parse_request_head,
    parse_response_head,
    split_url,
)
from modelfn.process.supervisor import free_port

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

DROP = frozenset({b"connection", b"keep-alive"})


def test_a_request_head_keeps_its_lines_less_the_dropped_and_says_its_framing() -> None:
    head = parse_request_head(b"POST /v2/models/m/infer?x=1 HTTP/1.1\r\nHost: a\r\n"
                              b"Connection: close\r\nContent-Length: 12\r\n"
                              b"Expect: 100-continue\r\nX-Kept:  v \r\n\r\n", DROP)
    assert head == Head(b"POST", b"/v2/models/m/infer?x=1", 0, b"", b"HTTP/1.1",
                        b"Host: a\r\nContent-Length: 12\r\nExpect: 100-continue\r\n"
                        b"X-Kept: v \r\n", 12, False, True, True)
    chunked = parse_request_head(b"PUT / HTTP/1.1\r\nTransfer-Encoding: gzip, Chunked\r\n\r\n")
    assert chunked.chunked and chunked.length is None and not chunked.close


@pytest.mark.parametrize(("raw", "close", "expect"), [
    (b"GET / HTTP/1.0\r\nExpect: 100-continue\r\n\r\n", True, False),
    (b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", False, False),
    (b"GET / HTTP/1.1\r\nConnection: te, close\r\n\r\n", True, False),
    (b"GET / HTTP/1.1\r\nConnection: upgrade\r\nUpgrade: h2c\r\n\r\n", False, False),
], ids=["1.0", "1.0-keep-alive", "close", "upgrade"])
def test_which_requests_close_and_which_may_be_sent_100(raw: bytes, close: bool,
                                                        expect: bool) -> None:
    head = parse_request_head(raw)
    assert (head.close, head.expect) == (close, expect)


@pytest.mark.parametrize(("raw", "what"), [
    (b"GET / HTTP/1.1\r\nbroken header line\r\n\r\n", "malformed header line"),
    (b"GET / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", "malformed header line"),
    (b"GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", "Duplicate"),
    (b"GET / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
     "Content-Length"),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", "Transfer-Encoding"),
    (b"GET /a b HTTP/1.1\r\n\r\n", "malformed first line"),
    (b"GET / HTTP/3.0\r\n\r\n", "malformed first line"),
    (b"GET / HTTP/1.1\r\nHost: a\r\n", "empty line"),
], ids=["no-colon", "length", "two-lengths", "length-and-chunked", "not-chunked", "target",
        "version", "cut"])
def test_malformed_request_heads_say_what_is_wrong(raw: bytes, what: str) -> None:
    with pytest.raises(MalformedHead, match=what):
        parse_request_head(raw)


def test_response_heads_interim_switching_and_unsized() -> None:
    head = parse_response_head(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n"
                               b"keep-alive: timeout=5\r\n\r\n", DROP)
    assert (head.status, head.reason, head.headers, head.length) == (
        200, b"OK", b"content-length: 5\r\n", 5)
    assert parse_response_head(b"HTTP/1.1 103 Early Hints\r\nlink: </x>\r\n\r\n").status == 103
    assert parse_response_head(b"HTTP/1.1 101 Switching Protocols\r\n\r\n").status == 101
    unsized = parse_response_head(b"HTTP/1.0 200 OK\r\n\r\n")
    assert unsized.length is None and not unsized.chunked and unsized.close
    with pytest.raises(MalformedHead, match="status"):
        parse_response_head(b"HTTP/1.1 2x0 OK\r\n\r\n")


def test_heads_are_written_in_one_piece() -> None:
    assert encode_request_head(b"GET", b"/x", b"host: a\r\n") == (
        b"GET /x HTTP/1.1\r\nhost: a\r\n\r\n")
    assert encode_response_head(200, b"") == b"HTTP/1.1 200 OK\r\n\r\n"
    assert encode_response_head(299, b"a: b\r\n") == b"HTTP/1.1 299 \r\na: b\r\n\r\n"
    assert encode_response_head(404, b"", b"Gone Fishing") == (
        b"HTTP/1.1 404 Gone Fishing\r\n\r\n")

async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    return head, await reader.readexactly(length)


class Serving:
    """A loopback server running ``handler`` per connection; on exit every handler has
    finished (or was cancelled) and its socket is closed, so nothing leaks between tests."""

    def __init__(self, handler: Callable[[asyncio.StreamReader, asyncio.StreamWriter],
                                         Awaitable[None]]) -> None:
        self.handler = handler
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.tasks: list[asyncio.Task[None]] = []

    async def _run(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.tasks.append(asyncio.current_task())  # type: ignore[arg-type]
        try:
            await self.handler(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def __aenter__(self) -> Serving:
        self.server = await asyncio.start_server(self._run, "127.0.0.1", self.port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()
        await asyncio.wait(self.tasks, timeout=2) if self.tasks else None
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.server.wait_closed()


def test_split_url_and_the_host_header() -> None:
    origin, target = split_url("https://abc.lambda-url.eu-west-1.on.aws/v2/models/m/infer?x=1")
    assert (origin.scheme, origin.port, target) == ("https", 443, "/v2/models/m/infer?x=1")
    assert origin.host_header == "abc.lambda-url.eu-west-1.on.aws"  # what SigV4 signs
    assert split_url("http://127.0.0.1:8080")[0].host_header == "127.0.0.1:8080"
    with pytest.raises(ValueError, match="not an http"):
        split_url("ftp://x/y")


async def test_keep_alive_reuses_one_connection_and_sends_the_request_whole() -> None:
    connections = 0
    seen: list[tuple[bytes, bytes]] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while not reader.at_eof():
            try:
                head, body = await read_request(reader)
            except asyncio.IncompleteReadError:
                break
            seen.append((head, body))
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nX-Model: m\r\n\r\n" + body[:4])
            await writer.drain()
        writer.close()

    client = Http1Client()
    async with Serving(handler) as serving:
        url = serving.url
        for i in range(3):
            answer = await client.request("POST", f"{url}/v2/models/m/infer",
                                          {"content-type": "application/json"},
                                          b"body%d" % i, 5)
            assert (answer.status, answer.body) == (200, b"body")
            assert answer.headers.get("x-model") == "m" and answer.headers.get("X-MODEL") == "m"
        client.close()
    assert connections == 1
    head = seen[0][0].decode()
    assert head.startswith("POST /v2/models/m/infer HTTP/1.1\r\n")
    assert f"host: {url.removeprefix('http://')}" in head and "content-length: 5" in head


async def test_chunked_answers_and_connection_close() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n"
                     b"Connection: close\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
        await writer.drain()
        writer.close()

    client = Http1Client()
    async with Serving(handler) as serving:
        url = serving.url
        for _ in range(2):  # the closed connection is not reused
            answer = await client.request("GET", f"{url}/v2/health/ready", {}, b"", 5)
            assert (answer.status, answer.body) == (503, b"hello world")
        client.close()


async def test_a_kept_alive_connection_closed_while_idle_is_retried_once_anew() -> None:
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")  # says keep-alive...
        await writer.drain()
        writer.close()  # ... then closes, as a keep-alive timeout does

    client = Http1Client()
    async with Serving(handler) as serving:
        url = serving.url
        first = await client.request("POST", url, {}, b"x", 5)
        await asyncio.sleep(0.1)
        second = await client.request("POST", url, {}, b"x", 5)
        client.close()
    assert first.body == second.body == b"ok"
    assert connections == 2


async def test_an_answer_cut_short_is_connection_lost_not_retried() -> None:
    calls = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal calls
        calls += 1
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
        await writer.drain()
        writer.close()

    client = Http1Client()
    async with Serving(handler) as serving:
        url = serving.url
        with pytest.raises(ConnectionLost):
            await client.request("POST", url, {}, b"x", 5)
        client.close()
    assert calls == 1


async def test_refused_and_silent_functions() -> None:
    client = Http1Client(connect_timeout_s=2)
    with pytest.raises(ConnectError, match="cannot connect"):
        await client.request("POST", f"http://127.0.0.1:{free_port()}/", {}, b"", 5)

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # never answers; returns when the client gives up and closes
        writer.close()

    async with Serving(silent) as serving:
        url = serving.url
        with pytest.raises(TimeoutError):
            await client.request("POST", url, {}, b"x", 0.3)
    client.close()


async def test_interim_answers_are_read_past_and_a_switch_of_protocol_is_not_an_answer() -> None:
    """A function that sends 1xx interim answers (a 100 nobody asked for, 103 Early Hints)
    before its answer: the call's answer is the final one, and the next call on the same
    connection gets its own. A 101 is ConnectionLost, and its connection is not reused."""
    answers = [
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst",
        b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecond",
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstale",
        b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nfourth",
    ]
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while answers:
            await read_request(reader)
            writer.write(answers.pop(0))
            await writer.drain()

    client = Http1Client()
    async with Serving(handler) as serving:
        url = serving.url
        bodies = [(await client.request("POST", url, {}, b"x", 5)).body for _ in range(2)]
        assert connections == 1
        with pytest.raises(ConnectionLost, match="101"):
            await client.request("POST", url, {}, b"x", 5)
        fourth = await client.request("POST", url, {}, b"x", 5)
        client.close()
    assert bodies == [b"first", b"second"]
    assert (fourth.status, fourth.body, connections) == (200, b"fourth", 2)
