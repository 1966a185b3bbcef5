"""config_to_pbtxt writes what config.parse_config reads back unchanged."""

from __future__ import annotations

from modelfn.runtime.config_file import parse_config
from modelfn.runtime.pbtxt_writer import config_to_pbtxt

FULL = """
name: "full"
platform: "onnxruntime_onnx"
max_batch_size: 16
version_policy { specific { versions: [1, 3] } }
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 3, -1 ] },
  { name: "mask" data_type: TYPE_BOOL dims: [ 1 ] reshape { shape: [ ] } optional: true }
]
output [ { name: "OUTPUT0" data_type: TYPE_INT64 dims: [ 10 ] label_filename: "labels.txt" } ]
instance_group [ { count: 2 kind: KIND_GPU gpus: [ 0, 1 ] } ]
dynamic_batching {
  preferred_batch_size: [ 4, 8 ]
  max_queue_delay_microseconds: 100
  default_queue_policy { max_queue_size: 64 timeout_action: DELAY default_timeout_microseconds: 5 }
}
model_warmup [ {
  name: "w" batch_size: 2
  inputs { key: "INPUT0" value { data_type: TYPE_FP32 dims: [ 3, 5 ] random_data: true } }
  inputs { key: "mask" value { data_type: TYPE_BOOL dims: [ 1 ] zero_data: true } }
} ]
optimization { execution_accelerators { gpu_execution_accelerator : [ {
  name : "tensorrt"
  parameters { key: "precision_mode" value: "FP16" }
} ] } }
parameters { key: "note" value { string_value: "say \\"hi\\"\\n\\ttab" } }
"""


def test_round_trip_of_every_supported_field() -> None:
    config = parse_config(FULL)
    text = config_to_pbtxt(config.to_json())
    assert parse_config(text).to_json() == config.to_json()
    assert "kind: KIND_GPU" in text and 'precision_mode' in text
    assert 'string_value: "say \\"hi\\"\\n\\ttab"' in text


def test_defaults_are_left_out_but_presence_is_kept() -> None:
    text = config_to_pbtxt({
        "name": "m", "max_batch_size": 0, "platform": "", "input": [],
        "version_policy": {"all": {}},
        "dynamic_batching": {"preferred_batch_size": [], "max_queue_delay_microseconds": 0},
        "optimization": {"execution_accelerators": {"gpu_execution_accelerator": []}},
        "instance_group": [{"kind": "KIND_AUTO", "count": 1}],
        "parameters": {},
    })
    assert text == (
        'name: "m"\n'
        "version_policy {\n  all {\n  }\n}\n"
        "dynamic_batching {\n}\n"
        "instance_group [\n  {\n    count: 1\n  }\n]\n"
    )
    assert parse_config(text).dynamic_batching is not None


def test_control_characters_are_escaped() -> None:
    assert config_to_pbtxt({"name": "a\x01b"}) == 'name: "a\\001b"\n'
