"""Compressed infer requests and answers through a real `modelfn gateway` in front of real
`modelfn serve` functions: the gateway forwards the body and its coding as they came, and
relays the function's compressed answer (the batching of Lambda callers, which decodes
bodies itself, is in test_batching)."""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import numpy as np
import pytest
import tritonclient.http as triton

if TYPE_CHECKING:
    from functions import GatewayProcess

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "requests"
REQUEST = json.loads((EXAMPLES / "digits.json").read_text())
EXPECTED = json.loads((EXAMPLES / "digits_expected.json").read_text())["label"]
ROWS = np.array(REQUEST["inputs"][0]["data"], dtype=np.float32).reshape(4, 64)


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
def test_tritonclient_compression_through_the_gateway(gateway: GatewayProcess,
                                                      coding: str) -> None:
    client = triton.InferenceServerClient(gateway.address)
    try:
        for binary in (False, True):
            tensor = triton.InferInput("input", [4, 64], "FP32")
            tensor.set_data_from_numpy(ROWS, binary_data=binary)
            result = client.infer("digits", [tensor], model_version="1", outputs=[
                triton.InferRequestedOutput("label", binary_data=binary)],
                request_compression_algorithm=coding, response_compression_algorithm=coding)
            assert result.as_numpy("label").ravel().tolist() == EXPECTED
    finally:
        client.close()


def test_the_functions_compressed_answer_and_refusals_pass_through(
        gateway: GatewayProcess) -> None:
    body = json.dumps(REQUEST).encode()
    with httpx.Client(base_url=gateway.url, timeout=60) as client:
        request = client.build_request(
            "POST", "/v2/models/digits/versions/1/infer", content=zlib.compress(body),
            headers={"content-encoding": "deflate", "accept-encoding": "gzip"})
        answer = client.send(request, stream=True)
        raw = b"".join(answer.iter_raw())
        assert answer.status_code == 200 and answer.headers["content-encoding"] == "gzip"
        label = next(o for o in json.loads(gzip.decompress(raw))["outputs"]
                     if o["name"] == "label")
        assert label["data"] == EXPECTED
        unknown = client.post("/v2/models/digits/versions/1/infer", content=body,
                              headers={"content-encoding": "br"})
        assert unknown.status_code == 415 and unknown.headers["accept-encoding"] == (
            "gzip, deflate")
        corrupt = client.post("/v2/models/digits/versions/1/infer", content=body[:50],
                              headers={"content-encoding": "gzip"})
        assert corrupt.status_code == 400
        assert corrupt.json()["error"].startswith("the request body is not valid gzip data")
