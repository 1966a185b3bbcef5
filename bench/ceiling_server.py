"""The Python HTTP ceiling: a bare uvloop + httptools server that answers every request with a
canned KServe V2 answer, computing nothing.

    python bench/ceiling_server.py MODEL_FILE --model NAME [--host H] [--port P]

What a server on this interpreter and this core can do at best: no ASGI, no routing, no
decoding, no inference. ``bench/run.py`` starts it beside the others (target ``ceiling``) so
each run reports how far a real server is from the floor of HTTP alone.

The answer is the model's real output for zero inputs, computed once at start: a POST with
``Inference-Header-Content-Length`` gets it in Triton's binary extension, any other POST as V2
JSON; a GET of ``/v2/models/NAME`` gets the model's metadata (what ``modelfn bench`` reads
first), of ``/metrics`` a 404, and any other GET (readiness) ``{"ready":true}``. Connections
are kept alive; pipelined requests are answered in order.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import httptools
import numpy as np
import onnxruntime as ort
import orjson
import uvloop

_V2 = {
    "tensor(float)": "FP32",
    "tensor(double)": "FP64",
    "tensor(int64)": "INT64",
    "tensor(int32)": "INT32",
}


def _response(body: bytes, content_type: bytes, extra: bytes = b"") -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: " + content_type + b"\r\n" + extra
        + b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )


def _signature(specs: list[Any]) -> list[dict[str, Any]]:
    return [{"name": spec.name, "datatype": _V2.get(spec.type, "FP32"),
             "shape": [d if isinstance(d, int) and d >= 0 else -1 for d in spec.shape]}
            for spec in specs]


def canned_answers(model_path: str, model: str) -> dict[str, bytes]:
    """Whole HTTP responses: ``json`` and ``binary`` answers, ``ready``, ``metadata``,
    ``missing`` (404)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model_path, options, providers=["CPUExecutionProvider"])
    feeds = {}
    for spec in session.get_inputs():
        shape = [1 if not isinstance(d, int) or d < 0 else d for d in spec.shape]
        dtype = np.float32 if spec.type == "tensor(float)" else np.int64
        feeds[spec.name] = np.zeros(shape, dtype=dtype)
    results = session.run(None, feeds)
    outputs_json: list[dict[str, Any]] = []
    outputs_binary: list[dict[str, Any]] = []
    blobs = []
    for spec, value in zip(session.get_outputs(), results, strict=True):
        array = np.asarray(value)
        tensor = {"name": spec.name, "datatype": _V2.get(spec.type, "FP32"),
                  "shape": list(array.shape)}
        outputs_json.append({**tensor, "data": array.ravel().tolist()})
        blob = array.tobytes()
        blobs.append(blob)
        outputs_binary.append({**tensor, "parameters": {"binary_data_size": len(blob)}})
    head = {"model_name": model, "model_version": "1"}
    json_body = orjson.dumps({**head, "outputs": outputs_json})
    header = orjson.dumps({**head, "outputs": outputs_binary})
    binary = _response(
        header + b"".join(blobs),
        b"application/octet-stream",
        b"inference-header-content-length: " + str(len(header)).encode() + b"\r\n",
    )
    metadata = orjson.dumps({"name": model, "versions": ["1"], "platform": "onnxruntime_onnx",
                             "inputs": _signature(session.get_inputs()),
                             "outputs": _signature(session.get_outputs())})
    return {
        "json": _response(json_body, b"application/json"),
        "binary": binary,
        "ready": _response(b'{"ready":true}', b"application/json"),
        "metadata": _response(metadata, b"application/json"),
        "missing": _response(b'{"error":"not here"}', b"application/json").replace(
            b"200 OK", b"404 Not Found", 1),
        "model_path": f"/v2/models/{model}".encode(),
    }


class CannedProtocol(asyncio.Protocol):
    """One connection: parse requests with httptools, answer each with canned bytes."""

    answers: dict[str, bytes]

    def __init__(self) -> None:
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.binary = False
        self.url = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no subclass

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            assert self.transport is not None
            self.transport.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n"
                                 b"connection: close\r\n\r\n")
            self.transport.close()

    def on_message_begin(self) -> None:
        self.binary = False
        self.url = b""

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        if len(name) == 31 and name.lower() == b"inference-header-content-length":
            self.binary = True

    def on_message_complete(self) -> None:
        assert self.transport is not None
        answers = self.answers
        if self.parser.get_method() != b"GET":
            self.transport.write(answers["binary"] if self.binary else answers["json"])
        elif self.url == answers["model_path"]:
            self.transport.write(answers["metadata"])
        elif self.url == b"/metrics":
            self.transport.write(answers["missing"])
        else:
            self.transport.write(answers["ready"])
        if not self.parser.should_keep_alive():
            self.transport.close()


async def serve(host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(CannedProtocol, host, port, backlog=1024)
    print(f"ceiling server on {host}:{port}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model_file")
    p.add_argument("--model", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    args = p.parse_args()
    CannedProtocol.answers = canned_answers(args.model_file, args.model)
    uvloop.run(serve(args.host, args.port))


if __name__ == "__main__":
    main()
