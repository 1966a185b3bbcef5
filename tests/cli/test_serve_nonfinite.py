"""NaN and ±Infinity through a real `modelfn serve`, as tritonclient sends and reads them.

JSON has no token for them; Triton and tritonclient use ``NaN``, ``Infinity`` and
``-Infinity``. An answer must never turn +Infinity into NaN (orjson writes both as ``null``),
and a JSON request carrying them must be taken, not refused as malformed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx
import numpy as np
import pytest
import tritonclient.http as triton
from onnx import TensorProto
from onnx_models import identity_graph, save
from servers import Server, serving

from modelfn.client.bodies import prepare_request
from modelfn.client.v2 import decode_response

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

VALUES = [1.5, np.inf, -np.inf, np.nan, -0.0, 3.4e38]
TYPES = {"fp32": (TensorProto.FLOAT, np.float32, "FP32"),
         "fp64": (TensorProto.DOUBLE, np.float64, "FP64")}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("nonfinite") / "models"
    for name, (onnx_type, _, _) in TYPES.items():
        save(root / name, identity_graph(onnx_type, ["N", len(VALUES)]),
             config=f'name: "{name}"\nmax_batch_size: 8\ndynamic_batching {{}}\n')
    with serving(root) as srv:
        yield srv


def _same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)  # NaN equals NaN here; inf keeps its sign
    assert list(np.signbit(got).ravel()) == list(np.signbit(want).ravel())


@pytest.mark.parametrize("model", sorted(TYPES))
@pytest.mark.parametrize(("binary_in", "binary_out"),
                         [(False, False), (True, False), (False, True)])
def test_tritonclient_round_trips_nan_and_infinity(server: Server, model: str,
                                                   binary_in: bool, binary_out: bool) -> None:
    _, dtype, datatype = TYPES[model]
    data = np.array([VALUES, VALUES[::-1]], dtype=dtype)
    client = triton.InferenceServerClient(server.url)
    try:
        tensor = triton.InferInput("IN", list(data.shape), datatype)
        tensor.set_data_from_numpy(data, binary_data=binary_in)
        result = client.infer(model, [tensor], outputs=[
            triton.InferRequestedOutput("OUT", binary_data=binary_out)])
    finally:
        client.close()
    _same(result.as_numpy("OUT"), data)


def test_a_json_answer_writes_the_tokens_triton_writes(server: Server) -> None:
    """Binary in (no JSON parsing on the way in), JSON out."""
    blob = np.array([VALUES], dtype=np.float32).tobytes()
    head = ('{"inputs":[{"name":"IN","datatype":"FP32","shape":[1,6],'
            f'"parameters":{{"binary_data_size":{len(blob)}}}}}]}}').encode()
    answer = httpx.post(f"http://{server.url}/v2/models/fp32/infer", content=head + blob,
                        headers={"Inference-Header-Content-Length": str(len(head))})
    assert answer.status_code == 200, answer.text
    assert b'"data":[1.5,Infinity,-Infinity,NaN,-0.0,3.4e+38]' in answer.content
    assert b"null" not in answer.content


def test_modelfns_own_client_sends_and_reads_the_tokens(server: Server) -> None:
    data = np.array([VALUES], dtype=np.float64)
    request = prepare_request({"IN": data}, binary=False)
    assert b"NaN" in request.body and b"-Infinity" in request.body
    answer = httpx.post(f"http://{server.url}/v2/models/fp64/infer", content=request.body,
                        headers=request.headers)
    assert answer.status_code == 200, answer.text
    _, outputs = decode_response(answer.content, None)
    _same(outputs[0].data, data)


@pytest.mark.parametrize(("data", "message"), [
    ("[1e400, NaN, 0, 0, 0, 0]", "number is infinity when parsed as double"),
    ("[nan, 1, 0, 0, 0, 0]", "malformed JSON"),
    ("[NaN, Infinity, -Infinity, 0, 0, 0", "malformed JSON"),
    ('[NaN, "\\ud800", 0, 0, 0, 0]', "surrogates not allowed"),
])
def test_what_orjson_refuses_stays_refused_beside_the_tokens(server: Server, data: str,
                                                              message: str) -> None:
    body = '{"inputs":[{"name":"IN","datatype":"FP32","shape":[1,6],"data":' + data + "}]}"
    answer = httpx.post(f"http://{server.url}/v2/models/fp32/infer", content=body)
    assert answer.status_code == 400
    assert message in answer.json()["error"]
    still = httpx.post(f"http://{server.url}/v2/models/fp32/infer",
                       content=body.replace(data, "[NaN, 1, 2, 3, 4, 5]"))
    assert still.status_code == 200, still.text


def test_nan_is_refused_for_an_integer_tensor(tmp_path: Path) -> None:
    root = tmp_path / "models"
    save(root / "ints", identity_graph(TensorProto.INT32, ["N", 2]),
         config='name: "ints"\nmax_batch_size: 8\n')
    with serving(root) as srv:
        body = '{"inputs":[{"name":"IN","datatype":"INT32","shape":[1,2],"data":[1, NaN]}]}'
        answer = httpx.post(f"http://{srv.url}/v2/models/ints/infer", content=body)
    assert answer.status_code == 400
    assert "expects JSON integers" in answer.json()["error"]
