"""Large JSON bodies against a real `modelfn serve`: parsed off the event loop, absurd
structure refused before parsing, the JSON limit, and a server that keeps serving."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import numpy as np
import pytest
from onnx import TensorProto
from onnx_models import identity_graph, save, simple_graph
from servers import Server

from modelfn.process.supervisor import alive, descendants

if TYPE_CHECKING:
    from collections.abc import Iterator

SMALL = {"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": [0.5] * 16},
                    {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": [0.5] * 16}]}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("large") / "models"
    save(root / "simple", simple_graph(width=16), config='name: "simple"\nmax_batch_size: 8\n')
    save(root / "wide", identity_graph(TensorProto.FLOAT, [-1]), config=(
        'name: "wide"\nmax_batch_size: 0\n'
        'input [{ name: "IN" data_type: TYPE_FP32 dims: [-1] }]\n'
        'output [{ name: "OUT" data_type: TYPE_FP32 dims: [-1] }]\n'))
    save(root / "text", identity_graph(TensorProto.STRING, [-1]), config=(
        'name: "text"\nmax_batch_size: 0\n'
        'input [{ name: "IN" data_type: TYPE_STRING dims: [-1] }]\n'
        'output [{ name: "OUT" data_type: TYPE_STRING dims: [-1] }]\n'))
    srv = Server(root)
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


class SmallRequests:
    """A second client sending small requests in a loop, timing each answer."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.done: list[tuple[float, float, int]] = []  # (sent, answered, status)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        with httpx.Client(timeout=60) as client:
            while not self._stop.is_set():
                sent = time.monotonic()
                status = client.post(f"{self.url}/v2/models/simple/infer", json=SMALL).status_code
                self.done.append((sent, time.monotonic(), status))

    def __enter__(self) -> SmallRequests:
        self._thread.start()
        time.sleep(0.2)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def between(self, start: float, end: float) -> list[tuple[float, float, int]]:
        return [d for d in self.done if d[0] >= start and d[1] <= end]


def test_a_large_json_body_is_parsed_while_others_are_served(server: Server) -> None:
    values = np.random.default_rng(0).random(1_200_000, dtype=np.float32)
    data = ",".join(f"{v:.7f}" for v in values)
    body = (f'{{"inputs":[{{"name":"IN","shape":[{len(values)}],"datatype":"FP32",'
            f'"data":[{data}]}}]}}').encode()
    assert len(body) > 8 * 2**20
    url = f"http://{server.url}"
    with SmallRequests(url) as small:
        start = time.monotonic()
        answer = httpx.post(f"{url}/v2/models/wide/infer", content=body, timeout=120)
        end = time.monotonic()
        time.sleep(0.1)
    assert answer.status_code == 200, answer.text[:300]
    # httpx asks for gzip; an answer this large goes as it is rather than hold the loop
    assert answer.request.headers["accept-encoding"].startswith("gzip")
    assert "content-encoding" not in answer.headers
    np.testing.assert_allclose(answer.json()["outputs"][0]["data"][:5], values[:5], rtol=1e-6)
    during = small.between(start, end)
    assert {status for _, _, status in small.done} == {200}
    # the loop kept answering while the big body was being decoded elsewhere
    assert len(during) >= 3, (len(during), end - start)
    worst = max(answered - sent for sent, answered, _ in small.done)
    print(f"big JSON: {len(body) / 2**20:.1f} MiB in {end - start:.2f} s; "
          f"{len(during)} small answers meanwhile, slowest {worst * 1000:.1f} ms")


def test_millions_of_empty_lists_are_refused_before_parsing(server: Server) -> None:
    count = 4_000_000
    body = (b'{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"FP32","data":['
            + b"[]," * (count - 1) + b"[]]}]}")
    answer = httpx.post(f"http://{server.url}/v2/models/simple/infer", content=body, timeout=60)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error == (f"the request's JSON has {count} empty arrays; tensor data has none "
                     "unless a dimension is 0")
    assert httpx.post(f"http://{server.url}/v2/models/simple/infer", json=SMALL).status_code == 200


def test_more_arrays_than_the_config_allows_are_refused_before_parsing(server: Server) -> None:
    count = 1_000_000
    body = (b'{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"FP32","data":['
            + b"[0]," * (count - 1) + b"[0]]}]}")
    answer = httpx.post(f"http://{server.url}/v2/models/simple/infer", content=body, timeout=60)
    assert answer.status_code == 400
    assert answer.json()["error"] == (
        f"the request's JSON has {count + 3} arrays, but a request for model 'simple' can hold "
        "at most 784: its inputs take at most 256 elements")


def test_brackets_inside_strings_are_text_not_arrays(server: Server) -> None:
    """The counts above are of arrays: a request whose strings hold brackets is valid."""
    url = f"http://{server.url}/v2/models/simple/infer"
    # a fixed-dims model, whose bound is 784 arrays, with an id and a parameter full of them
    request = {**SMALL, "id": "[" * 70_000, "parameters": {"note": "a[0] []" * 14_000}}
    answer = httpx.post(url, json=request, timeout=60)
    assert answer.status_code == 200, answer.text[:300]
    assert answer.json()["id"] == "[" * 70_000
    # escaped quotes do not end a string early: the brackets after them are still text
    request = {**SMALL, "id": '\\"[]' * 20_000}
    answer = httpx.post(url, json=request, timeout=60)
    assert answer.status_code == 200, answer.text[:300]
    # BYTES data that is JSON text: 600 "[]" in strings, over the bound of 256 empty arrays
    texts = ['{"tags": [], "ids": []}' + " " * 200] * 300
    answer = httpx.post(f"http://{server.url}/v2/models/text/infer", timeout=60, json={
        "inputs": [{"name": "IN", "shape": [300], "datatype": "BYTES", "data": texts}]})
    assert answer.status_code == 200, answer.text[:300]
    assert answer.json()["outputs"][0]["data"] == texts
    # and the same arrays outside a string are still refused
    body = (b'{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"FP32","data":['
            + b"[0]," * 99_999 + b'[0]]}],"id":"' + b"[" * 70_000 + b'"}')
    answer = httpx.post(url, content=body, timeout=60)
    assert answer.status_code == 400
    assert answer.json()["error"].startswith("the request's JSON has 100003 arrays")


def test_bad_json_decoded_in_the_helper_is_the_same_400(server: Server) -> None:
    body = b'{"inputs":[{"name":"IN","shape":[3],"datatype":"FP32","data":[1,2,"x"]}],"pad":"' \
        + b"p" * (2 * 2**20) + b'"}'
    answer = httpx.post(f"http://{server.url}/v2/models/wide/infer", content=body, timeout=60)
    assert answer.status_code == 400
    assert answer.json()["error"] == ("input 'IN' of datatype FP32 expects JSON numbers in 'data' "
                                      "but got strings")
    truncated = httpx.post(f"http://{server.url}/v2/models/wide/infer", content=body[:-3],
                           timeout=60)
    assert truncated.status_code == 400
    assert "malformed JSON" in truncated.json()["error"]


def test_the_json_limit_points_to_binary_data(server: Server) -> None:
    body = b'{"inputs":[],"pad":"' + b"p" * (17 * 2**20) + b'"}'
    answer = httpx.post(f"http://{server.url}/v2/models/wide/infer", content=body, timeout=60)
    assert answer.status_code == 413
    assert "exceeds the limit of 16777216 bytes; send large tensors as binary data" in \
        answer.json()["error"]
    # the same size as binary data is fine
    values = np.zeros(17 * 2**20 // 4, np.float32)
    header = b'{"inputs":[{"name":"IN","shape":[%d],"datatype":"FP32",' \
             b'"parameters":{"binary_data_size":%d}}],' \
             b'"outputs":[{"name":"OUT","parameters":{"binary_data":true}}]}' % (
                 len(values), values.nbytes)
    binary = httpx.post(f"http://{server.url}/v2/models/wide/infer",
                        content=header + values.tobytes(), timeout=60,
                        headers={"Inference-Header-Content-Length": str(len(header))})
    assert binary.status_code == 200


def test_a_server_killed_with_sigkill_leaves_no_json_helper(tmp_path: Path) -> None:
    """The helper that decodes large JSON bodies, and multiprocessing's resource tracker
    beside it, die with the server even when it gets no chance to stop them."""
    root = tmp_path / "models"
    save(root / "wide", identity_graph(TensorProto.FLOAT, [-1]), config=(
        'name: "wide"\nmax_batch_size: 0\n'
        'input [{ name: "IN" data_type: TYPE_FP32 dims: [-1] }]\n'
        'output [{ name: "OUT" data_type: TYPE_FP32 dims: [-1] }]\n'))
    srv = Server(root)
    try:
        srv.wait_ready()
        data = ",".join(["0.5"] * 400_000)
        body = f'{{"inputs":[{{"name":"IN","shape":[400000],"datatype":"FP32","data":[{data}]}}]}}'
        answer = httpx.post(f"http://{srv.url}/v2/models/wide/infer", content=body, timeout=60)
        assert answer.status_code == 200, answer.text[:300]
        helpers = descendants(srv.proc.pid)
        assert helpers, "the large body was not decoded in a helper process"
        os.kill(srv.proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 15
        while (left := {pid for pid in helpers if alive(pid)}) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not left, f"left behind: {[Path(f'/proc/{p}/cmdline').read_bytes() for p in left]}"
    finally:
        srv.proc.stop(grace=1)
