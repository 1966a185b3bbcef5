"""The HTTP edge against a real `modelfn serve`, driven the way an attacker would with raw
sockets: oversize heads and too many fields (431), slow heads and idle connections (408),
stalled bodies (closed), clients hanging up mid-body (counted, not an ERROR), pipelining,
smuggling-shaped framing (400), many idle connections. After all of it the server serves."""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from servers import Server
from servers import edge_metric as metric

if TYPE_CHECKING:
    from collections.abc import Iterator

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
BODY = (EXAMPLES / "requests" / "digits.json").read_bytes()
EXPECTED = json.loads((EXAMPLES / "requests" / "digits_expected.json").read_text())["label"]
LIVE = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n"


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    env = {**os.environ, "MODELFN_HEAD_TIMEOUT_S": "1", "MODELFN_BODY_TIMEOUT_S": "1"}
    running = Server(EXAMPLES / "models", env=env)
    running.wait_ready()
    yield running
    log = running.stop()
    assert "Traceback" not in log and "ERROR" not in log, log[-3000:]


def exchange(server: Server, data: bytes, wait: float = 10) -> bytes:
    """Send ``data``, then read until the server closes (or ``wait`` passes)."""
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        if data:
            sock.sendall(data)
        sock.settimeout(wait)
        out = b""
        try:
            while chunk := sock.recv(65536):
                out += chunk
        except TimeoutError:
            out += b"<still open>"
        except ConnectionResetError:
            out += b"<reset>"
    return out


def assert_serving(server: Server) -> None:
    answer = httpx.post(f"http://{server.url}/v2/models/digits/infer", content=BODY, timeout=30)
    assert answer.status_code == 200
    assert answer.json()["outputs"][0]["data"] == EXPECTED


def test_an_oversize_head_is_431_before_it_is_buffered(server: Server) -> None:
    before = metric(server, "heads_too_large")
    out = exchange(server, LIVE + b"X-Big: " + b"a" * 4_000_000 + b"\r\n\r\n")  # still sending
    assert out.startswith(b"HTTP/1.1 431 ")
    assert b"the request head exceeds 16384 bytes" in out
    out = exchange(server, b"GET /v2/health/live?" + b"q" * 20_000 + b" HTTP/1.1\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 431 ")
    assert metric(server, "heads_too_large") == before + 2
    assert_serving(server)


def test_too_many_header_fields_is_431_and_fewer_is_fine(server: Server) -> None:
    fields = b"".join(b"X-%d: 1\r\n" % i for i in range(101))
    out = exchange(server, LIVE + fields + b"\r\n")
    assert out.startswith(b"HTTP/1.1 431 ")
    assert b"more than 100 header fields" in out
    fields = b"".join(b"X-%d: 1\r\n" % i for i in range(90))
    out = exchange(server, LIVE + b"Connection: close\r\n" + fields + b"\r\n")
    assert out.startswith(b"HTTP/1.1 200 ")


def test_a_slow_head_and_an_idle_connection_get_408(server: Server) -> None:
    before = metric(server, "head_timeouts")
    slow = exchange(server, LIVE)  # the head never ends
    idle = exchange(server, b"")  # nothing at all
    for out in (slow, idle):
        assert out.startswith(b"HTTP/1.1 408 "), out
    assert metric(server, "head_timeouts") == before + 2


def test_a_stalled_body_is_closed_and_a_vanished_client_is_not_an_error(
    server: Server,
) -> None:
    head = b"POST /v2/models/digits/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
    before = (metric(server, "body_timeouts"), metric(server, "client_disconnects"))
    stalled = exchange(server, head % len(BODY) + BODY[:100])
    assert stalled == b""  # closed without an answer: nobody would read it
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(head % len(BODY) + BODY[:100])
        time.sleep(0.2)  # the app is reading the body when the client goes
    time.sleep(0.5)
    after = (metric(server, "body_timeouts"), metric(server, "client_disconnects"))
    assert after[0] == before[0] + 1
    assert after[1] >= before[1] + 2  # the stalled one and the vanished one
    assert_serving(server)


def test_pipelined_requests_are_answered_in_order(server: Server) -> None:
    infer = (b"POST /v2/models/digits/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
             % len(BODY) + BODY)
    out = exchange(server, LIVE + b"\r\n" + infer + LIVE + b"Connection: close\r\n\r\n")
    assert out.count(b"HTTP/1.1 200 OK") == 3
    assert out.index(b'{"live":true}') < out.index(b'"model_name":"digits"') < out.rindex(
        b'{"live":true}')


@pytest.mark.parametrize("framing", [
    b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",  # both: smuggling
    b"Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",  # two lengths
    b"Transfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",  # a bad chunk size
])
def test_ambiguous_framing_is_400(server: Server, framing: bytes) -> None:
    before = metric(server, "bad_requests")
    out = exchange(server, b"POST /v2/models/digits/infer HTTP/1.1\r\nHost: x\r\n" + framing)
    assert out.startswith(b"HTTP/1.1 400 ")
    assert metric(server, "bad_requests") == before + 1
    assert_serving(server)


def test_a_chunked_body_is_read_whole(server: Server) -> None:
    out = exchange(server, b"POST /v2/models/digits/infer HTTP/1.1\r\nHost: x\r\n"
                           b"Connection: close\r\nTransfer-Encoding: chunked\r\n\r\n"
                           + b"%x\r\n" % 100 + BODY[:100] + b"\r\n"
                           + b"%x\r\n" % (len(BODY) - 100) + BODY[100:] + b"\r\n0\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 200 ")
    assert json.loads(out.split(b"\r\n\r\n", 1)[1])["outputs"][0]["data"] == EXPECTED


@pytest.mark.parametrize("size", [70 * 2**20, 17 * 2**20])  # over the body / JSON limit
def test_a_body_refused_early_is_read_to_its_end_then_the_connection_serves(
        server: Server, size: int) -> None:
    """A 413 goes out before the body is read; the rest of that body is still this
    request's, not the next one's head. Pools (the gateway's, a platform's ingress) reuse
    the connection: the next request on it must get its own answer, and only that."""
    head = (b"POST /v2/models/digits/infer HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % size)
    follow = (b"POST /v2/models/digits/infer HTTP/1.1\r\nHost: x\r\n"
              b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY)
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(head)
        sock.sendall(b" " * size)
        sock.sendall(follow)
        sock.settimeout(10)
        out = b""
        while out.count(b"HTTP/1.1 ") < 2 or not out.endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            out += chunk
    answers = out.split(b"HTTP/1.1 ")[1:]
    assert [a[:3] for a in answers] == [b"413", b"200"], out[:600]
    assert json.loads(answers[1].split(b"\r\n\r\n", 1)[1])["outputs"][0]["data"] == EXPECTED
    assert_serving(server)


def test_many_idle_connections_do_not_stop_a_real_client(server: Server) -> None:
    idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(300)]
    try:
        assert_serving(server)
    finally:
        for sock in idle:
            sock.close()


def post(path: str, body: bytes) -> bytes:
    return (b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
            % (path.encode(), len(body)) + body)


INFER = post("/v2/models/digits/infer", BODY)


def test_a_head_under_the_limit_is_taken_however_tcp_splits_it(server: Server) -> None:
    """A 15 KiB head in 1448-byte segments (a normal MSS) used to be counted about twice
    (the bytes of each read, and again the fields the parser completed) and refused 431."""
    head = (b"POST /v2/models/digits/infer HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            b"X-Pad: " + b"p" * 15_000 + b"\r\nContent-Length: %d\r\n\r\n" % len(BODY))
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for at in range(0, len(head), 1448):
            sock.sendall(head[at:at + 1448])
            time.sleep(0.002)  # each segment its own read
        sock.sendall(BODY)
        sock.settimeout(10)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
    assert out.startswith(b"HTTP/1.1 200 "), out[:200]
    assert json.loads(out.split(b"\r\n\r\n", 1)[1])["outputs"][0]["data"] == EXPECTED


def test_a_client_that_pipelines_without_reading_is_closed_not_queued(server: Server) -> None:
    """Every request parsed is queued until answered: a client sending 2,000 requests and
    reading none grew the server by 50x what it sent (2.4 GB for 46 MB). Past 256 waiting
    answers the connection closes; 200 pipelined at once are all answered."""
    before = metric(server, "pipelines_too_deep")
    many = exchange(server, (LIVE + b"\r\n") * 2000, wait=10)
    assert many.count(b"HTTP/1.1 200 ") <= 256
    assert metric(server, "pipelines_too_deep") == before + 1
    fine = exchange(server, (LIVE + b"\r\n") * 199 + LIVE + b"Connection: close\r\n\r\n")
    assert fine.count(b"HTTP/1.1 200 ") == 200
    assert_serving(server)


def held_server(root: Path, delay_s: float = 2) -> Server:
    """digits whose batcher holds a lone request ``delay_s`` for a batch of 64, with 1 s
    clocks."""
    model = root / "models" / "digits"
    shutil.copytree(EXAMPLES / "models" / "digits", model)
    config = (model / "config.pbtxt").read_text().replace(
        "dynamic_batching { }", "dynamic_batching { max_queue_delay_microseconds: "
                                f"{int(delay_s * 1e6)} preferred_batch_size: [ 64 ] }}")
    (model / "config.pbtxt").write_text(config)
    env = {**os.environ, "MODELFN_HEAD_TIMEOUT_S": "1", "MODELFN_BODY_TIMEOUT_S": "1"}
    held = Server(root / "models", env=env)
    held.wait_ready()
    return held


def test_the_clocks_wait_while_the_server_holds_a_pipelined_request(
        tmp_path: Path) -> None:
    """A request pipelined behind one the server takes 2 s to answer: the server stops
    reading meanwhile, so the rest of the second body waits in the socket. The body clock
    (1 s here) used to run on and close the connection, losing both answers."""
    slow = held_server(tmp_path)
    try:
        with socket.create_connection(("127.0.0.1", slow.port)) as sock:
            sock.sendall(INFER + INFER[:-100])  # the second body is not whole yet
            time.sleep(1.5)  # past the body clock, while the first waits for its batch
            sock.sendall(INFER[-100:])
            sock.settimeout(15)
            out = b""
            while out.count(b"HTTP/1.1 200 ") < 2 or not out.endswith(b"}"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                out += chunk
        assert out.count(b"HTTP/1.1 200 ") == 2, out[:300]
    finally:
        slow.stop()


#: past the size whose JSON is decoded in the helper process (``runtime/offload.py``)
PADDED = b" " * (1 << 20) + BODY


@pytest.mark.parametrize(("path", "body"), [
    ("/v2/models/digits/infer", BODY),  # the edge's shortcut
    ("/v2/models/digits/infer?via=asgi", BODY),  # a query string: the ASGI app's path
    ("/v2/models/digits/infer", PADDED),  # decoded in the helper, then queued
], ids=["shortcut", "asgi", "helper"])
def test_a_client_that_hangs_up_while_queued_is_withdrawn(
        tmp_path: Path, path: str, body: bytes) -> None:
    """A client that leaves while its request waits in the batcher's queue: the request
    leaves the queue, counts as a disconnect and CANCELED, not a success, and never runs.
    It used to run in the next batch and count as a success, with no disconnect, on every
    path: the edge's shortcut, the ASGI app's, and the helper process's."""
    held = held_server(tmp_path, delay_s=4)
    try:
        hang_up_while_queued(held, post(path, body))
    finally:
        log = held.stop()
    assert "Traceback" not in log and "ERROR" not in log, log[-3000:]


def test_requests_pipelined_on_the_asgi_path_are_withdrawn_without_an_error(
        tmp_path: Path) -> None:
    """Two requests pipelined on the ASGI app's path, the client gone while the first is
    queued: the first is withdrawn. uvicorn marks only the last request it parsed as
    disconnected, so the first used to be answered into the closed transport, which
    uvloop refuses: "Exception in ASGI application" in the log."""
    held = held_server(tmp_path, delay_s=4)
    asgi = post("/v2/models/digits/infer?via=asgi", BODY)
    try:
        hang_up_while_queued(held, asgi + asgi)
    finally:
        log = held.stop()
    assert "Traceback" not in log and "ERROR" not in log, log[-3000:]


def held_counts(server: Server) -> tuple[float, ...]:
    """(client disconnects, digits' CANCELED, successes, rows, pending requests)."""
    text = httpx.get(f"http://{server.url}/metrics").text
    found = {(s.name, frozenset(s.labels.items())): s.value
             for f in text_string_to_metric_families(text) for s in f.samples}
    model = {"model": "digits", "version": "1"}

    def value(name: str, **labels: str) -> float:
        return found.get((name, frozenset({**model, **labels}.items())), 0.0)

    return (found[("modelfn_http_client_disconnects_total", frozenset())],
            value("nv_inference_request_failure_total", reason="CANCELED"),
            value("nv_inference_request_success_total"),
            value("nv_inference_count_total"),
            value("nv_inference_pending_request_count"))


def hang_up_while_queued(held: Server, data: bytes) -> None:
    """Send ``data`` to ``held`` (``held_server``), hang up once a request is queued, and
    check that one request was withdrawn: a disconnect and CANCELED, none pending, and no
    rows run but the next request's own."""
    before = held_counts(held)
    with socket.create_connection(("127.0.0.1", held.port)) as sock:
        sock.sendall(data)
        # the helper process starts on the first large JSON body: seconds on a busy host
        deadline = time.monotonic() + 30
        while held_counts(held)[4] < 1:  # queued: the batch waits 4 s for more rows
            assert time.monotonic() < deadline, "the request was never queued"
            time.sleep(0.05)
    deadline = time.monotonic() + 3
    while (held_counts(held)[:2] != (before[0] + 1, before[1] + 1)
           and time.monotonic() < deadline):
        time.sleep(0.05)
    assert held_counts(held)[:2] == (before[0] + 1, before[1] + 1)
    assert held_counts(held)[4] == 0
    assert_serving(held)  # its own batch, after the delay
    after = held_counts(held)
    rows = json.loads(BODY)["inputs"][0]["shape"][0]
    assert after[2:4] == (before[2] + 1, before[3] + rows)  # that request's rows alone
