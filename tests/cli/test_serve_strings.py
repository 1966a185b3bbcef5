"""String (BYTES) tensors through a real `modelfn serve`, with tritonclient, against onnxruntime.

ONNX string tensors are text: the values that reach the model must be the strings the
client sent, not Python reprs of their bytes, over JSON and binary, both ways.
"""

from __future__ import annotations

import struct
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import httpx
import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.http as triton
from onnx import TensorProto, helper
from onnx_models import identity_graph, save
from servers import Server

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

WORDS = ["hello", "wörld", "", "日本語", "tab\there", "x" * 300]
LABELS = ["zéro", "un", "deux", "trois"]


def suffix_graph() -> object:
    """Appends " ✓" to each element of a [N] string tensor: the output proves the model read
    the text (a repr of the bytes would come back as "b'...' ✓")."""
    return helper.make_graph(
        [helper.make_node("StringConcat", ["IN", "suffix"], ["OUT"])],
        "suffix",
        [helper.make_tensor_value_info("IN", TensorProto.STRING, ["N"])],
        [helper.make_tensor_value_info("OUT", TensorProto.STRING, ["N"])],
        initializer=[helper.make_tensor("suffix", TensorProto.STRING, [1], [" ✓".encode()])],
    )


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("strings") / "models"
    save(root / "echo", identity_graph(TensorProto.STRING, ["N", 2]), config=(
        'name: "echo"\nmax_batch_size: 8\ndynamic_batching {}\n'))
    save(root / "suffix", suffix_graph(), config='name: "suffix"\nmax_batch_size: 0\n',
         opset=20)
    save(root / "scores", identity_graph(TensorProto.FLOAT, ["N", 4]), config=(
        'name: "scores"\nmax_batch_size: 8\n'
        'output [{ name: "OUT" data_type: TYPE_FP32 dims: [4] label_filename: "labels.txt" }]\n'
    ))
    (root / "scores" / "labels.txt").write_text("\n".join(LABELS) + "\n", encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[Server]:
    srv = Server(repo)
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def client(server: Server) -> Iterator[triton.InferenceServerClient]:
    c = triton.InferenceServerClient(server.url)
    yield c
    c.close()


def strings(rows: list[str]) -> np.ndarray:
    return np.array([w.encode() for w in rows], dtype=np.object_)


@pytest.mark.parametrize("binary", [False, True])
def test_bytes_round_trip_equals_onnxruntime(repo: Path, client: triton.InferenceServerClient,
                                             binary: bool) -> None:
    data = strings(WORDS).reshape(3, 2)
    tensor = triton.InferInput("IN", [3, 2], "BYTES")
    tensor.set_data_from_numpy(data, binary_data=binary)
    result = client.infer("echo", [tensor], outputs=[
        triton.InferRequestedOutput("OUT", binary_data=binary)])
    got = [x.decode() if isinstance(x, bytes) else x for x in result.as_numpy("OUT").ravel()]
    session = ort.InferenceSession(str(repo / "echo" / "1" / "model.onnx"))
    expected = session.run(None, {"IN": np.array(WORDS, dtype=object).reshape(3, 2)})[0]
    assert got == expected.ravel().tolist() == WORDS


@pytest.mark.parametrize("binary", [False, True])
def test_the_model_reads_the_text(repo: Path, client: triton.InferenceServerClient,
                                  binary: bool) -> None:
    tensor = triton.InferInput("IN", [3], "BYTES")
    tensor.set_data_from_numpy(strings(["héllo", "wörld", "abc"]), binary_data=binary)
    result = client.infer("suffix", [tensor], outputs=[
        triton.InferRequestedOutput("OUT", binary_data=binary)])
    got = [x.decode() if isinstance(x, bytes) else x for x in result.as_numpy("OUT").ravel()]
    session = ort.InferenceSession(str(repo / "suffix" / "1" / "model.onnx"))
    expected = session.run(None, {"IN": np.array(["héllo", "wörld", "abc"], dtype=object)})[0]
    assert got == expected.tolist() == ["héllo ✓", "wörld ✓", "abc ✓"]


def test_concurrent_string_requests_batch_and_each_get_their_own(server: Server) -> None:
    def ask(i: int) -> list[str]:
        c = triton.InferenceServerClient(server.url)
        try:
            words = [f"request {i} ä", f"{i}"]
            tensor = triton.InferInput("IN", [1, 2], "BYTES")
            tensor.set_data_from_numpy(strings(words).reshape(1, 2), binary_data=i % 2 == 0)
            out = c.infer("echo", [tensor]).as_numpy("OUT").ravel()
            return [x.decode() if isinstance(x, bytes) else x for x in out]
        finally:
            c.close()

    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(ask, range(64)))
    assert answers == [[f"request {i} ä", f"{i}"] for i in range(64)]


def test_non_utf8_input_is_a_400_naming_the_element_and_the_server_keeps_serving(
    server: Server,
) -> None:
    blob = b"".join(struct.pack("<I", len(x)) + x for x in [b"ok", b"\xff\xfe", b"a", b"b"])
    header = (b'{"inputs":[{"name":"IN","shape":[2,2],"datatype":"BYTES",'
              b'"parameters":{"binary_data_size":%d}}]}' % len(blob))
    answer = httpx.post(f"http://{server.url}/v2/models/echo/infer", content=header + blob,
                        headers={"Inference-Header-Content-Length": str(len(header))})
    assert answer.status_code == 400
    assert answer.json()["error"] == ("input 'IN' BYTES element 1 is not valid UTF-8, and "
                                      "model 'echo' takes text (an ONNX string tensor)")
    ok = httpx.post(f"http://{server.url}/v2/models/echo/infer", json={"inputs": [
        {"name": "IN", "shape": [1, 2], "datatype": "BYTES", "data": ["still", "here"]}]})
    assert ok.status_code == 200
    assert ok.json()["outputs"][0]["data"] == ["still", "here"]


def test_a_raw_binary_string_request(server: Server) -> None:
    answer = httpx.post(f"http://{server.url}/v2/models/suffix/infer", content="grüß".encode(),
                        headers={"Inference-Header-Content-Length": "0"})
    assert answer.status_code == 200, answer.text
    length = int(answer.headers["inference-header-content-length"])
    blob = answer.content[length:]
    assert blob[4:].decode() == "grüß ✓"
    bad = httpx.post(f"http://{server.url}/v2/models/suffix/infer", content=b"\xc3",
                     headers={"Inference-Header-Content-Length": "0"})
    assert bad.status_code == 400
    assert "not valid UTF-8" in bad.json()["error"]


@pytest.mark.parametrize("binary", [False, True])
def test_classification_labels_round_trip(client: triton.InferenceServerClient,
                                          binary: bool) -> None:
    tensor = triton.InferInput("IN", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.array([[0.5, 0.9, 0.3, 0.2]], np.float32), binary_data=binary)
    result = client.infer("scores", [tensor], outputs=[
        triton.InferRequestedOutput("OUT", binary_data=binary, class_count=2)])
    entries = [x.decode() if isinstance(x, bytes) else x
               for x in result.as_numpy("OUT").ravel()]
    assert [e.split(":", 2)[2] for e in entries] == ["un", "zéro"]
    assert entries[0].startswith("0.9")
