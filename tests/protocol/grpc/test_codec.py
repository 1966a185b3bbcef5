"""The gRPC codec against tritonclient's own messages: what a V2 client sends, on the wire."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as tg
from tritonclient.grpc import service_pb2
from tritonclient.grpc._utils import _get_inference_request

from modelfn.protocol.grpc import codec
from modelfn.protocol.grpc import inference_pb2 as pb
from modelfn.protocol.tensors import ModelTensors
from modelfn.runtime.config import ModelConfig, TensorConfig
from modelfn.runtime.datatypes import BY_V2, DATATYPES
from modelfn.runtime.errors import BackendError, InvalidInput, Unsupported

RNG = np.random.default_rng(3)


def tensors(v2: str = "FP32", dims: tuple[int, ...] = (-1,), max_batch_size: int = 0,
            *, text: bool = False, inputs: list[TensorConfig] | None = None) -> ModelTensors:
    ins = inputs or [TensorConfig("x", BY_V2[v2], dims)]
    outs = [TensorConfig("y", t.datatype, t.dims) for t in ins[:1]]
    config = ModelConfig(name="m", max_batch_size=max_batch_size, inputs=ins, outputs=outs)
    return ModelTensors(config, text_strings=text)


def wire(request: service_pb2.ModelInferRequest) -> pb.ModelInferRequest:
    """tritonclient's message as the server receives it."""
    return pb.ModelInferRequest.FromString(request.SerializeToString())


def raw_request(arrays: dict[str, np.ndarray], **kw: Any) -> pb.ModelInferRequest:
    """What tritonclient.grpc sends for ``arrays``: raw_input_contents."""
    inputs = []
    for name, array in arrays.items():
        datatype = "BYTES" if array.dtype == object else tg.np_to_triton_dtype(array.dtype)
        tensor = tg.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return wire(_get_inference_request(  # what InferenceServerClient.infer sends
        model_name="m", inputs=inputs, model_version="", request_id=kw.get("id", ""),
        outputs=kw.get("outputs"), sequence_id=0, sequence_start=False, sequence_end=False,
        priority=0, timeout=kw.get("timeout"), parameters=None))


def typed_request(name: str, v2: str, shape: tuple[int, ...], field: str,
                  values: list[Any]) -> pb.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name="m")
    tensor = request.inputs.add(name=name, datatype=v2, shape=shape)
    getattr(tensor.contents, field).extend(values)
    return wire(request)


def random_array(v2: str, shape: tuple[int, ...]) -> np.ndarray:
    dtype = BY_V2[v2].numpy
    if v2 == "BYTES":
        flat = [bytes(RNG.integers(0, 256, size=int(n), dtype=np.uint8))
                for n in RNG.integers(0, 9, size=int(np.prod(shape)))]
        array = np.empty(len(flat), dtype=object)
        array[:] = flat
        return array.reshape(shape)
    if v2 == "BOOL":
        return RNG.integers(0, 2, size=shape).astype(bool)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return RNG.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    return (RNG.standard_normal(size=shape) * 100).astype(dtype)


def respond(model: ModelTensors, request: pb.ModelInferRequest) -> tg.InferResult:
    """Decode, echo the input as the output, encode, and read it back with tritonclient."""
    decoded = codec.decode(model, request)
    response = codec.encode(model, decoded, {"y": decoded.inputs["x"]}, "1")
    return tg.InferResult(service_pb2.ModelInferResponse.FromString(
        response.SerializeToString()))


@pytest.mark.parametrize("v2", [d.v2 for d in DATATYPES])
def test_every_datatype_round_trips_raw(v2: str) -> None:
    array = random_array(v2, (2, 3))
    result = respond(tensors(v2, (3,), max_batch_size=4), raw_request({"x": array}))
    got = result.as_numpy("y")
    assert got.shape == array.shape
    assert got.tolist() == array.tolist()
    if v2 != "BYTES":
        assert got.dtype == array.dtype


@pytest.mark.parametrize("v2", [d.v2 for d in DATATYPES if d.contents])
def test_every_typed_datatype_round_trips(v2: str) -> None:
    array = random_array(v2, (2, 3))
    request = typed_request("x", v2, (2, 3), BY_V2[v2].contents, array.ravel().tolist())
    got = respond(tensors(v2, (-1, 3)), request).as_numpy("y")
    assert got.tolist() == array.tolist()


def test_text_models_get_strings_from_raw_and_typed_bytes() -> None:
    model = tensors("BYTES", (-1,), text=True)
    words = np.array([b"hello", "日本語".encode(), b""], dtype=object)
    for request in (raw_request({"x": words}),
                    typed_request("x", "BYTES", (3,), "bytes_contents", words.tolist())):
        assert codec.decode(model, request).inputs["x"].tolist() == ["hello", "日本語", ""]
    with pytest.raises(InvalidInput, match="BYTES element 1 is not valid UTF-8"):
        codec.decode(model, typed_request("x", "BYTES", (2,), "bytes_contents", [b"a", b"\xff"]))


def test_raw_inputs_are_views_of_the_received_bytes() -> None:
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    decoded = codec.decode(tensors("FP32", (3,), 4), raw_request({"x": array}))
    assert decoded.inputs["x"].base is not None and not decoded.inputs["x"].flags.writeable
    assert decoded.batch_size == 2


def test_id_parameters_timeout_and_outputs() -> None:
    model = tensors("FP32", (3,), 4)
    request = raw_request({"x": np.ones((1, 3), np.float32)}, id="req-1", timeout=2500,
                          outputs=[tg.InferRequestedOutput("y", class_count=2)])
    decoded = codec.decode(model, request)
    assert decoded.id == "req-1" and decoded.timeout_us == 2500
    assert decoded.parameters["timeout"] == 2500
    assert [(o.name, o.classification) for o in decoded.outputs or []] == [("y", 2)]
    response = codec.encode(model, decoded, {"y": np.array([[1, 3, 2]], np.float32)}, "1")
    assert (response.id, response.model_version) == ("req-1", "1")
    assert response.outputs[0].datatype == "BYTES"
    result = tg.InferResult(service_pb2.ModelInferResponse.FromString(
        response.SerializeToString()))
    assert result.as_numpy("y").tolist() == [[b"3.000000:1", b"2.000000:2"]]
    assert codec.decode(model, raw_request({"x": np.ones((1, 3), np.float32)})).id is None


def refused(model: ModelTensors, request: pb.ModelInferRequest, match: str,
            error: type[Exception] = InvalidInput) -> None:
    with pytest.raises(error, match=match):
        codec.decode(model, request)


def test_raw_contents_must_match_the_inputs() -> None:
    model = tensors("FP32", (3,), 4)
    request = raw_request({"x": np.ones((1, 3), np.float32)})
    request.raw_input_contents.append(b"extra")
    refused(model, request, r"raw_input_contents has 2 entries but the request has 1 inputs")
    both = raw_request({"x": np.ones((1, 3), np.float32)})
    both.inputs[0].contents.fp32_contents.extend([1, 2, 3])
    refused(model, both, "must not be given when the request uses raw_input_contents")
    short = raw_request({"x": np.ones((1, 3), np.float32)})
    short.raw_input_contents[0] = b"\0" * 8
    refused(model, short, r"has 8 bytes of binary data but shape \[1,3\] of FP32 needs 12")


def test_bad_raw_bytes_and_bools() -> None:
    request = raw_request({"x": np.array([b"ab"], dtype=object)})
    request.raw_input_contents[0] = (2).to_bytes(4, "little") + b"a"  # one byte short
    refused(tensors("BYTES"), request, "BYTES element 0 claims 2 bytes; 1 remain")
    bools = raw_request({"x": np.array([True, False])})
    bools.raw_input_contents[0] = b"\x01\x02"
    refused(tensors("BOOL"), bools, "has BOOL bytes other than 0 and 1")


def test_typed_contents_in_the_wrong_field_or_too_few() -> None:
    refused(tensors("FP32"), typed_request("x", "FP32", (2,), "int_contents", [1, 2]),
            "of datatype FP32 has its elements in int_contents; FP32 elements go in "
            "fp32_contents")
    refused(tensors("FP32"), typed_request("x", "FP32", (3,), "fp32_contents", [1.0, 2.0]),
            r"has 2 elements in contents.fp32_contents but shape \[3\] needs 3")
    refused(tensors("FP16"), typed_request("x", "FP16", (1,), "fp32_contents", [1.0]),
            "is FP16, which has no typed contents field; send it in raw_input_contents")
    refused(tensors("INT8"), typed_request("x", "INT8", (1,), "int_contents", [300]),
            "has a value that does not fit INT8")
    refused(tensors("UINT8"), typed_request("x", "UINT8", (1,), "uint_contents", [256]),
            "has a value that does not fit UINT8")


def test_the_model_rules_are_those_of_rest() -> None:
    model = tensors("FP32", (3,), 4)
    refused(model, raw_request({"z": np.ones((1, 3), np.float32)}),
            "unexpected inference input 'z' for model 'm'; its inputs are 'x'")
    refused(model, raw_request({"x": np.ones((1, 3), np.int32)}),
            "input 'x' has datatype INT32 but the model expects FP32")
    refused(model, raw_request({"x": np.ones((5, 3), np.float32)}),
            "has batch size 5; the model takes 1 to 4")
    refused(model, raw_request({"x": np.ones((1, 3), np.float32)},
                               outputs=[tg.InferRequestedOutput("nope")]),
            "unexpected inference output 'nope'")
    pair = ModelTensors(ModelConfig(name="m", max_batch_size=4, inputs=[
        TensorConfig("a", BY_V2["FP32"], (2,)), TensorConfig("b", BY_V2["FP32"], (2,))],
        outputs=[TensorConfig("y", BY_V2["FP32"], (2,))]))
    refused(pair, raw_request({"a": np.ones((1, 2), np.float32)}),
            "missing required input\\(s\\) 'b'")
    refused(pair, raw_request({"a": np.ones((1, 2), np.float32),
                               "b": np.ones((2, 2), np.float32)}),
            "all inputs must have the same batch size")


def test_shared_memory_is_unsupported() -> None:
    request = raw_request({"x": np.ones((1, 3), np.float32)})
    request.inputs[0].parameters["shared_memory_region"].string_param = "r"
    refused(tensors("FP32", (3,), 4), request, "uses shared memory", Unsupported)
    # one input in shared memory, none raw for it: the refusal is still shared memory's
    mixed = raw_request({"x": np.ones((1, 3), np.float32)})
    mixed.inputs.add(name="y", datatype="FP32", shape=[1, 3]).parameters[
        "shared_memory_region"].string_param = "r"
    refused(tensors("FP32", (3,), 4), mixed, "input 'y' uses shared memory", Unsupported)


def test_a_missing_requested_output_is_a_backend_error() -> None:
    model = tensors("FP32", (3,), 4)
    request = raw_request({"x": np.ones((1, 3), np.float32)})
    request.outputs.add(name="y")
    decoded = codec.decode(model, request)
    with pytest.raises(BackendError, match="did not produce output 'y'"):
        codec.encode(model, decoded, {}, "1")
    # asked for none: the answer holds what the model produced (here, nothing)
    everything = codec.decode(model, raw_request({"x": np.ones((1, 3), np.float32)}))
    assert not codec.encode(model, everything, {}, "1").outputs
