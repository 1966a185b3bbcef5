"""The V2 infer route on the HTTP edge's fast path (``net/edge.py``, ``protocol/rest_edge.py``).

Against a real ``modelfn serve``: every answer the shortcut gives (successes, JSON and binary,
and every error it can meet) is the answer the ASGI path gives for the same request, which a
query string forces (the shortcut takes none). Then keep-alive, HTTP/1.0, ``Connection:
close`` and pipelining across both paths. In-process, on the protocol itself: which requests
take the shortcut, and that one taken makes no task.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import struct
import time
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np
import pytest
from onnx import TensorProto
from onnx_models import identity_graph, lookup_graph, save, simple_graph
from servers import Server, edge_metric
from uvicorn.config import Config
from uvicorn.server import ServerState

from modelfn.net.edge import edge_protocol
from modelfn.protocol.rest import create_app
from modelfn.protocol.rest_edge import RestFastPath
from modelfn.runtime.repository import Repository

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

LOOKUP_CONFIG = """
max_batch_size: 8
input [ { name: "INDEX" data_type: TYPE_INT64 dims: [ 1 ] } ]
output [ { name: "VALUE" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU } ]
"""

#: the model answers any width, but its output must reshape to 4: a width of 3 fails only
#: when the answer is encoded, after the batcher counted a success
MISFIT_CONFIG = """
max_batch_size: 4
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 2, 2 ] reshape: { shape: [ 4 ] } } ]
"""


def _repo(root: Path) -> Path:
    save(root / "simple", simple_graph(scale=1.0), version=1)
    save(root / "simple", simple_graph(scale=2.0), version=2,
         config="version_policy { all {} }\n")
    save(root / "words", identity_graph(TensorProto.STRING, ["N", 2]))
    save(root / "lookup", lookup_graph([1.0, 2.0, 3.0]), config=LOOKUP_CONFIG)
    save(root / "misfit", identity_graph(TensorProto.FLOAT, ["N", "D"]), config=MISFIT_CONFIG)
    save(root / "wide", simple_graph(width=WIDE))  # a 2-row binary request: 256 KiB
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = Server(_repo(tmp_path_factory.mktemp("shortcut")))
    running.wait_ready()
    yield running
    log = running.stop()
    assert "Traceback" not in log, log[-3000:]


def _json(**extra: Any) -> bytes:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    return json.dumps({"inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": a.ravel().tolist()},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": a.tolist()},
    ], **extra}).encode()


def _binary() -> tuple[bytes, dict[str, str]]:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    header = json.dumps({"inputs": [
        {"name": n, "shape": [1, 16], "datatype": "FP32",
         "parameters": {"binary_data_size": a.nbytes}} for n in ("INPUT0", "INPUT1")
    ], "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}},
                   {"name": "OUTPUT1"}]}).encode()
    return header + a.tobytes() * 2, {"Inference-Header-Content-Length": str(len(header))}


def _words() -> bytes:
    blob = b"".join(struct.pack("<I", len(w)) + w for w in (b"caf\xc3\xa9", b""))
    header = json.dumps({"inputs": [{"name": "IN", "shape": [1, 2], "datatype": "BYTES",
                                     "parameters": {"binary_data_size": len(blob)}}]}).encode()
    return header + blob


BINARY, BINARY_HEADERS = _binary()
WORDS = _words()

CASES: dict[str, tuple[str, bytes, dict[str, str], int]] = {
    "json": ("simple", _json(id="r-1"), {}, 200),
    "versioned": ("simple/versions/2", _json(), {}, 200),
    "binary": ("simple", BINARY, BINARY_HEADERS, 200),
    "bytes": ("words", WORDS, {"Inference-Header-Content-Length": str(WORDS.index(b"]}") + 2)},
              200),
    "unknown model": ("nope", _json(), {}, 404),
    "unknown version": ("simple/versions/9", _json(), {}, 404),
    "malformed json": ("simple", b'{"inputs": [', {}, 400),
    "wrong shape": ("simple", _json().replace(b'"shape": [1, 16]', b'"shape": [2, 8]', 1), {},
                    400),
    "header length not a number": ("simple", BINARY, {"Inference-Header-Content-Length": "x"},
                                   400),
    "header length past the body": ("simple", BINARY,
                                    {"Inference-Header-Content-Length": "999999"}, 400),
    "too many rows": ("lookup", json.dumps({"inputs": [
        {"name": "INDEX", "shape": [9, 1], "datatype": "INT64", "data": [0] * 9}]}).encode(),
        {}, 400),
    "the backend fails the batch": ("lookup", json.dumps({"inputs": [
        {"name": "INDEX", "shape": [1, 1], "datatype": "INT64", "data": [7]}]}).encode(),
        {}, 500),
}


WIDE = 16384


def _wide(rows: int = 2) -> tuple[bytes, bytes, np.ndarray, np.ndarray]:
    """A binary request of ``rows`` rows for "wide": its head and body, and its inputs."""
    rng = np.random.default_rng(rows)
    a, b = (rng.random((rows, WIDE), dtype=np.float32) for _ in range(2))
    header = json.dumps({"inputs": [
        {"name": n, "shape": [rows, WIDE], "datatype": "FP32",
         "parameters": {"binary_data_size": a.nbytes}} for n in ("INPUT0", "INPUT1")
    ], "parameters": {"binary_data_output": True}}).encode()
    body = header + a.tobytes() + b.tobytes()
    head = (b"POST /v2/models/wide/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n"
            b"Inference-Header-Content-Length: %d\r\n\r\n" % (len(body), len(header)))
    return head, body, a, b


def _outputs(answer: bytes) -> dict[str, np.ndarray]:
    """The binary outputs of one answer (head included), by name."""
    head, body = answer.split(b"\r\n\r\n", 1)
    length = int(re.search(rb"inference-header-content-length: (\d+)", head, re.I)[1])  # type: ignore[index]
    doc, offset, arrays = json.loads(body[:length]), length, {}
    for output in doc["outputs"]:
        size = output["parameters"]["binary_data_size"]
        arrays[output["name"]] = np.frombuffer(body[offset:offset + size], np.float32).reshape(
            output["shape"])
        offset += size
    return arrays


def _answer(response: httpx.Response) -> tuple[int, bytes, dict[str, str]]:
    headers = {k: v for k, v in response.headers.items() if k != "date"}
    return response.status_code, response.content, headers


@pytest.mark.parametrize("case", list(CASES))
def test_the_shortcut_answers_as_the_asgi_path_does(server: Server, case: str) -> None:
    model, body, headers, status = CASES[case]
    url = f"http://{server.url}/v2/models/{model}/infer"
    with httpx.Client(timeout=30) as client:
        shortcut = _answer(client.post(url, content=body, headers=headers))
        asgi = _answer(client.post(url + "?path=asgi", content=body, headers=headers))
        assert client.get(f"http://{server.url}/v2/health/ready").status_code == 200
    assert shortcut == asgi
    assert shortcut[0] == status, shortcut


def _exchange(server: Server, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(data)
        sock.settimeout(10)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
    return out


def _infer(body: bytes, version: bytes = b"HTTP/1.1", extra: bytes = b"") -> bytes:
    return (b"POST /v2/models/simple/infer %s\r\nHost: x\r\nContent-Length: %d\r\n%s\r\n"
            % (version, len(body), extra)) + body


def test_keep_alive_serves_many_requests_on_one_connection(server: Server) -> None:
    expected = np.arange(16, dtype=np.float32) * 4  # (a + a) x 2: version 2, the latest
    with httpx.Client(timeout=30) as client:
        for n in range(50):
            url = f"http://{server.url}/v2/models/simple/infer" + ("?n" if n % 5 == 0 else "")
            answer = client.post(url, content=_json())
            assert answer.status_code == 200
            assert answer.json()["outputs"][0]["data"] == expected.tolist()
            assert answer.headers.get("connection") is None


@pytest.mark.parametrize("request_bytes", [
    _infer(_json()),  # the shortcut
    b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n",  # the ASGI path
], ids=["shortcut", "asgi"])
def test_an_idle_keep_alive_connection_is_closed_quietly_after_its_timeout(
        server: Server, request_bytes: bytes) -> None:
    """uvicorn's keep-alive timeout (5 s), kept by the edge's sweeper rather than a timer
    per request: the connection closes without a word, well before the 10 s head timeout
    would have answered 408."""
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(request_bytes)
        sock.settimeout(30)
        answer = sock.recv(65536)
        answered = time.monotonic()
        assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
        rest = b""
        while chunk := sock.recv(65536):
            rest += chunk
        idle = time.monotonic() - answered
    assert b"HTTP/1.1" not in rest  # closed (EOF), no 408
    assert 4.5 < idle < 9.5, idle


@pytest.mark.parametrize(("version", "extra"), [
    (b"HTTP/1.0", b""),
    (b"HTTP/1.1", b"Connection: close\r\n"),
])
def test_a_closing_request_is_answered_then_closed(server: Server, version: bytes,
                                                   extra: bytes) -> None:
    out = _exchange(server, _infer(_json(), version, extra))  # reads until the server closes
    head, body = out.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"\r\nconnection: close" in head
    assert json.loads(body)["model_name"] == "simple"


def test_pipelined_requests_across_both_paths_are_answered_in_order(server: Server) -> None:
    live = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"
    bad = _infer(b'{"inputs": [')
    last = _infer(_json(id="last"), extra=b"Connection: close\r\n")
    out = _exchange(server, _infer(_json(id="first")) + live + bad + last)
    statuses = re.findall(rb"HTTP/1\.1 (\d{3}) ", out)
    assert statuses == [b"200", b"200", b"400", b"200"]
    assert (out.index(b'"id":"first"') < out.index(b'{"live":true}')
            < out.index(b"malformed JSON") < out.index(b'"id":"last"'))


# in-process: the protocol itself ---------------------------------------------------------------


class _Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(name,
                                                                                   default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


@pytest.fixture
async def protocol(simple_repo: Path) -> Any:
    repository = Repository(simple_repo)
    repository.load()
    app = create_app(repository)
    protocol_class = edge_protocol(fast_path=RestFastPath(app))
    config = Config(app, http=protocol_class, proxy_headers=False, ws="none")
    config.load()
    async with app.router.lifespan_context(app):
        connection = protocol_class(config=config, server_state=ServerState(), app_state={})
        connection.connection_made(_Transport())
        yield connection


async def _answered(connection: Any, count: int = 1) -> bytes:
    for _ in range(500):
        if connection.server_state.total_requests >= count:
            return bytes(connection.transport.written)
        await asyncio.sleep(0.01)
    raise AssertionError(f"no answer: {bytes(connection.transport.written)!r}")


async def test_an_infer_request_takes_the_shortcut_and_makes_no_task(protocol: Any) -> None:
    body = json.dumps({"inputs": [
        {"name": n, "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 16}
        for n in ("INPUT0", "INPUT1")]}).encode()
    request = _infer(body)
    protocol.data_received(request[:-5])  # the head and most of the body
    assert type(protocol.cycle).__name__ == "Shortcut"
    protocol.data_received(request[-5:])
    assert not protocol.tasks  # answered from the batch's callback, not from a task
    out = await _answered(protocol)
    assert out.startswith(b"HTTP/1.1 200 OK\r\n")
    outputs = json.loads(out.split(b"\r\n\r\n", 1)[1])["outputs"]
    assert outputs[0]["data"] == [4.0] * 16  # version 2: (1 + 1) x 2


@pytest.mark.parametrize("head", [
    b"POST /v2/models/simple/infer?x=1 HTTP/1.1\r\nContent-Length: 2\r\n",  # a query
    b"POST /v2/models/si%6Dple/infer HTTP/1.1\r\nContent-Length: 2\r\n",  # an escape
    b"POST /v2/models/simple/infer HTTP/1.1\r\nTransfer-Encoding: chunked\r\n",  # no length
    b"POST /v2/models/simple/infer HTTP/1.1\r\nContent-Length: 2\r\nExpect: 100-continue\r\n",
    b"POST /v2/models/simple/infer HTTP/1.1\r\nContent-Length: 99999999999\r\n",  # over limit
    b"POST /v2/models/simple/ready HTTP/1.1\r\nContent-Length: 2\r\n",  # another route
    b"PUT /v2/models/simple/infer HTTP/1.1\r\nContent-Length: 2\r\n",  # another method
])
async def test_anything_else_takes_the_asgi_path(protocol: Any, head: bytes) -> None:
    protocol.data_received(head + b"Host: x\r\n\r\n")
    assert type(protocol.cycle).__name__ == "RequestResponseCycle"


def test_an_answer_that_cannot_be_encoded_counts_once_as_a_failure(server: Server) -> None:
    """On the shortcut the answer is encoded inside the batch's resolution: the success the
    batcher counted must be taken back whole, its time with it."""
    def infer(width: int) -> httpx.Response:
        return httpx.post(f"http://{server.url}/v2/models/misfit/infer", timeout=30,
                          content=json.dumps({"inputs": [{"name": "IN", "shape": [1, width],
                                                          "datatype": "FP32",
                                                          "data": [1.0] * width}]}))

    def inference() -> dict[str, Any]:
        stats = httpx.get(f"http://{server.url}/v2/models/misfit/stats").json()
        return stats["model_stats"][0]["inference_stats"]  # type: ignore[no-any-return]

    for _ in range(3):
        failed = infer(3)
        assert failed.status_code == 500
        assert "cannot reshape output 'OUT'" in failed.json()["error"]
    counted = inference()
    assert counted["success"] == {"count": 0, "ns": 0}
    assert counted["fail"]["count"] == 3 and counted["fail"]["ns"] > 0
    assert infer(4).status_code == 200
    assert inference()["success"]["count"] == 1


# large binary bodies: read into one buffer past the parser -------------------------------------

def _read_answers(sock: socket.socket, count: int) -> list[bytes]:
    """``count`` answers off ``sock``, each whole (head and Content-Length body)."""
    sock.settimeout(30)
    out, answers = b"", []
    while len(answers) < count:
        if b"\r\n\r\n" in out:
            head, rest = out.split(b"\r\n\r\n", 1)
            length = int(re.search(rb"\ncontent-length: (\d+)", head, re.I)[1])  # type: ignore[index]
            if len(rest) >= length:
                answers.append(head + b"\r\n\r\n" + rest[:length])
                out = rest[length:]
                continue
        chunk = sock.recv(1 << 20)
        assert chunk, f"closed after {len(answers)} answers"
        out += chunk
    return answers


def test_a_large_binary_body_in_pieces_is_answered_and_a_pipelined_request_after_it(
        server: Server) -> None:
    """A 256 KiB binary body sent in pieces, the last one with a pipelined request right
    behind it: the edge copies the body into one buffer without the parser, then a fresh
    parser reads what follows. Both are answered, in order, with the model's values."""
    head, body, a, b = _wide()
    next_head, next_body, c, d = _wide(rows=1)
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(head + body[:5000])
        for start, end in ((5000, 70000), (70000, 200000), (200000, len(body))):
            time.sleep(0.05)  # each piece its own read
            sock.sendall(body[start:end] + (next_head + next_body if end == len(body) else b""))
        first, second = _read_answers(sock, 2)
    assert first.startswith(b"HTTP/1.1 200 OK\r\n") and second.startswith(b"HTTP/1.1 200 OK\r\n")
    got = _outputs(first)
    np.testing.assert_array_equal(got["OUTPUT0"], a + b)
    np.testing.assert_array_equal(got["OUTPUT1"], a - b)
    np.testing.assert_array_equal(_outputs(second)["OUTPUT0"], c + d)
    # and the same request answers alike on the ASGI path (a query string takes it there)
    headers = dict(line.split(": ", 1) for line in head.decode().split("\r\n")[1:] if line)
    asgi = httpx.post(f"http://{server.url}/v2/models/wide/infer?path=asgi", content=body,
                      headers={"Inference-Header-Content-Length":
                               headers["Inference-Header-Content-Length"]}, timeout=30)
    assert asgi.status_code == 200
    assert asgi.content == first.split(b"\r\n\r\n", 1)[1]


@pytest.mark.parametrize("closing", [b"Connection: close\r\n", b"HTTP/1.0"])
def test_a_large_closing_request_is_answered_whatever_follows_it(server: Server,
                                                                   closing: bytes) -> None:
    """Bytes after the body of a request that closes the connection are not a request: the
    answer is the request's 200, then the close (they used to make a fresh parser answer
    400 and withdraw the request)."""
    head, body, a, b = _wide()
    if closing == b"HTTP/1.0":
        head = head.replace(b"HTTP/1.1", b"HTTP/1.0", 1)
    else:
        head = head.replace(b"\r\n\r\n", b"\r\n" + closing + b"\r\n", 1)
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(head + body[:100000])
        time.sleep(0.05)
        sock.sendall(body[100000:] + b"GARBAGE\r\n\r\n")
        sock.settimeout(30)
        out = b""
        while chunk := sock.recv(1 << 20):
            out += chunk
    assert out.startswith(b"HTTP/1.1 200 OK\r\n"), out[:200]
    assert b"\r\nconnection: close" in out.split(b"\r\n\r\n", 1)[0]
    np.testing.assert_array_equal(_outputs(out)["OUTPUT0"], a + b)


def test_a_large_body_cut_short_or_stalled_loses_nothing_else(tmp_path: Path) -> None:
    """A client that hangs up halfway through a large body is counted, and one that stalls
    there is closed by the body clock (1 s here), which the buffer's reads keep. The
    server then answers as before."""
    env = {**os.environ, "MODELFN_BODY_TIMEOUT_S": "1"}
    slow = Server(_repo(tmp_path / "models"), env=env)
    slow.wait_ready()
    head, body, a, b = _wide()
    try:
        def disconnects() -> int:
            return edge_metric(slow, "client_disconnects")

        before = disconnects()
        with socket.create_connection(("127.0.0.1", slow.port)) as sock:
            sock.sendall(head + body[:100000])
            time.sleep(0.2)
        time.sleep(0.3)
        assert disconnects() == before + 1
        with socket.create_connection(("127.0.0.1", slow.port)) as sock:
            sock.sendall(head + body[:100000])
            for offset in (100000, 100010, 100020):  # each piece within the 1 s clock
                time.sleep(0.6)
                sock.sendall(body[offset:offset + 10])
            sock.settimeout(10)
            assert sock.recv(1024) == b""  # then the stall: closed without an answer
        with socket.create_connection(("127.0.0.1", slow.port)) as sock:
            sock.sendall(head + body)
            [answer] = _read_answers(sock, 1)
        np.testing.assert_array_equal(_outputs(answer)["OUTPUT0"], a + b)
    finally:
        log = slow.stop()
    assert "Traceback" not in log, log[-3000:]


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))


def test_a_declared_body_costs_only_what_arrived(server: Server) -> None:
    """Clients that each declare an 8 MiB binary body and send 300 KiB of it: the buffer
    grows with what arrived, so 24 of them cost the server about 7 MiB, not 192."""
    head, body, _, _ = _wide()
    declared = 8 << 20
    head = head.replace(b"Content-Length: %d" % len(body), b"Content-Length: %d" % declared)
    before = _rss(server.proc.pid)
    socks = []
    try:
        for _ in range(24):
            sock = socket.create_connection(("127.0.0.1", server.port))
            sock.sendall(head + body + bytes(300 * 1024 - len(body)))
            socks.append(sock)
        time.sleep(0.5)
        grown = _rss(server.proc.pid) - before
    finally:
        for sock in socks:
            sock.close()
    assert grown < 64 << 20, f"{grown >> 20} MiB for 24 bodies of 300 KiB"
    time.sleep(0.3)
    assert httpx.post(f"http://{server.url}/v2/models/simple/infer", content=_json(),
                      timeout=30).status_code == 200
