"""The V2 codec against tritonclient.http as the independent encoder and decoder."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import orjson
import pytest
import tritonclient.http as triton
from tritonclient.utils import np_to_triton_dtype, serialize_byte_tensor

from modelfn.protocol.codec import (
    BINARY_CONTENT_TYPE,
    CONTENT_TYPE,
    HEADER_LENGTH,
    JSON_CONTENT_TYPE,
    InferRequest,
    ModelCodec,
    RequestedOutput,
)
from modelfn.runtime.config import ModelConfig, TensorConfig
from modelfn.runtime.datatypes import BY_V2, DATATYPES
from modelfn.runtime.errors import BackendError, InvalidInput, Unsupported

V2_TYPES = [d.v2 for d in DATATYPES]
JSON_TYPES = [t for t in V2_TYPES if t != "FP16"]


def tensor(name: str, v2: str, dims: tuple[int, ...], **kw: Any) -> TensorConfig:
    return TensorConfig(name, BY_V2[v2], dims, **kw)


def codec(
    inputs: list[TensorConfig], outputs: list[TensorConfig] | None = None, max_batch_size: int = 0
) -> ModelCodec:
    outs = outputs if outputs is not None else [tensor("y", "FP32", (-1,))]
    return ModelCodec(
        ModelConfig(name="m", max_batch_size=max_batch_size, inputs=inputs, outputs=outs)
    )


def identity(v2: str, dims: tuple[int, ...] = (3,), max_batch_size: int = 8) -> ModelCodec:
    return codec([tensor("x", v2, dims)], [tensor("y", v2, dims)], max_batch_size)


def triton_request(
    arrays: dict[str, np.ndarray],
    binary: bool | dict[str, bool] = True,
    outputs: list[triton.InferRequestedOutput] | None = None,
    **kw: Any,
) -> tuple[bytes, int | None]:
    inputs = []
    for name, array in arrays.items():
        item = triton.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        item.set_data_from_numpy(
            array, binary_data=binary if isinstance(binary, bool) else binary[name]
        )
        inputs.append(item)
    body, size = triton.InferenceServerClient.generate_request_body(inputs, outputs=outputs, **kw)
    return bytes(body), size


def triton_result(body: bytes, headers: dict[str, str]) -> triton.InferResult:
    length = headers.get(HEADER_LENGTH)
    return triton.InferResult.from_response_body(
        body, verbose=False, header_length=None if length is None else int(length)
    )


def json_request(inputs: list[dict[str, Any]], **extra: Any) -> bytes:
    return orjson.dumps({"inputs": inputs, **extra})


def fails(model: ModelCodec, body: bytes, match: str, header_length: int | None = None) -> None:
    with pytest.raises(InvalidInput, match=match) as info:
        model.decode(body, header_length)
    assert info.value.status_code == 400


def refused(model: ModelCodec, request: tuple[bytes, int | None], match: str) -> None:
    fails(model, request[0], match, request[1])


def random_array(v2: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    dtype = BY_V2[v2].numpy
    if v2 == "BYTES":
        words = ["", "a", "héllo", "日本語", "emoji 🎉", "x" * 40, "tab\tnew\nline", '"quoted"']
        flat = [words[i].encode() for i in rng.integers(0, len(words), size=int(np.prod(shape)))]
        array = np.empty(len(flat), dtype=object)
        array[:] = flat
        return array.reshape(shape)
    if v2 == "BOOL":
        return np.asarray(rng.integers(0, 2, size=shape).astype(bool))
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return np.asarray(rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True))
    return np.asarray((rng.standard_normal(size=shape) * 1000).astype(dtype))


def assert_same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape
    if want.dtype == object:
        decoded = [x.decode() if isinstance(x, bytes) else x for x in got.ravel()]
        assert decoded == [x.decode() for x in want.ravel()]
    else:
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def roundtrip(model: ModelCodec, array: np.ndarray, in_binary: bool, out_binary: bool) -> None:
    body, size = triton_request(
        {"x": array}, in_binary, [triton.InferRequestedOutput("y", binary_data=out_binary)]
    )
    request = model.decode(body, size)
    assert_same(request.inputs["x"], array)
    out, headers = model.encode(request, {"y": request.inputs["x"]}, "1")
    assert_same(triton_result(out, headers).as_numpy("y"), array)


# ------------------------------------------------------------------ round trips
@pytest.mark.parametrize("out_binary", [False, True], ids=["json-out", "binary-out"])
@pytest.mark.parametrize("in_binary", [False, True], ids=["json-in", "binary-in"])
@pytest.mark.parametrize("v2", V2_TYPES)
def test_every_datatype_round_trips(v2: str, in_binary: bool, out_binary: bool) -> None:
    # FP16 has no JSON input form: test_fp16_json_input_is_refused; JSON output is fine
    in_binary = in_binary or v2 == "FP16"
    array = random_array(v2, (2, 3), np.random.default_rng(7))
    roundtrip(identity(v2), array, in_binary, out_binary)


def test_extreme_values_round_trip() -> None:
    for v2 in ("INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64"):
        info = np.iinfo(BY_V2[v2].numpy)
        array = np.array([[info.min, 0, info.max]], dtype=BY_V2[v2].numpy)
        for in_binary in (False, True):
            roundtrip(identity(v2), array, in_binary, not in_binary)
    floats = np.array([[np.finfo(np.float32).max, np.finfo(np.float32).tiny, -0.0]], np.float32)
    roundtrip(identity("FP32"), floats, False, False)
    halves = np.array([[np.finfo(np.float16).max, np.finfo(np.float16).tiny, -0.0]], np.float16)
    roundtrip(identity("FP16"), halves, True, False)


@pytest.mark.parametrize("seed", range(40))
def test_random_tensors_round_trip(seed: int) -> None:
    rng = np.random.default_rng(seed)
    v2 = V2_TYPES[seed % len(V2_TYPES)]
    batching = bool(rng.integers(0, 2))
    dims = tuple(int(d) for d in rng.integers(0 if not batching else 1, 5, size=rng.integers(0, 4)))
    shape = ((int(rng.integers(1, 5)),) if batching else ()) + dims
    model = identity(v2, tuple(-1 for _ in dims), 4 if batching else 0)
    in_binary = v2 == "FP16" or bool(rng.integers(0, 2))
    roundtrip(model, random_array(v2, shape, rng), in_binary, bool(rng.integers(0, 2)))


def test_nested_and_flat_json_data_agree() -> None:
    model = identity("INT32", (3,))
    flat = json_request(
        [{"name": "x", "datatype": "INT32", "shape": [2, 3], "data": [1, 2, 3, 4, 5, 6]}]
    )
    nested = json_request(
        [{"name": "x", "datatype": "INT32", "shape": [2, 3], "data": [[1, 2, 3], [4, 5, 6]]}]
    )
    want = np.arange(1, 7, dtype=np.int32).reshape(2, 3)
    for body in (flat, nested):
        got = model.decode(body).inputs["x"]
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, want)
    deep = json_request(
        [{"name": "x", "datatype": "FP64", "shape": [1, 2, 2], "data": [[[1, 2.5], [3, 4]]]}]
    )
    array = identity("FP64", (2, 2)).decode(deep).inputs["x"]
    np.testing.assert_array_equal(array, [[[1.0, 2.5], [3.0, 4.0]]])


def test_bytes_with_empty_and_non_ascii_strings() -> None:
    words = ["", "héllo wörld", "日本語", "🎉", "", "plain"]
    array = np.array([w.encode() for w in words], dtype=object).reshape(2, 3)
    for in_binary in (False, True):
        for out_binary in (False, True):
            roundtrip(identity("BYTES"), array, in_binary, out_binary)
    request = identity("BYTES").decode(*triton_request({"x": array}, binary=False))
    assert request.inputs["x"].dtype == object
    assert request.inputs["x"][0, 1] == "héllo wörld".encode()


def test_binary_inputs_are_zero_copy_views() -> None:
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    body, size = triton_request({"x": array})
    decoded = identity("FP32").decode(body, size).inputs["x"]
    assert not decoded.flags.writeable
    assert np.shares_memory(decoded, np.frombuffer(body, np.uint8))


def test_mixed_json_and_binary_inputs_consume_blobs_in_order() -> None:
    model = codec(
        [tensor("a", "FP32", (2,)), tensor("b", "BYTES", (1,)), tensor("c", "INT64", (2,))],
        max_batch_size=4,
    )
    arrays = {
        "a": np.ones((1, 2), np.float32),
        "b": np.array([[b"xyz"]], dtype=object),
        "c": np.array([[7, 8]], np.int64),
    }
    body, size = triton_request(arrays, {"a": True, "b": False, "c": True})
    request = model.decode(body, size)
    for name, array in arrays.items():
        assert_same(request.inputs[name], array)
    assert request.batch_size == 1


# ------------------------------------------------------------------ raw binary requests
def test_raw_binary_request_infers_the_variable_dim() -> None:
    model = identity("FP32", (-1,))
    array = np.arange(5, dtype=np.float32)
    request = model.decode(array.tobytes(), 0)
    assert request.batch_size == 1 and request.binary_output and request.outputs is None
    np.testing.assert_array_equal(request.inputs["x"], array.reshape(1, 5))
    body, headers = model.encode(request, {"y": request.inputs["x"]}, "1")
    assert headers[CONTENT_TYPE] == BINARY_CONTENT_TYPE
    np.testing.assert_array_equal(triton_result(body, headers).as_numpy("y"), [array])


def test_raw_binary_request_fixed_shape_and_bytes() -> None:
    fixed = codec([tensor("x", "UINT32", (2, 2))])
    got = fixed.decode(np.arange(4, dtype=np.uint32).tobytes(), 0).inputs["x"]
    np.testing.assert_array_equal(got, [[0, 1], [2, 3]])
    fails(fixed, b"\0" * 15, "15 bytes of binary data but shape \\[2,2\\] of UINT32 needs 16", 0)
    text = codec([tensor("x", "BYTES", (1,))], max_batch_size=2)
    got = text.decode("raw ✓".encode(), 0).inputs["x"]
    assert got.shape == (1, 1) and got[0, 0] == "raw ✓".encode()


def test_raw_binary_request_refusals() -> None:
    two = codec([tensor("a", "FP32", (1,)), tensor("b", "FP32", (1,))])
    fails(two, b"\0" * 4, "a model with one input; model 'm' has 2", 0)
    fails(
        codec([tensor("x", "FP32", (-1, -1))]), b"\0" * 8, "more than one dimension is variable", 0
    )
    fails(identity("FP32", (-1,)), b"\0" * 6, "6 bytes of binary data but shape", 0)


# ------------------------------------------------------------------ request-level fields
def test_id_parameters_timeout_and_outputs_are_decoded() -> None:
    model = codec(
        [tensor("x", "FP32", (1,))],
        [tensor("a", "FP32", (1,)), tensor("b", "FP32", (1,))],
        max_batch_size=8,
    )
    outputs = [
        triton.InferRequestedOutput("b", binary_data=True, class_count=1),
        triton.InferRequestedOutput("a", binary_data=False),
    ]
    body, size = triton_request(
        {"x": np.zeros((3, 1), np.float32)},
        outputs=outputs,
        request_id="req-7",
        timeout=2500,
        priority=2,
        parameters={"custom": "v"},
    )
    request = model.decode(body, size)
    assert request.id == "req-7"
    assert request.timeout_us == 2500
    assert request.batch_size == 3
    assert request.parameters["priority"] == 2 and request.parameters["custom"] == "v"
    assert request.binary_output is False
    assert request.outputs == [RequestedOutput("b", True, 1), RequestedOutput("a", False, 0)]
    all_binary = model.decode(*triton_request({"x": np.zeros((1, 1), np.float32)}))
    assert all_binary.outputs is None and all_binary.binary_output is True
    assert all_binary.id is None and all_binary.timeout_us is None


def test_optional_input_may_be_omitted() -> None:
    model = codec([tensor("x", "FP32", (1,)), tensor("mask", "BOOL", (1,), optional=True)])
    request = model.decode(*triton_request({"x": np.zeros(1, np.float32)}))
    assert list(request.inputs) == ["x"]


# ------------------------------------------------------------------ reshape
def test_input_reshape_for_the_backend() -> None:
    model = codec([tensor("x", "FP32", (4,), reshape=(2, 2))], max_batch_size=4)
    request = model.decode(*triton_request({"x": np.arange(8, dtype=np.float32).reshape(2, 4)}))
    assert request.inputs["x"].shape == (2, 2, 2)
    variable = codec([tensor("x", "FP32", (-1, 2), reshape=(2, -1))])
    got = variable.decode(*triton_request({"x": np.zeros((3, 2), np.float32)})).inputs["x"]
    assert got.shape == (2, 3)


def test_output_reshape_back_to_config_dims() -> None:
    model = codec(
        [tensor("x", "FP32", (4,))], [tensor("y", "FP32", (4,), reshape=(2, 2))], max_batch_size=4
    )
    request = model.decode(*triton_request({"x": np.zeros((3, 4), np.float32)}))
    model_out = np.arange(12, dtype=np.float32).reshape(3, 2, 2)
    body, headers = model.encode(request, {"y": model_out}, "1")
    np.testing.assert_array_equal(
        triton_result(body, headers).as_numpy("y"), model_out.reshape(3, 4)
    )


# ------------------------------------------------------------------ encoding
def test_response_document_shape_and_headers() -> None:
    model = identity("FP32")
    request = InferRequest({"x": np.zeros((1, 3), np.float32)}, id="abc")
    body, headers = model.encode(request, {"y": np.array([[1.5, 2, 3]], np.float32)}, "3")
    assert headers == {CONTENT_TYPE: JSON_CONTENT_TYPE}
    assert orjson.loads(body) == {
        "model_name": "m",
        "model_version": "3",
        "id": "abc",
        "outputs": [{"name": "y", "datatype": "FP32", "shape": [1, 3], "data": [1.5, 2.0, 3.0]}],
    }
    body, headers = model.encode(InferRequest({}), {"y": np.zeros((1, 3), np.float32)}, "")
    assert "id" not in orjson.loads(body) and "model_version" not in orjson.loads(body)


def test_binary_response_layout() -> None:
    model = codec(
        [tensor("x", "FP32", (1,))], [tensor("a", "INT16", (2,)), tensor("b", "BYTES", (2,))]
    )
    request = InferRequest({}, binary_output=True)
    outputs = {"a": np.array([1, -2], np.int16), "b": np.array([b"hi", b""], dtype=object)}
    body, headers = model.encode(request, outputs, "1")
    length = int(headers[HEADER_LENGTH])
    assert headers[CONTENT_TYPE] == BINARY_CONTENT_TYPE
    doc = orjson.loads(body[:length])
    sizes = [o["parameters"]["binary_data_size"] for o in doc["outputs"]]
    assert sizes == [4, 10] and "data" not in doc["outputs"][0]
    assert body[length:] == outputs["a"].tobytes() + serialize_byte_tensor(outputs["b"]).item()


def test_output_subsets_order_and_binary_override() -> None:
    names = ["a", "b", "c"]
    model = codec(
        [tensor("x", "FP32", (1,))], [tensor(n, "FP32", (2,)) for n in names], max_batch_size=2
    )
    values = {n: np.full((1, 2), i, np.float32) for i, n in enumerate(names)}
    everything = InferRequest({}, binary_output=True)
    body, headers = model.encode(everything, values, "1")
    result = triton_result(body, headers)
    assert [o["name"] for o in result.get_response()["outputs"]] == names
    subset = InferRequest(
        {}, outputs=[RequestedOutput("c", binary=False), RequestedOutput("a")], binary_output=True
    )
    body, headers = model.encode(subset, values, "1")
    outputs = triton_result(body, headers).get_response()["outputs"]
    assert [o["name"] for o in outputs] == ["c", "a"]
    assert outputs[0]["data"] == [2.0, 2.0] and outputs[1]["parameters"]["binary_data_size"] == 8
    np.testing.assert_array_equal(triton_result(body, headers).as_numpy("a"), values["a"])


def test_outputs_are_cast_to_the_config_datatype_and_strings_accepted() -> None:
    model = codec(
        [tensor("x", "FP32", (1,))], [tensor("y", "FP32", (2,)), tensor("s", "BYTES", (2,))]
    )
    outputs = {"y": np.array([0.5, 1.0]), "s": np.array(["ünï", "b"])}
    for binary in (False, True):
        body, headers = model.encode(InferRequest({}, binary_output=binary), outputs, "1")
        result = triton_result(body, headers)
        assert result.as_numpy("y").dtype == np.float32
        assert [x if isinstance(x, str) else x.decode() for x in result.as_numpy("s")] == [
            "ünï",
            "b",
        ]


def test_non_utf8_bytes_output_needs_binary() -> None:
    model = codec([tensor("x", "FP32", (1,))], [tensor("s", "BYTES", (1,))])
    outputs = {"s": np.array([b"\xff\xfe"], dtype=object)}
    with pytest.raises(InvalidInput, match="not valid UTF-8.*binary_data") as info:
        model.encode(InferRequest({}), outputs, "1")
    assert info.value.status_code == 400
    body, headers = model.encode(InferRequest({}, binary_output=True), outputs, "1")
    assert triton_result(body, headers).as_numpy("s")[0] == b"\xff\xfe"


def test_a_requested_output_the_model_did_not_produce_is_an_internal_error() -> None:
    with pytest.raises(BackendError, match="did not produce output 'y'") as info:
        identity("FP32").encode(InferRequest({}, outputs=[RequestedOutput("y")]), {}, "1")
    assert info.value.status_code == 500


def test_a_request_naming_no_outputs_gets_those_the_model_produced() -> None:
    """A Python model may leave outputs out, and Triton answers with what it produced."""
    model = codec([tensor("x", "FP32", (1,))],
                  [tensor("y", "FP32", (1,)), tensor("z", "FP32", (1,))])
    body, headers = model.encode(InferRequest({}), {"z": np.ones(1, np.float32)}, "1")
    assert [o["name"] for o in json.loads(body)["outputs"]] == ["z"]


@pytest.mark.parametrize("binary", [False, True])
def test_classification_top_n_per_batch_row(binary: bool) -> None:
    model = codec([tensor("x", "FP32", (4,))], [tensor("y", "FP32", (4,))], max_batch_size=4)
    outputs = [triton.InferRequestedOutput("y", binary_data=binary, class_count=2)]
    request = model.decode(*triton_request({"x": np.zeros((2, 4), np.float32)}, outputs=outputs))
    scores = np.array([[0.1, 0.7, 0.2, 0.7], [4, 3, 2, 1]], np.float32)
    body, headers = model.encode(request, {"y": scores}, "1")
    result = triton_result(body, headers)
    assert result.get_output("y")["datatype"] == "BYTES"
    got = [[x if isinstance(x, str) else x.decode() for x in row] for row in result.as_numpy("y")]
    assert got == [["0.700000:1", "0.700000:3"], ["4.000000:0", "3.000000:1"]]


def test_classification_without_batching_and_integer_scores() -> None:
    model = codec([tensor("x", "FP32", (1,))], [tensor("y", "INT32", (5,))])
    request = InferRequest({}, outputs=[RequestedOutput("y", classification=10)])
    body, _ = model.encode(request, {"y": np.array([3, 9, -1, 0, 9], np.int32)}, "1")
    output = orjson.loads(body)["outputs"][0]
    assert output["shape"] == [5]
    assert output["data"] == ["9:1", "9:4", "3:0", "0:3", "-1:2"]


# ------------------------------------------------------------------ request errors
def x_input(**fields: Any) -> dict[str, Any]:
    return {"name": "x", "datatype": "FP32", "shape": [1, 3], "data": [1, 2, 3], **fields}


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (b'{"inputs": [', "malformed JSON in request body: .*line 1"),
        (b"[1, 2]", "must be a JSON object"),
        (b"{}", "the request has no 'inputs'"),
        (b'{"inputs": {"x": 1}}', "'inputs' must be a list"),
        (json_request([1]), "each entry of 'inputs' must be a JSON object"),
        (
            json_request([x_input(name="z")]),
            "unexpected inference input 'z' for model 'm'; its inputs are 'x'",
        ),
        (json_request([{"datatype": "FP32"}]), "unexpected inference input None"),
        (json_request([x_input(), x_input()]), "input 'x' is given more than once"),
        (json_request([]), "missing required input\\(s\\) 'x'"),
        (
            json_request([x_input(datatype="FP64")]),
            "input 'x' has datatype FP64 but the model expects FP32",
        ),
        (
            json_request([x_input(shape=[1, 4], data=[1, 2, 3, 4])]),
            "unexpected shape for input 'x' for model 'm': expected \\[-1,3\\], got \\[1,4\\]",
        ),
        (json_request([x_input(shape=[3])]), "expected \\[-1,3\\], got \\[3\\]"),
        (
            json_request([x_input(shape=[9, 3], data=[0] * 27)]),
            "has batch size 9; the model takes 1 to 8",
        ),
        (json_request([x_input(shape=[0, 3], data=[])]), "batch size 0"),
        (json_request([x_input(shape=[1.0, 3])]), "non-negative integers, not \\[1.0, 3\\]"),
        (json_request([x_input(shape=["1", 3])]), "non-negative integers"),
        (json_request([x_input(shape=[-1, 3])]), "non-negative integers"),
        (json_request([x_input(shape=[True, 3])]), "non-negative integers"),
        (json_request([x_input(shape=None)]), "non-negative integers, not None"),
        (json_request([x_input(data=[1, 2])]), "2 elements in 'data' but shape \\[1,3\\] needs 3"),
        (json_request([x_input(data=[[1, 2], 3, 4])]), "mixes nested lists and values"),
        (json_request([x_input(data=None)]), "exactly one of 'data' and"),
        (json_request([x_input(parameters={"binary_data_size": 12})]), "exactly one of 'data' and"),
        (
            json_request([x_input(data=None, parameters={"binary_data_size": 12})]),
            "no Inference-Header-Content-Length header",
        ),
        (json_request([x_input(parameters=[1])]), "'parameters' must be a JSON object"),
        (
            json_request([x_input(data=["1.5", 2, 3])]),
            "datatype FP32 expects JSON numbers in 'data' but got strings",
        ),
        (json_request([x_input(data=[None, 2, 3])]), "expects JSON numbers .* got nulls"),
        (json_request([x_input(data=[True, False, True])]), "got booleans"),
        (json_request([x_input(data=[{"a": 1}, 2, 3])]), "got objects"),
        (json_request([x_input(data=[1e39, 2, 3])]), "does not fit FP32"),
        (
            json_request([x_input()], outputs=[{"name": "nope"}]),
            "unexpected inference output 'nope' for model 'm'; its outputs are 'y'",
        ),
        (
            json_request([x_input()], outputs=[{"name": "y"}, {"name": "y"}]),
            "output 'y' is requested more than once",
        ),
        (
            json_request(
                [x_input()], outputs=[{"name": "y", "parameters": {"classification": -1}}]
            ),
            "classification must be a non-negative integer",
        ),
        (
            json_request([x_input()], outputs=[{"name": "y", "parameters": {"binary_data": 1}}]),
            "binary_data must be true or false",
        ),
        (json_request([x_input()], outputs={"name": "y"}), "'outputs' must be a list"),
        (json_request([x_input()], outputs=["y"]), "each entry of 'outputs' must be"),
        (json_request([x_input()], id=5), "request 'id' must be a string"),
        (json_request([x_input()], parameters=[]), "'parameters' must be a JSON object"),
        (
            json_request([x_input()], parameters={"binary_data_output": "yes"}),
            "'binary_data_output' must be true or false",
        ),
        (json_request([x_input()], parameters={"timeout": -5}), "'timeout' must be a non-negative"),
    ],
)
def test_invalid_requests_are_400(body: bytes, match: str) -> None:
    fails(identity("FP32"), body, match)


@pytest.mark.parametrize(
    ("v2", "data", "match"),
    [
        ("UINT8", [300], "does not fit UINT8"),
        ("UINT32", [-1], "does not fit UINT32"),
        ("INT64", [2**63], "does not fit INT64: outside -9223372036854775808 to 92233720"),
        ("INT32", [3.0], "datatype INT32 expects JSON integers in 'data' but got non-integer"),
        ("INT32", [1.5], "datatype INT32 expects JSON integers in 'data' but got non-integer"),
        ("INT8", [True], "expects JSON integers .* got booleans"),
        ("BOOL", ["true"], "datatype BOOL expects JSON booleans in 'data' but got strings"),
        ("BOOL", [1], "expects JSON booleans .* got integers"),
        ("BYTES", [1], "datatype BYTES expects JSON strings in 'data' but got integers"),
        ("FP16", [1.0], "FP16, which has no JSON form; send it as binary data"),
    ],
)
def test_json_values_must_fit_the_datatype(v2: str, data: list[Any], match: str) -> None:
    body = json_request([{"name": "x", "datatype": v2, "shape": [1], "data": data}])
    fails(codec([tensor("x", v2, (1,))]), body, match)


@pytest.mark.parametrize(("v2", "value"), [("UINT64", 2**64), ("INT64", -(2**64))])
def test_integers_beyond_64_bits_are_named_as_such(v2: str, value: int) -> None:
    """orjson reads them as doubles: the refusal must not call them non-integers."""
    body = json.dumps({"inputs": [{"name": "x", "datatype": v2, "shape": [1],
                                   "data": [value]}]}).encode()
    fails(codec([tensor("x", v2, (1,))]), body,
          f"datatype {v2} expects JSON integers in 'data' but got integers beyond 64 bits")


def test_fp16_json_input_is_refused() -> None:
    body, size = triton_request({"x": np.zeros((1, 3), np.float16)}, binary=False)
    fails(identity("FP16"), body, "no JSON form; send it as binary data", size)


def test_batch_sizes_must_agree() -> None:
    model = codec([tensor("a", "FP32", (1,)), tensor("b", "FP32", (1,))], max_batch_size=8)
    body, size = triton_request(
        {"a": np.zeros((2, 1), np.float32), "b": np.zeros((3, 1), np.float32)}
    )
    fails(model, body, "same batch size: input 'b' has 3 but an earlier input has 2", size)


def test_absurd_shapes_are_refused_before_allocation() -> None:
    model = codec([tensor("x", "FP32", (-1,))])
    body = json_request([{"name": "x", "datatype": "FP32", "shape": [10**12], "data": [1]}])
    fails(model, body, "more elements than the request could hold")
    header = orjson.dumps(
        {
            "inputs": [
                {
                    "name": "x",
                    "datatype": "FP32",
                    "shape": [2**40],
                    "parameters": {"binary_data_size": 8},
                }
            ]
        }
    )
    fails(
        model,
        header + b"\0" * 8,
        "8 bytes of binary data but shape \\[1099511627776\\]",
        len(header),
    )
    text = codec([tensor("x", "BYTES", (-1,))])
    header = orjson.dumps(
        {
            "inputs": [
                {
                    "name": "x",
                    "datatype": "BYTES",
                    "shape": [10**9],
                    "parameters": {"binary_data_size": 8},
                }
            ]
        }
    )
    fails(text, header + b"\0" * 8, "too few for 1000000000 BYTES elements", len(header))


def binary_body(model_input: dict[str, Any], blob: bytes) -> tuple[bytes, int]:
    header = orjson.dumps({"inputs": [model_input]})
    return header + blob, len(header)


def test_binary_sizes_must_add_up_to_the_body() -> None:
    model = identity("FP32")
    spec = x_input(data=None, parameters={"binary_data_size": 12})
    body, length = binary_body(spec, b"\0" * 8)
    fails(
        model,
        body,
        "input 'x' has binary_data_size 12 but only 8 bytes of binary data remain",
        length,
    )
    body, length = binary_body(spec, b"\0" * 14)
    fails(model, body, "2 unexpected bytes of binary data after input 'x'", length)
    header = json_request([x_input()])
    fails(
        model, header + b"\0", "1 unexpected bytes of binary data that no input claims", len(header)
    )
    fails(model, header, "Inference-Header-Content-Length 999 is outside", 999)
    fails(model, header, "Inference-Header-Content-Length -1 is outside", -1)
    negative = dict(spec, parameters={"binary_data_size": -4})
    refused(model, binary_body(negative, b""), "binary_data_size must be a non-negative")


def test_binary_bytes_elements_are_validated() -> None:
    model = codec([tensor("x", "BYTES", (-1,))])
    spec = {"name": "x", "datatype": "BYTES", "shape": [2]}

    def body(blob: bytes) -> tuple[bytes, int]:
        return binary_body(dict(spec, parameters={"binary_data_size": len(blob)}), blob)

    prefix = (3).to_bytes(4, "little")
    refused(
        model,
        body(prefix + b"abc" + (9).to_bytes(4, "little") + b"xy"),
        "BYTES element 1 claims 9 bytes; 2 remain",
    )
    refused(
        model,
        body(prefix + b"abc" + prefix + b"abc" + b"\0"),
        "1 bytes of binary data after its 2 elements",
    )
    refused(model, body(prefix + b"abc\0\0"), "binary data ends before BYTES element 1")
    refused(
        model,
        body((20).to_bytes(4, "little") + b"abcd"),
        "BYTES element 0 claims 20 bytes; 4 remain",
    )
    ok = model.decode(*body(prefix + b"abc" + (0).to_bytes(4, "little"))).inputs["x"]
    assert ok.tolist() == [b"abc", b""]


def test_binary_bool_bytes_must_be_zero_or_one() -> None:
    model = codec([tensor("x", "BOOL", (2,))])
    spec = {"name": "x", "datatype": "BOOL", "shape": [2], "parameters": {"binary_data_size": 2}}
    refused(model, binary_body(spec, b"\x01\x02"), "BOOL bytes other than 0 and 1")
    assert model.decode(*binary_body(spec, b"\x01\x00")).inputs["x"].tolist() == [True, False]


def test_classifying_a_bytes_output_is_refused() -> None:
    model = codec([tensor("x", "FP32", (1,))], [tensor("s", "BYTES", (1,))])
    body = json_request(
        [{"name": "x", "datatype": "FP32", "shape": [1], "data": [0]}],
        outputs=[{"name": "s", "parameters": {"classification": 1}}],
    )
    fails(model, body, "output 's' is BYTES and cannot be classified")


def test_impossible_input_reshape_is_refused() -> None:
    model = codec([tensor("x", "FP32", (-1,), reshape=(2, 2))])
    refused(
        model,
        triton_request({"x": np.zeros(3, np.float32)}),
        "cannot reshape input 'x' of shape \\[3\\] to \\[2,2\\]",
    )


def test_shared_memory_is_unsupported() -> None:
    model = identity("FP32")
    region = {"shared_memory_region": "r", "shared_memory_byte_size": 12}
    for body in (
        json_request([x_input(data=None, parameters=region)]),
        json_request([x_input()], outputs=[{"name": "y", "parameters": region}]),
    ):
        with pytest.raises(Unsupported, match="shared memory, which is not supported") as info:
            model.decode(body)
        assert info.value.status_code == 501


def text_codec() -> ModelCodec:
    config = ModelConfig(name="m", max_batch_size=4, inputs=[tensor("x", "BYTES", (2,))],
                         outputs=[tensor("y", "BYTES", (2,))])
    return ModelCodec(config, text_strings=True)


@pytest.mark.parametrize("binary", [False, True])
def test_a_text_backend_gets_str_over_json_and_binary(binary: bool) -> None:
    array = np.array([["héllo".encode(), b""], ["日本".encode(), b"x"]], dtype=np.object_)
    request = text_codec().decode(*triton_request({"x": array}, binary=binary))
    assert request.inputs["x"].tolist() == [["héllo", ""], ["日本", "x"]]
    assert {type(v) for v in request.inputs["x"].ravel()} == {str}


def test_a_bytes_backend_still_gets_bytes() -> None:
    array = np.array([[b"\xff", b"a"]], dtype=np.object_)
    request = identity("BYTES", (2,)).decode(*triton_request({"x": array}, binary=True))
    assert request.inputs["x"].tolist() == [[b"\xff", b"a"]]


def test_non_utf8_for_a_text_backend_is_a_400_naming_the_element() -> None:
    array = np.array([[b"ok", b"\xc3("]], dtype=np.object_)
    with pytest.raises(InvalidInput, match="input 'x' BYTES element 1 is not valid UTF-8"):
        text_codec().decode(*triton_request({"x": array}, binary=True))


# ------------------------------------------------------------------ the client side
@pytest.mark.parametrize("out_binary", [False, True], ids=["json-out", "binary-out"])
@pytest.mark.parametrize("v2", V2_TYPES)
def test_the_client_side_round_trips_every_datatype(v2: str, out_binary: bool) -> None:
    """The gateway's leg: encode_request -> the function's decode; its encode ->
    decode_response. Arrays come back as they went."""
    model = identity(v2)
    array = random_array(v2, (2, 3), np.random.default_rng(11))
    body, headers = model.encode_request({"x": array})
    assert headers[CONTENT_TYPE] == BINARY_CONTENT_TYPE
    request = model.decode(body, int(headers[HEADER_LENGTH]))
    assert_same(request.inputs["x"], array)
    assert request.binary_output and request.batch_size == 2
    answer = InferRequest(request.inputs, 2, binary_output=out_binary or v2 == "FP16")
    content, out_headers = model.encode(answer, {"y": request.inputs["x"]}, "1")
    length = out_headers.get(HEADER_LENGTH)
    outputs = model.decode_response(content, None if length is None else int(length))
    assert_same(outputs["y"], array)


def test_the_client_side_keeps_reshape_on_the_backend_side() -> None:
    model = codec([tensor("x", "FP32", (4,), reshape=(2, 2))],
                  [tensor("y", "INT64", (1,), reshape=())], max_batch_size=8)
    backend_input = np.arange(12, dtype=np.float32).reshape(3, 2, 2)
    body, headers = model.encode_request({"x": backend_input})
    assert orjson.loads(body[: int(headers[HEADER_LENGTH])])["inputs"][0]["shape"] == [3, 4]
    assert_same(model.decode(body, int(headers[HEADER_LENGTH])).inputs["x"], backend_input)
    labels = np.array([7, 8, 9], dtype=np.int64)  # the backend's shape: [3]
    content, _ = model.encode(InferRequest({}, 3), {"y": labels}, "1")
    assert orjson.loads(content)["outputs"][0]["shape"] == [3, 1]
    assert_same(model.decode_response(content, None)["y"], labels)


@pytest.mark.parametrize(("response", "length", "match"), [
    (b"[", None, "malformed JSON in the response"),
    (b"{}", None, "the response has no 'outputs' list"),
    (b'{"outputs": [{"name": "z"}]}', None, "unexpected inference output 'z'"),
    (b'{"outputs": [{"name": "y", "datatype": "FP64", "shape": [1, 3], "data": [1, 2, 3]}]}',
     None, "output 'y' has datatype 'FP64' but the model's is FP32"),
    (b'{"outputs": [{"name": "y", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}]}',
     None, r"unexpected shape for output 'y' for model 'm': expected \[-1,3\], got \[1,2\]"),
    (b'{"outputs": [{"name": "y", "datatype": "FP32", "shape": [1, 3], "data": [1, 2]}]}',
     None, "output 'y' has 2 elements in 'data' but shape"),
    (b'{"outputs": [{"name": "y", "datatype": "FP32", "shape": [1, 3], '
     b'"parameters": {"binary_data_size": 12}}]}', None,
     "output 'y' has binary_data_size 12 that the response's binary data does not hold"),
    (b'{"outputs": [{"name": "y", "datatype": "FP32", "shape": [1, 3], '
     b'"parameters": {"binary_data_size": 8}}]}' + bytes(8), 104,
     "output 'y' has 8 bytes of binary data but shape"),
    (b'{"outputs": []}xx', 15, "the response has 2 bytes of binary data that no output claims"),
    (b'{"outputs": []}', 99, "Inference-Header-Content-Length 99 is outside"),
])
def test_responses_that_do_not_fit_the_model_are_refused(response: bytes, length: int | None,
                                                         match: str) -> None:
    with pytest.raises(InvalidInput, match=match):
        identity("FP32").decode_response(response, length)
