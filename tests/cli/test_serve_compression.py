"""Compressed infer requests and answers through a real `modelfn serve`, with tritonclient's
own ``request_compression_algorithm`` and ``response_compression_algorithm``: a coded body
takes the ASGI path, an answer the client accepts compressed may come from the edge's fast
path; refusals are clear, and the server goes on serving."""

from __future__ import annotations

import gzip
import zlib
from typing import TYPE_CHECKING

import httpx
import numpy as np
import orjson
import pytest
import tritonclient.http as triton
from onnx_models import save, simple_graph
from servers import Server, serving

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

X = np.arange(32, dtype=np.float32).reshape(2, 16)
Y = np.ones((2, 16), np.float32)
JSON_BODY = orjson.dumps({"inputs": [
    {"name": "INPUT0", "shape": [2, 16], "datatype": "FP32", "data": X.ravel().tolist()},
    {"name": "INPUT1", "shape": [2, 16], "datatype": "FP32", "data": Y.ravel().tolist()}]})
LIMIT = 1 << 20


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("compression")
    save(root / "simple", simple_graph(), config="max_batch_size: 8\n")
    with serving(root, "--max-body-bytes", str(LIMIT)) as srv:
        yield srv


@pytest.mark.parametrize("binary", [False, True])
@pytest.mark.parametrize("request_coding", [None, "gzip", "deflate"])
@pytest.mark.parametrize("response_coding", [None, "gzip", "deflate"])
def test_tritonclient_compression_options(server: Server, binary: bool,
                                          request_coding: str | None,
                                          response_coding: str | None) -> None:
    client = triton.InferenceServerClient(server.url)
    inputs = [triton.InferInput("INPUT0", [2, 16], "FP32"),
              triton.InferInput("INPUT1", [2, 16], "FP32")]
    inputs[0].set_data_from_numpy(X, binary_data=binary)
    inputs[1].set_data_from_numpy(Y, binary_data=binary)
    outputs = [triton.InferRequestedOutput(n, binary_data=binary) for n in ("OUTPUT0",
                                                                              "OUTPUT1")]
    result = client.infer("simple", inputs, outputs=outputs,
                          request_compression_algorithm=request_coding,
                          response_compression_algorithm=response_coding)
    assert np.array_equal(result.as_numpy("OUTPUT0"), X + Y)
    assert np.array_equal(result.as_numpy("OUTPUT1"), X - Y)


def _post(server: Server, body: bytes, **headers: str) -> httpx.Response:
    """The answer as it came: httpx would inflate it itself. Unless told, it accepts only
    identity (httpx asks for gzip otherwise)."""
    headers.setdefault("accept-encoding", "identity")
    with httpx.Client() as client:
        request = client.build_request("POST", f"http://{server.url}/v2/models/simple/infer",
                                       content=body, headers=headers)
        response = client.send(request, stream=True)
        raw = b"".join(response.iter_raw())
        return httpx.Response(response.status_code, headers=[
            (k, v) for k, v in response.headers.items() if k != "content-encoding"],
            content=raw, extensions={"coding": response.headers.get("content-encoding")})


@pytest.mark.parametrize(("accept", "coding", "decompress"), [
    ("gzip", "gzip", gzip.decompress),
    ("gzip, deflate", "gzip", gzip.decompress),
    ("deflate;q=1, gzip;q=0.5", "deflate", zlib.decompress),
    ("br", None, bytes),
])
def test_the_answer_is_in_the_coding_the_client_accepts(
        server: Server, accept: str, coding: str | None, decompress: object) -> None:
    """A plain body with an Accept-Encoding goes the edge's fast path; a gzip one the ASGI
    app's: both answer in the coding Triton would choose."""
    for body, sent in ((JSON_BODY, {}), (gzip.compress(JSON_BODY), {"content-encoding": "gzip"})):
        response = _post(server, body, **sent, **{"accept-encoding": accept})
        assert response.status_code == 200, response.content
        assert response.extensions["coding"] == coding
        answer = orjson.loads(decompress(response.content))  # type: ignore[operator]
        assert answer["outputs"][0]["data"] == (X + Y).ravel().tolist()


def test_inference_header_content_length_counts_the_inflated_body(server: Server) -> None:
    header = orjson.dumps({"inputs": [
        {"name": n, "shape": [2, 16], "datatype": "FP32",
         "parameters": {"binary_data_size": 128}} for n in ("INPUT0", "INPUT1")],
        "outputs": [{"name": "OUTPUT1", "parameters": {"binary_data": False}}]})
    body = header + X.tobytes() + Y.tobytes()
    response = _post(server, zlib.compress(body), **{
        "content-encoding": "deflate", "inference-header-content-length": str(len(header))})
    assert response.status_code == 200, response.content
    assert orjson.loads(response.content)["outputs"][0]["data"] == (X - Y).ravel().tolist()


def test_refusals_are_clear_and_the_server_serves_on(server: Server) -> None:
    bomb = gzip.compress(b" " * (64 << 20), 9)  # 64 KiB that inflate to 64 MiB
    too_large = _post(server, bomb, **{"content-encoding": "gzip"})
    assert too_large.status_code == 413
    assert too_large.json()["error"] == (
        f"The gzip request body of {len(bomb)} bytes inflates past the limit of {LIMIT} bytes "
        "for a request body; a compressed body is held to the limit once inflated")
    corrupt = _post(server, gzip.compress(JSON_BODY)[:-20], **{"content-encoding": "gzip"})
    assert corrupt.status_code == 400
    assert corrupt.json()["error"].startswith("the request body is not valid gzip data: ")
    unknown = _post(server, JSON_BODY, **{"content-encoding": "br"})
    assert unknown.status_code == 415
    assert unknown.headers["accept-encoding"] == "gzip, deflate"
    assert "Content-Encoding 'br' is not supported" in unknown.json()["error"]
    fine = _post(server, gzip.compress(JSON_BODY), **{"content-encoding": "gzip"})
    assert fine.status_code == 200
    assert "Traceback" not in server.proc.tail()


def test_a_compressed_body_is_held_to_the_limit_as_sent_too(tmp_path: Path) -> None:
    """A body whose compressed size is over the limit is refused before it is read."""
    save(tmp_path / "simple", simple_graph(), config="max_batch_size: 8\n")
    srv = Server(tmp_path, "--max-body-bytes", "1000")
    try:
        srv.wait_ready()
        response = _post(srv, b"\0" * 2000, **{"content-encoding": "gzip"})
        assert response.status_code == 413
    finally:
        srv.stop()
