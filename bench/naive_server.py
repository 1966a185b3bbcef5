"""The baseline a user would write instead of modelfn: FastAPI + uvicorn + onnxruntime.

One ``session.run`` per request, no batching across requests, on the same KServe V2 routes the
benchmark uses: health, model metadata and ``POST /v2/models/{m}[/versions/{v}]/infer`` with V2
JSON and with Triton's binary tensor extension (request and response). It is written the way a
competent user would: an ``async`` route that runs the session inline (no thread hop), orjson for
parsing and rendering, numpy for the tensors.

    python bench/naive_server.py REPO --model digits --port 8000 [--threads 1] [--no-spinning]

serves the highest numbered version of ``REPO/<model>/<version>/model.onnx``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import orjson
import uvicorn
from fastapi import FastAPI, Request, Response

# V2 datatype <-> numpy dtype <-> ONNX type string, for the tensor types this server accepts.
DATATYPES = {
    "BOOL": (np.dtype(bool), "tensor(bool)"),
    "UINT8": (np.dtype("<u1"), "tensor(uint8)"),
    "INT8": (np.dtype("<i1"), "tensor(int8)"),
    "INT32": (np.dtype("<i4"), "tensor(int32)"),
    "INT64": (np.dtype("<i8"), "tensor(int64)"),
    "FP16": (np.dtype("<f2"), "tensor(float16)"),
    "FP32": (np.dtype("<f4"), "tensor(float)"),
    "FP64": (np.dtype("<f8"), "tensor(double)"),
}
V2_BY_ONNX = {onnx_type: v2 for v2, (_, onnx_type) in DATATYPES.items()}
V2_BY_NUMPY = {dtype: v2 for v2, (dtype, _) in DATATYPES.items()}
HEADER_LENGTH = "inference-header-content-length"


def find_model(repo: Path, name: str) -> Path:
    versions = sorted(
        (int(p.name) for p in (repo / name).iterdir() if p.name.isdigit()), reverse=True
    )
    for version in versions:
        path = repo / name / str(version) / "model.onnx"
        if path.exists():
            return path
    raise SystemExit(f"no {name}/<version>/model.onnx under {repo}")


def make_session(path: Path, threads: int, spinning: bool) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    if not spinning:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def create_app(name: str, session: ort.InferenceSession) -> FastAPI:
    app = FastAPI()

    def tensor_meta(arg: Any) -> dict[str, Any]:
        shape = [d if isinstance(d, int) else -1 for d in arg.shape]
        return {"name": arg.name, "datatype": V2_BY_ONNX.get(arg.type, arg.type), "shape": shape}

    metadata = orjson.dumps(
        {
            "name": name,
            "versions": ["1"],
            "platform": "onnxruntime_onnx",
            "inputs": [tensor_meta(i) for i in session.get_inputs()],
            "outputs": [tensor_meta(o) for o in session.get_outputs()],
        }
    )
    output_names = [o.name for o in session.get_outputs()]

    def error(status: int, message: str) -> Response:
        return Response(orjson.dumps({"error": message}), status, media_type="application/json")

    @app.get("/v2/health/live")
    @app.get("/v2/health/ready")
    async def health() -> Response:
        return Response(b"", 200)

    @app.get("/v2/models/{model}")
    @app.get("/v2/models/{model}/versions/{version}")
    async def model_metadata(model: str) -> Response:
        if model != name:
            return error(404, f"unknown model '{model}'")
        return Response(metadata, media_type="application/json")

    @app.post("/v2/models/{model}/infer")
    @app.post("/v2/models/{model}/versions/{version}/infer")
    async def infer(model: str, request: Request) -> Response:
        if model != name:
            return error(404, f"unknown model '{model}'")
        body = await request.body()
        header_length = request.headers.get(HEADER_LENGTH)
        split = int(header_length) if header_length is not None else len(body)
        try:
            doc = orjson.loads(body[:split])
            feeds = decode_inputs(doc["inputs"], body, split)
            wanted = [o["name"] for o in doc.get("outputs") or []] or output_names
            results = session.run(wanted, feeds)
        except (KeyError, ValueError, TypeError) as exc:
            return error(400, f"bad request: {exc}")
        except Exception as exc:  # onnxruntime raises its own exception types
            return error(500, str(exc))
        binary = bool((doc.get("parameters") or {}).get("binary_data_output", False))
        return encode_response(name, doc.get("id"), wanted, results, binary)

    return app


def decode_inputs(specs: list[dict[str, Any]], body: bytes, offset: int) -> dict[str, np.ndarray]:
    feeds = {}
    for spec in specs:
        dtype = DATATYPES[spec["datatype"]][0]
        size = (spec.get("parameters") or {}).get("binary_data_size")
        if size is None:
            array = np.asarray(spec["data"], dtype=dtype)
        else:
            array = np.frombuffer(body, dtype=dtype, count=size // dtype.itemsize, offset=offset)
            offset += size
        feeds[spec["name"]] = array.reshape(spec["shape"])
    return feeds


def encode_response(
    name: str, request_id: str | None, names: list[str], results: list[Any], binary: bool
) -> Response:
    outputs = []
    blobs = []
    for out_name, value in zip(names, results, strict=True):
        array = np.ascontiguousarray(value)
        tensor: dict[str, Any] = {
            "name": out_name,
            "datatype": V2_BY_NUMPY[array.dtype],
            "shape": list(array.shape),
        }
        if binary:
            blob = array.tobytes()
            tensor["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            tensor["data"] = array.ravel()
        outputs.append(tensor)
    doc: dict[str, Any] = {"model_name": name, "outputs": outputs}
    if request_id is not None:
        doc["id"] = request_id
    head = orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY)
    if not binary:
        return Response(head, media_type="application/json")
    return Response(
        head + b"".join(blobs),
        media_type="application/octet-stream",
        headers={"Inference-Header-Content-Length": str(len(head))},
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("repo", type=Path, help="Triton-style model repository")
    parser.add_argument("--model", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--threads", type=int, default=1, help="ORT intra_op_num_threads")
    parser.add_argument(
        "--no-spinning", action="store_true", help="turn off ORT intra-op pool spinning"
    )
    args = parser.parse_args()
    session = make_session(find_model(args.repo, args.model), args.threads, not args.no_spinning)
    app = create_app(args.model, session)
    print(json.dumps({"model": args.model, "providers": session.get_providers()}), flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
