"""The service's own pieces: the status of each error, and configs as Triton's message."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2

from modelfn.net.grpc_status import status_of
from modelfn.protocol.grpc import inference_pb2 as pb
from modelfn.protocol.grpc.service import model_version
from modelfn.runtime.config_file import parse_config
from modelfn.runtime.errors import (
    BackendError,
    ConfigError,
    InvalidInput,
    ModelfnError,
    ModelNotFound,
    ModelNotReady,
    PayloadTooLarge,
    QueueFull,
    RequestTimeout,
    ResponseTooLarge,
    Unsupported,
)

RICH = """
name: "resnet50"
backend: "onnxruntime"
max_batch_size: 32
version_policy: { specific: { versions: [1, 3] } }
input [{ name: "input", data_type: TYPE_FP32, dims: [ 3, -1, -1 ] }]
output [
  { name: "logits", data_type: TYPE_FP32, dims: [ 1000 ], label_filename: "labels.txt" },
  { name: "embedding", data_type: TYPE_FP16, dims: [ 2048 ], reshape: { shape: [ 32, 64 ] } }
]
instance_group [{ name: "gpu_pool", count: 2, kind: KIND_GPU, gpus: [ 0, 1 ] }]
dynamic_batching {
  preferred_batch_size: [ 8, 16 ]
  max_queue_delay_microseconds: 500
  default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 200000
                         allow_timeout_override: true max_queue_size: 128 }
}
model_warmup [{ name: "full batch" batch_size: 32 count: 2
  inputs { key: "input" value { data_type: TYPE_FP32 dims: [ 3, 224, 224 ] random_data: true } }
}]
optimization { execution_accelerators { gpu_execution_accelerator: [
  { name: "tensorrt" parameters { key: "precision_mode" value: "FP16" } } ] } }
parameters { key: "intra_op_thread_count" value { string_value: "4" } }
default_model_filename: "resnet50.onnx"
"""


@pytest.mark.parametrize(("error", "code"), [
    (InvalidInput("bad"), grpc.StatusCode.INVALID_ARGUMENT),
    (ConfigError("bad"), grpc.StatusCode.INVALID_ARGUMENT),
    (ModelNotFound("m"), grpc.StatusCode.NOT_FOUND),
    (ModelNotReady("m"), grpc.StatusCode.UNAVAILABLE),
    (QueueFull(), grpc.StatusCode.UNAVAILABLE),
    (RequestTimeout(), grpc.StatusCode.UNAVAILABLE),
    (PayloadTooLarge(2, 1), grpc.StatusCode.RESOURCE_EXHAUSTED),
    (ResponseTooLarge(2, 1), grpc.StatusCode.RESOURCE_EXHAUSTED),
    (Unsupported("shm"), grpc.StatusCode.UNIMPLEMENTED),
    (BackendError("boom"), grpc.StatusCode.INTERNAL),
    (ModelfnError("?"), grpc.StatusCode.INTERNAL),
])
def test_each_error_has_tritons_status(error: ModelfnError, code: grpc.StatusCode) -> None:
    assert status_of(error) is code


@pytest.mark.parametrize(("text", "version"), [
    ("", None), ("1", "1"), ("01", "1"), ("+2", "2"), (" 3", "3"), ("4x", "4"), ("1.5", "1"),
    ("0", "0"), ("-0", "0"), (str(2**63 - 1), str(2**63 - 1)),
])
def test_versions_are_read_as_std_stol_reads_them(text: str, version: str | None) -> None:
    assert model_version(text) == version


@pytest.mark.parametrize(("text", "message"), [
    ("abc", "failed to get model version from specified version string 'abc' (details: stol), "
            "version should be an integral value > 0"),
    (" ", "version string ' ' (details: stol)"),
    (str(2**63), f"version string '{2**63}' (details: stol)"),
    ("-1", "invalid model version specified '-1' , version should be an integral value > 0"),
    (" -7", "invalid model version specified ' -7' , version should be"),
])
def test_other_versions_are_invalid(text: str, message: str) -> None:
    with pytest.raises(InvalidInput) as info:
        model_version(text)
    assert message in info.value.message


def test_a_config_reaches_tritonclient_as_triton_parses_it() -> None:
    """Our ModelConfig message, read by tritonclient, holds what Triton's own parser reads
    from the same config.pbtxt, field for field."""
    ours = json_format.ParseDict(parse_config(RICH).to_json(), pb.ModelConfig())
    received = model_config_pb2.ModelConfig.FromString(ours.SerializeToString())
    reference = text_format.Parse(RICH, model_config_pb2.ModelConfig())
    got = json_format.MessageToDict(received, preserving_proto_field_name=True)
    want = json_format.MessageToDict(reference, preserving_proto_field_name=True)
    for key, value in want.items():
        assert got[key] == value, key
