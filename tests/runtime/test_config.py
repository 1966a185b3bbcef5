from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import tritonclient
from google.protobuf import json_format, text_format
from onnx_models import DENSENET_CONFIG

from modelfn.runtime.autocomplete import autocomplete
from modelfn.runtime.backends.base import Signature, TensorSpec
from modelfn.runtime.config import (
    Accelerator,
    DynamicBatching,
    InstanceGroup,
    ModelConfig,
    QueuePolicy,
    TensorConfig,
    VersionPolicy,
    Warmup,
    WarmupInput,
    config_from_json,
)
from modelfn.runtime.config_file import load_config, parse_config
from modelfn.runtime.datatypes import BY_CONFIG, BY_V2
from modelfn.runtime.errors import ConfigError

if TYPE_CHECKING:
    from types import ModuleType

FP32, INT64, BYTES = BY_V2["FP32"], BY_V2["INT64"], BY_V2["BYTES"]
PATH = "models/m/config.pbtxt"


def spec(name: str, shape: tuple[int, ...], datatype: str = "FP32") -> TensorSpec:
    return TensorSpec(name, BY_V2[datatype], shape)


def signature(inputs: list[TensorSpec], outputs: list[TensorSpec]) -> Signature:
    return Signature(tuple(inputs), tuple(outputs))


#: an image classifier whose every tensor has a dynamic first dimension
BATCHABLE = signature([spec("x", (-1, 3, 8, 8))], [spec("y", (-1, 10))])
#: a model with a fixed batch of 1
FIXED = signature([spec("x", (1, 3, 8, 8))], [spec("y", (1, 10))])


@pytest.fixture(scope="module")
def triton_proto() -> ModuleType:
    """Triton's own ModelConfig protobuf, as tritonclient ships it: the reference schema."""
    location = Path(tritonclient.__file__).parent / "grpc" / "model_config_pb2.py"
    found = importlib.util.spec_from_file_location("triton_model_config_pb2", location)
    assert found is not None and found.loader is not None
    module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)
    return module


# --- realistic configs ---------------------------------------------------------------------

#: Triton's densenet_onnx config as its example repository ships it
DENSENET = DENSENET_CONFIG

RESNET_BATCHING = """
# ResNet-50 exported from PyTorch, served with dynamic batching
name: "resnet50"
backend: "onnxruntime"
max_batch_size: 32
version_policy: { specific: { versions: [1, 3] } }
input [
  { name: "input", data_type: TYPE_FP32, dims: [ 3, -1, -1 ] }
]
output [
  { name: "logits", data_type: TYPE_FP32, dims: [ 1000 ] },
  { name: "embedding", data_type: TYPE_FP16, dims: [ 2048 ] }
]
instance_group [
  { name: "gpu_pool", count: 2, kind: KIND_GPU, gpus: [ 0, 1 ] },
  { count: 1, kind: KIND_CPU }
]
dynamic_batching {
  preferred_batch_size: [ 8, 16 ]
  max_queue_delay_microseconds: 500
  preserve_ordering: true
  default_queue_policy {
    timeout_action: REJECT
    default_timeout_microseconds: 200000
    allow_timeout_override: true
    max_queue_size: 128
  }
}
model_warmup [
  {
    name: "full batch"
    batch_size: 32
    count: 2
    inputs { key: "input" value { data_type: TYPE_FP32 dims: [ 3, 224, 224 ] random_data: true } }
  },
  {
    name: "from file"
    inputs [{ key: "input", value: { data_type: TYPE_FP32, dims: [3, 64, 64],
                                     input_data_file: "warmup/input.raw" } }]
  }
]
parameters { key: "intra_op_thread_count" value { string_value: "4" } }
parameters [{ key: "enable_mem_arena", value: { string_value: "1" } }]
default_model_filename: "resnet50.onnx"
"""

TRT_ON_ORT = """
name: "bert"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  { name: "input_ids" data_type: TYPE_INT64 dims: [ -1 ] },
  { name: "attention_mask" data_type: TYPE_INT64 dims: [ -1 ] }
]
output [ { name: "last_hidden_state" data_type: TYPE_FP32 dims: [ -1, 768 ] } ]
instance_group [ { kind: KIND_GPU } ]
optimization { execution_accelerators { gpu_execution_accelerator: [{
  name: "tensorrt"
  parameters { key: "precision_mode" value: "FP16" }          # FP32|FP16|BF16|INT8
  parameters { key: "max_workspace_size_bytes" value: "1073741824" }
  parameters { key: "trt_engine_cache_enable" value: "1" }
  parameters { key: "trt_engine_cache_path" value: "/cache" } }] } }
"""

TENSORRT_PLAN = """
name: "yolo_trt"
platform: "tensorrt_plan"
max_batch_size: 4
input < name: "images" data_type: TYPE_FP16 dims: [3, 640, 640] >
output < name: "detections" data_type: TYPE_FP32 dims: [-1, 6] >
instance_group [ { kind: KIND_GPU count: 1 gpus: 0 } ]
version_policy { all { } }
optimization { execution_accelerators {
  cpu_execution_accelerator [ { name: "openvino" } ]
} }
"""

PARTIAL = """
max_batch_size: 16
instance_group [ { count: 2 kind: KIND_AUTO } ]
"""

REALISTIC = {
    "densenet": DENSENET,
    "resnet": RESNET_BATCHING,
    "trt_on_ort": TRT_ON_ORT,
    "tensorrt_plan": TENSORRT_PLAN,
    "partial": PARTIAL,
}


def contains(outer: Any, inner: Any) -> bool:
    """Whether every value in ``inner`` appears, at the same place, in ``outer``."""
    if isinstance(inner, dict):
        return isinstance(outer, dict) and all(
            k in outer and contains(outer[k], v) for k, v in inner.items()
        )
    if isinstance(inner, list):
        return (
            isinstance(outer, list)
            and len(outer) == len(inner)
            and all(contains(o, i) for o, i in zip(outer, inner, strict=True))
        )
    return bool(outer == inner)


@pytest.mark.parametrize("text", REALISTIC.values(), ids=REALISTIC.keys())
def test_parse_agrees_with_protobuf(triton_proto: ModuleType, text: str) -> None:
    """Every value protobuf's own text parser reads is in our config's JSON form."""
    reference = text_format.Parse(text, triton_proto.ModelConfig())
    ours = json_format.ParseDict(parse_config(text).to_json(), triton_proto.ModelConfig())
    expected = json_format.MessageToDict(reference, preserving_proto_field_name=True)
    actual = json_format.MessageToDict(ours, preserving_proto_field_name=True)
    assert contains(actual, expected), (actual, expected)


def test_densenet_maps_onto_dataclasses() -> None:
    config = parse_config(DENSENET, "models/densenet_onnx/config.pbtxt")
    assert config.name == "densenet_onnx"
    assert config.platform == "onnxruntime_onnx" and config.backend == ""
    assert config.max_batch_size == 0
    assert config.inputs == [TensorConfig("data_0", FP32, (3, 224, 224), reshape=(1, 3, 224, 224),
                                          format="FORMAT_NCHW")]
    assert config.outputs == [
        TensorConfig(
            "fc6_1", FP32, (1000,), reshape=(1, 1000, 1, 1), label_filename="densenet_labels.txt"
        )
    ]
    assert config.source == "models/densenet_onnx/config.pbtxt"
    assert config.explicit == {"name", "platform", "max_batch_size", "input", "output"}
    assert config.instance_group == [] and config.dynamic_batching is None


def test_every_supported_field_maps_onto_dataclasses() -> None:
    config = parse_config(RESNET_BATCHING, PATH)
    assert config.backend == "onnxruntime" and config.platform == ""
    assert config.max_batch_size == 32
    assert config.version_policy == VersionPolicy("specific", versions=(1, 3))
    assert config.inputs == [TensorConfig("input", FP32, (3, -1, -1))]
    assert config.outputs == [
        TensorConfig("logits", FP32, (1000,)),
        TensorConfig("embedding", BY_CONFIG["TYPE_FP16"], (2048,)),
    ]
    assert config.instance_group == [
        InstanceGroup(count=2, kind="KIND_GPU", name="gpu_pool", gpus=(0, 1)),
        InstanceGroup(count=1, kind="KIND_CPU"),
    ]
    assert config.dynamic_batching == DynamicBatching(
        preferred_batch_size=(8, 16),
        max_queue_delay_microseconds=500,
        preserve_ordering=True,
        default_queue_policy=QueuePolicy(
            max_queue_size=128,
            default_timeout_microseconds=200000,
            timeout_action="REJECT",
            allow_timeout_override=True,
        ),
    )
    assert config.model_warmup == [
        Warmup(
            "full batch",
            batch_size=32,
            count=2,
            inputs={"input": WarmupInput(FP32, (3, 224, 224), data="random_data")},
        ),
        Warmup(
            "from file",
            inputs={
                "input": WarmupInput(
                    FP32, (3, 64, 64), data="input_data_file", input_data_file="warmup/input.raw"
                )
            },
        ),
    ]
    assert config.parameters == {"intra_op_thread_count": "4", "enable_mem_arena": "1"}
    assert config.default_model_filename == "resnet50.onnx"


def test_optimization_maps_onto_dataclasses() -> None:
    config = parse_config(TRT_ON_ORT)
    assert config.optimization.gpu_execution_accelerator == (
        Accelerator(
            "tensorrt",
            {
                "precision_mode": "FP16",
                "max_workspace_size_bytes": "1073741824",
                "trt_engine_cache_enable": "1",
                "trt_engine_cache_path": "/cache",
            },
        ),
    )
    assert config.optimization.cpu_execution_accelerator == ()
    plan = parse_config(TENSORRT_PLAN)
    assert plan.optimization.cpu_execution_accelerator == (Accelerator("openvino"),)
    assert plan.version_policy == VersionPolicy("all")
    assert plan.instance_group == [InstanceGroup(count=1, kind="KIND_GPU", gpus=(0,))]


def test_defaults_when_fields_are_absent() -> None:
    config = parse_config("")
    assert config == ModelConfig(source="config.pbtxt")
    group = parse_config("instance_group {}").instance_group
    assert group == [InstanceGroup(count=1, kind="KIND_AUTO")]
    batching = parse_config("dynamic_batching {}").dynamic_batching
    assert batching == DynamicBatching()
    latest = parse_config("version_policy { latest { num_versions: 2 } }").version_policy
    assert latest == VersionPolicy("latest", num_versions=2)
    warmup = parse_config(
        'model_warmup { name: "w" count: 0 '
        'inputs { key: "x" value { data_type: TYPE_STRING dims: 1 zero_data: true } } }'
    ).model_warmup
    assert warmup == [Warmup("w", batch_size=1, count=1, inputs={"x": WarmupInput(BYTES, (1,))})]


def test_triton_defaults_of_unsupported_fields_are_accepted() -> None:
    config = parse_config(
        'input { name: "x" data_type: TYPE_FP32 dims: 1 format: FORMAT_NONE '
        "is_shape_tensor: false allow_ragged_batch: false }\n"
        'output { name: "y" data_type: TYPE_FP32 dims: 1 is_shape_tensor: false }'
    )
    assert config.inputs == [TensorConfig("x", FP32, (1,))]
    assert config.outputs == [TensorConfig("y", FP32, (1,))]


@pytest.mark.parametrize("false", ["false", "False", "f", "0"])
def test_a_default_boolean_is_accepted_however_text_format_spells_it(false: str) -> None:
    config = parse_config(f'input {{ name: "x" data_type: TYPE_FP32 dims: 1 '
                          f"is_shape_tensor: {false} allow_ragged_batch: {false} }}")
    assert config.inputs == [TensorConfig("x", FP32, (1,))]


@pytest.mark.parametrize("value", ["true", "t", "1", "2"])
def test_another_value_of_an_unsupported_field_is_still_refused(value: str) -> None:
    assert config_error(
        f'input {{ name: "x" data_type: TYPE_FP32 dims: 1 is_shape_tensor: {value} }}'
    ) == f"{PATH}:1: field 'input.is_shape_tensor' is not supported by modelfn"


# --- parse errors ---------------------------------------------------------------------------


def config_error(text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, PATH)
    assert caught.value.status_code == 400
    return str(caught.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            'name: "x"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n\n\n\n'
            "sequence_batching { }\n",
            f"{PATH}:7: field 'sequence_batching' is not supported by modelfn",
        ),
        (
            'platform: "ensemble"\nensemble_scheduling { max_inflight_requests: 4 }',
            f"{PATH}:2: field 'ensemble_scheduling.max_inflight_requests' is not supported by "
            "modelfn",
        ),
        (
            'cc_model_filenames { key: "8.0" value: "a100.plan" }',
            f"{PATH}:1: field 'cc_model_filenames' is not supported by modelfn",
        ),
        (
            "response_cache { enable: true }",
            f"{PATH}:1: field 'response_cache' is not supported by modelfn",
        ),
        (
            "dynamic_batching {\n  priority_queue_policy { key: 1 value { max_queue_size: 2 } }\n}",
            f"{PATH}:2: field 'dynamic_batching.priority_queue_policy' is not supported by modelfn",
        ),
        (
            "optimization { cuda { graphs: true } }",
            f"{PATH}:1: field 'optimization.cuda' is not supported by modelfn",
        ),
        (
            "instance_group [ { count: 1 rate_limiter { priority: 1 } } ]",
            f"{PATH}:1: field 'instance_group.rate_limiter' is not supported by modelfn",
        ),
        (
            'input { name: "x" data_type: TYPE_FP32 dims: [-1] allow_ragged_batch: true }',
            f"{PATH}:1: field 'input.allow_ragged_batch' is not supported by modelfn",
        ),
        (
            'output { name: "y" data_type: TYPE_INT64 dims: [1] is_shape_tensor: true }',
            f"{PATH}:1: field 'output.is_shape_tensor' is not supported by modelfn",
        ),
        ("max_batch_sise: 8", f"{PATH}:1: field 'max_batch_sise' is unknown"),
        (
            'input { name: "x" data_type: TYPE_FP32 dims: 1 label_filename: "l.txt" }',
            f"{PATH}:1: field 'input.label_filename' is unknown",
        ),
    ],
)
def test_unsupported_and_unknown_fields(text: str, message: str) -> None:
    assert config_error(text) == message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("instance_group { kind: KIND_MODEL }", "expects one of KIND_AUTO, KIND_CPU, KIND_GPU"),
        (
            "dynamic_batching { default_queue_policy { timeout_action: DROP } }",
            "field 'dynamic_batching.default_queue_policy.timeout_action' expects one of "
            "REJECT, DELAY, got DROP",
        ),
        ('input { name: "x" data_type: TYPE_FLOAT dims: 1 }', "got TYPE_FLOAT"),
        ('input { name: "x" data_type: TYPE_BF16 dims: 1 }', "expects one of TYPE_BOOL,"),
        ('input { name: "x" data_type: "TYPE_FP32" dims: 1 }', 'got "TYPE_FP32"'),
        ('platform: "pytorch_libtorch"', 'platform "pytorch_libtorch" is not supported'),
        ('backend: "pytorch"', 'backend "pytorch" is not supported by modelfn'),
        ("platform: onnxruntime_onnx", "field 'platform' expects a quoted string"),
    ],
)
def test_bad_enum_values(text: str, message: str) -> None:
    assert message in config_error(text)


def test_unknown_datatype_names_the_tensor() -> None:
    message = config_error('input {\n name: "x"\n data_type: TYPE_FLOAT\n dims: 1\n}')
    assert message.startswith(f"{PATH}:3: input 'x': field 'data_type' expects one of ")
    assert "TYPE_FP32" in message and "TYPE_STRING" in message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('max_batch_size: "8"', "1: field 'max_batch_size' expects an integer, got \"8\""),
        ("max_batch_size: -1", "1: field 'max_batch_size' must be >= 0, got -1"),
        ("max_batch_size: 4294967296", "field 'max_batch_size' must be <= 2147483647"),
        ("max_batch_size: 1\nmax_batch_size: 2", "2: field 'max_batch_size' is set more than once"),
        ("name: model", "field 'name' expects a quoted string, got model"),
        ("input: 3", "field 'input' expects a message { ... }, got 3"),
        ('input { name: "x" data_type: TYPE_FP32 dims: ["3"] }', "input 'x': field 'dims'"),
        ('input { name: "x" data_type: TYPE_FP32 dims: [3, 0] }', "must be an integer >= 1, or -1"),
        ('input { name: "x" data_type: TYPE_FP32 dims: [-2] }', "got -2"),
        ('input { name: "x" data_type: TYPE_FP32 optional: maybe dims: 1 }', "true or false"),
        ("instance_group { count: 0 }", "field 'instance_group.count' must be >= 1, got 0"),
        ("instance_group { gpus: -1 }", "field 'instance_group.gpus' must be >= 0"),
        (
            "dynamic_batching { preferred_batch_size: [4, 0] }",
            "field 'dynamic_batching.preferred_batch_size' must be >= 1, got 0",
        ),
        (
            "dynamic_batching { max_queue_delay_microseconds: -5 }",
            "field 'dynamic_batching.max_queue_delay_microseconds' must be >= 0",
        ),
        (
            "dynamic_batching { default_queue_policy { max_queue_size: -1 } }",
            "max_queue_size' must be >= 0",
        ),
        ("dynamic_batching { preserve_ordering: 2 }", "expects true or false, got 2"),
        ('parameters { key: "k" value: "v" }', "field 'parameters.value' expects a message"),
        ('parameters { key: "k" value { string_value: 1 } }', "expects a quoted string, got 1"),
        ('parameters { key: "k" value { int_value: 1 } }', "field 'parameters.value.int_value'"),
        ("default_model_filename: 1", "field 'default_model_filename' expects a quoted string"),
    ],
)
def test_wrong_types_and_ranges(text: str, message: str) -> None:
    assert message in config_error(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("input { data_type: TYPE_FP32 dims: 1 }", "1: input must specify 'name'"),
        ('input { name: "x" dims: 1 }', "1: input 'x': must specify 'data_type'"),
        ('output {\n name: "y" data_type: TYPE_FP32 }', "1: output 'y': must specify 'dims'"),
        (
            'input { name: "x" data_type: TYPE_FP32 dims: 1 }\n'
            'input { name: "x" data_type: TYPE_FP32 dims: 1 }',
            "2: input 'x' is declared more than once",
        ),
        (
            'input { name: "x" data_type: TYPE_FP32 dims: [2, 3]\n reshape { shape: [5] } }',
            "2: input 'x': dims [2, 3] and reshape [5] have different element counts",
        ),
        (
            'input { name: "x" data_type: TYPE_FP32 dims: [2, -1, 3]\n'
            "reshape { shape: [3, -1, 2] } }",
            "have different element counts",
        ),
        ("version_policy { latest {} all {} }", "must set exactly one of latest, all, specific"),
        ("version_policy { specific { } }", "must list at least one version"),
        ("version_policy { specific { versions: 0 } }", "must be >= 1, got 0"),
        ("version_policy { newest { } }", "field 'version_policy.newest' is unknown"),
        ("instance_group { kind: KIND_CPU gpus: 0 }", "KIND_CPU must not list gpus"),
        (
            'model_warmup { name: "w" inputs { key: "x" value { data_type: TYPE_FP32 dims: 1 } } }',
            "model_warmup 'w' input 'x': must set exactly one of zero_data, random_data",
        ),
        (
            'model_warmup { name: "w" inputs { key: "x" value {\n data_type: TYPE_FP32 dims: 1 '
            "zero_data: true random_data: true } } }",
            "2: model_warmup 'w' input 'x': must set exactly one of",
        ),
        (
            'model_warmup { name: "w" inputs { key: "x" value { data_type: TYPE_FP32 '
            "dims: [-1] zero_data: true } } }",
            "input 'x': field 'dims' must be an integer >= 1, got -1",
        ),
        (
            'model_warmup { name: "w" batch_size: 0 }',
            "model_warmup 'w': field 'batch_size' must be >= 1",
        ),
        (
            "optimization { execution_accelerators { gpu_execution_accelerator { } } }",
            "must specify 'name'",
        ),
    ],
)
def test_invalid_values(text: str, message: str) -> None:
    assert message in config_error(text)


def test_syntax_error_names_file_and_line() -> None:
    assert config_error('name: "m"\nmax_batch_size: 8\ninput [ { name: "x" ]\n') == (
        f"{PATH}:3: syntax error: expected a field name, found ']'"
    )


def test_load_config(tmp_path: Path) -> None:
    model_dir = tmp_path / "digits"
    model_dir.mkdir()
    assert load_config(model_dir) is None
    (model_dir / "config.pbtxt").write_text('name: "digits"\nmax_batch_size: 2\n')
    config = load_config(model_dir)
    assert config is not None
    assert (config.name, config.max_batch_size) == ("digits", 2)
    assert config.source == str(model_dir / "config.pbtxt")
    (model_dir / "config.pbtxt").write_text("max_batch_size: 2\nbogus: 1\n")
    with pytest.raises(ConfigError, match=r"config\.pbtxt:2: field 'bogus' is unknown"):
        load_config(model_dir)
    (model_dir / "config.pbtxt").write_bytes(b'name: "\xff"\n')
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(model_dir)


# --- auto-complete --------------------------------------------------------------------------


def test_no_config_batchable_model() -> None:
    config = autocomplete(None, name="clf", signature=BATCHABLE)
    assert config.name == "clf"
    assert (config.platform, config.backend) == ("onnxruntime_onnx", "onnxruntime")
    assert config.default_model_filename == "model.onnx"
    assert config.max_batch_size == 4
    assert config.inputs == [TensorConfig("x", FP32, (3, 8, 8))]
    assert config.outputs == [TensorConfig("y", FP32, (10,))]
    assert config.dynamic_batching == DynamicBatching()
    assert config.instance_group == [InstanceGroup(count=1, kind="KIND_CPU", name="clf")]
    assert config.version_policy == VersionPolicy()
    assert config.source == "" and config.explicit == frozenset()


def test_default_max_batch_size_and_when_dynamic_batching_is_added() -> None:
    config = autocomplete(None, name="m", signature=BATCHABLE, default_max_batch_size=64)
    assert config.max_batch_size == 64 and config.dynamic_batching is not None
    config = autocomplete(None, name="m", signature=BATCHABLE, default_max_batch_size=1)
    assert config.max_batch_size == 1 and config.dynamic_batching is None  # as Triton: only > 1


def test_no_config_model_that_cannot_batch() -> None:
    config = autocomplete(None, name="m", signature=FIXED, gpu_available=True)
    assert config.max_batch_size == 0
    assert config.inputs == [TensorConfig("x", FP32, (1, 3, 8, 8))]
    assert config.outputs == [TensorConfig("y", FP32, (1, 10))]
    assert config.dynamic_batching is None
    assert config.instance_group == [InstanceGroup(count=1, kind="KIND_GPU", name="m")]


@pytest.mark.parametrize(
    "sig",
    [
        signature([spec("x", (-1, 4))], [spec("y", (1, 4))]),  # one fixed output
        signature([spec("x", (-1, 4)), spec("n", ())], [spec("y", (-1, 4))]),  # a scalar input
        signature([spec("x", (4, -1))], [spec("y", (-1, 4))]),
    ],
)
def test_batching_needs_every_tensor_dynamic_first(sig: Signature) -> None:
    assert autocomplete(None, name="m", signature=sig).max_batch_size == 0
    with pytest.raises(ConfigError, match="max_batch_size is 8 but the model cannot batch"):
        autocomplete(parse_config("max_batch_size: 8", PATH), name="m", signature=sig)


def test_cannot_batch_error_names_the_tensors() -> None:
    with pytest.raises(ConfigError) as caught:
        autocomplete(parse_config("max_batch_size: 8", PATH), name="m", signature=FIXED)
    assert str(caught.value) == (
        f"{PATH}: max_batch_size is 8 but the model cannot batch: x [1, 3, 8, 8], y [1, 10] "
        "lack a variable first dimension; set max_batch_size: 0"
    )


def test_scalar_tensors() -> None:
    per_item = signature([spec("ids", (-1,), "INT64")], [spec("score", (-1,))])
    config = autocomplete(None, name="m", signature=per_item)
    assert config.inputs == [TensorConfig("ids", INT64, (1,), reshape=())]
    assert config.outputs == [TensorConfig("score", FP32, (1,), reshape=())]
    scalar = signature([spec("n", (), "INT64")], [spec("s", (), "BYTES")])
    config = autocomplete(None, name="m", signature=scalar)
    assert config.max_batch_size == 0
    assert config.inputs == [TensorConfig("n", INT64, (1,))]
    assert config.outputs == [TensorConfig("s", BYTES, (1,))]
    written = parse_config('input { name: "n" data_type: TYPE_INT64 dims: [1, 1] }', PATH)
    assert autocomplete(written, name="m", signature=scalar).inputs[0].dims == (1, 1)
    wrong = parse_config('input { name: "n" data_type: TYPE_INT64 dims: [2] }', PATH)
    with pytest.raises(ConfigError, match="input 'n': config dims \\[2\\] but the model declares"):
        autocomplete(wrong, name="m", signature=scalar)


def test_partial_config_is_completed() -> None:
    config = autocomplete(
        parse_config(PARTIAL, PATH), name="m", signature=BATCHABLE, gpu_available=True
    )
    assert config.max_batch_size == 16
    assert config.inputs == [TensorConfig("x", FP32, (3, 8, 8))]
    assert config.outputs == [TensorConfig("y", FP32, (10,))]
    assert config.dynamic_batching == DynamicBatching()
    assert config.instance_group == [InstanceGroup(count=2, kind="KIND_GPU", name="m_0")]
    assert config.source == PATH


def test_explicit_zero_max_batch_size_is_kept() -> None:
    config = autocomplete(parse_config("max_batch_size: 0"), name="m", signature=BATCHABLE)
    assert config.max_batch_size == 0 and config.dynamic_batching is None
    assert config.inputs == [TensorConfig("x", FP32, (-1, 3, 8, 8))]


def test_config_with_inputs_and_outputs_is_taken_as_written() -> None:
    text = (
        'input { name: "x" data_type: TYPE_FP32 dims: [-1, 3, 8, 8] }\n'
        'output { name: "y" data_type: TYPE_FP32 dims: [-1, 10] }\n'
    )
    config = autocomplete(parse_config(text, PATH), name="m", signature=BATCHABLE)
    assert config.max_batch_size == 0 and config.dynamic_batching is None
    assert config.inputs == [TensorConfig("x", FP32, (-1, 3, 8, 8))]


def test_config_with_only_inputs_gets_outputs() -> None:
    text = 'max_batch_size: 2\ninput { name: "x" data_type: TYPE_FP32 dims: [3, 8, 8] }'
    config = autocomplete(parse_config(text, PATH), name="m", signature=BATCHABLE)
    assert config.inputs == [TensorConfig("x", FP32, (3, 8, 8))]
    assert config.outputs == [TensorConfig("y", FP32, (10,))]
    assert config.dynamic_batching == DynamicBatching()


def test_config_may_list_a_subset_of_outputs() -> None:
    sig = signature([spec("x", (-1, 2))], [spec("y", (-1, 2)), spec("z", (-1, 1))])
    text = 'max_batch_size: 4\noutput { name: "z" data_type: TYPE_FP32 dims: [1] }'
    config = autocomplete(parse_config(text), name="m", signature=sig)
    assert [t.name for t in config.outputs] == ["z"]
    assert [t.name for t in config.inputs] == ["x"]


def test_reshape_is_what_the_model_sees() -> None:
    sig = signature([spec("x", (-1, 1, 28, 28))], [spec("y", (-1, 10))])
    text = (
        "max_batch_size: 8\n"
        'input { name: "x" data_type: TYPE_FP32 dims: [784] reshape { shape: [1, 28, 28] } }'
    )
    config = autocomplete(parse_config(text), name="mnist", signature=sig)
    assert config.inputs == [TensorConfig("x", FP32, (784,), reshape=(1, 28, 28))]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('name: "other"', "config name 'other' does not match the model directory 'm'"),
        (
            'input { name: "x" data_type: TYPE_INT64 dims: [3, 8, 8] }',
            "input 'x': config data_type TYPE_INT64 but the model declares TYPE_FP32",
        ),
        (
            'max_batch_size: 4\noutput { name: "y" data_type: TYPE_FP32 dims: [-1, 10] }',
            "output 'y': config dims [-1, 10] but the model declares shape [-1, 10] "
            "without its batch dimension [10]",
        ),
        (
            'input { name: "x" data_type: TYPE_FP32 dims: [3, 8, 9] }',
            "input 'x': config dims [3, 8, 9] but the model declares shape [-1, 3, 8, 8] "
            "without its batch dimension [3, 8, 8]",
        ),
        (
            'max_batch_size: 0\ninput { name: "x" data_type: TYPE_FP32 dims: [-1, 3, 8, -1] }',
            "input 'x': config dims [-1, 3, 8, -1] but the model declares shape [-1, 3, 8, 8]",
        ),
        (
            'input { name: "image" data_type: TYPE_FP32 dims: [3, 8, 8] }',
            "input 'image' is not in the model (the model's inputs: 'x')",
        ),
        (
            'output { name: "probs" data_type: TYPE_FP32 dims: [10] }',
            "output 'probs' is not in the model (the model's outputs: 'y')",
        ),
        (
            'platform: "tensorrt_plan"\nbackend: "onnxruntime"',
            "platform 'tensorrt_plan' runs on backend 'tensorrt', not 'onnxruntime'",
        ),
    ],
)
def test_contradictions_with_the_model(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        autocomplete(parse_config(text, PATH), name="m", signature=BATCHABLE)
    assert str(caught.value) == f"{PATH}: {message}"


def test_config_dims_may_fix_a_variable_model_dim() -> None:
    sig = signature([spec("x", (-1, -1, 4))], [spec("y", (-1, 4))])
    text = 'max_batch_size: 2\ninput { name: "x" data_type: TYPE_FP32 dims: [16, 4] }'
    assert autocomplete(parse_config(text), name="m", signature=sig).inputs[0].dims == (16, 4)


def test_every_model_input_must_be_in_the_config() -> None:
    sig = signature([spec("a", (-1, 2)), spec("b", (-1, 2))], [spec("y", (-1, 2))])
    text = 'max_batch_size: 2\ninput { name: "a" data_type: TYPE_FP32 dims: [2] }'
    with pytest.raises(ConfigError, match="the model's input 'b' is missing from the config"):
        autocomplete(parse_config(text), name="m", signature=sig)


@pytest.mark.parametrize(
    ("text", "platform", "backend", "filename"),
    [
        ("", "onnxruntime_onnx", "onnxruntime", "model.onnx"),
        ('backend: "tensorrt"', "tensorrt_plan", "tensorrt", "model.plan"),
        ('platform: "tensorrt_plan"', "tensorrt_plan", "tensorrt", "model.plan"),
        ('backend: "onnxruntime"\ndefault_model_filename: "m.onnx"', "onnxruntime_onnx",
         "onnxruntime", "m.onnx"),
    ],
)  # fmt: skip
def test_platform_and_backend_imply_each_other(
    text: str, platform: str, backend: str, filename: str
) -> None:
    config = autocomplete(parse_config(text), name="m", signature=BATCHABLE)
    assert (config.platform, config.backend, config.default_model_filename) == (
        platform,
        backend,
        filename,
    )


def test_platform_argument_applies_only_without_one_in_the_config() -> None:
    config = autocomplete(None, name="m", signature=BATCHABLE, platform="tensorrt_plan")
    assert (config.platform, config.default_model_filename) == ("tensorrt_plan", "model.plan")
    config = autocomplete(
        parse_config('platform: "onnxruntime_onnx"'),
        name="m",
        signature=BATCHABLE,
        platform="tensorrt_plan",
    )
    assert config.platform == "onnxruntime_onnx"


@pytest.mark.parametrize(("gpu", "kind"), [(False, "KIND_CPU"), (True, "KIND_GPU")])
def test_kind_auto_resolves_by_gpu_availability(gpu: bool, kind: str) -> None:
    text = 'instance_group [{ count: 3 }, { kind: KIND_AUTO name: "named" }, { kind: KIND_CPU }]'
    config = autocomplete(parse_config(text), name="m", signature=BATCHABLE, gpu_available=gpu)
    assert [(g.name, g.kind, g.count) for g in config.instance_group] == [
        ("m_0", kind, 3),
        ("named", kind, 1),
        ("m_2", "KIND_CPU", 1),
    ]
    assert config.instance_count == 5
    assert config.uses_gpu is gpu


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "max_batch_size: 4\ndynamic_batching { preferred_batch_size: [2, 8] }",
            "dynamic_batching: preferred_batch_size 8 must be between 1 and max_batch_size (4)",
        ),
        (
            "max_batch_size: 0\ndynamic_batching { preferred_batch_size: 1 }",
            "dynamic_batching: preferred_batch_size 1 must be between 1 and max_batch_size (0)",
        ),
        (
            "dynamic_batching { preserve_ordering: true default_queue_policy { "
            "timeout_action: DELAY default_timeout_microseconds: 10 } }",
            "dynamic_batching: timeout_action DELAY cannot be used with preserve_ordering",
        ),
        (
            'max_batch_size: 4\ninput { name: "x" data_type: TYPE_FP32 dims: [3, 8, 8] '
            "optional: true }",
            "input 'x': optional inputs are not supported when max_batch_size > 0",
        ),
        (
            'max_batch_size: 4\nmodel_warmup { name: "w" batch_size: 8 inputs { key: "x" '
            "value { data_type: TYPE_FP32 dims: [3, 8, 8] zero_data: true } } }",
            "model_warmup 'w': batch_size 8 must be between 1 and 4",
        ),
        (
            'model_warmup { name: "w" inputs { key: "image" '
            "value { data_type: TYPE_FP32 dims: [3, 8, 8] zero_data: true } } }",
            "model_warmup 'w': 'image' is not an input of the model",
        ),
        (
            'model_warmup { name: "w" inputs { key: "x" '
            "value { data_type: TYPE_FP16 dims: [3, 8, 8] zero_data: true } } }",
            "model_warmup 'w' input 'x': data_type TYPE_FP16 but the input is TYPE_FP32",
        ),
        (
            'model_warmup { name: "w" inputs { key: "x" '
            "value { data_type: TYPE_FP32 dims: [3, 8] zero_data: true } } }",
            "model_warmup 'w' input 'x': dims [3, 8] do not fit the input's dims [3, 8, 8]",
        ),
        ('model_warmup { name: "w" }', "model_warmup 'w': no data for input 'x'"),
    ],
)
def test_validation_across_fields(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        autocomplete(parse_config(text, PATH), name="m", signature=BATCHABLE)
    assert str(caught.value) == f"{PATH}: {message}"


def test_warmup_batch_size_without_batching() -> None:
    text = (
        'model_warmup { name: "w" batch_size: 2 inputs { key: "x" '
        "value { data_type: TYPE_FP32 dims: [1, 3, 8, 8] zero_data: true } } }"
    )
    with pytest.raises(ConfigError, match="between 1 and 1 \\(the model does not batch\\)"):
        autocomplete(parse_config(text), name="m", signature=FIXED)
    ok = autocomplete(parse_config(text.replace("2", "1", 1)), name="m", signature=FIXED)
    assert ok.model_warmup[0].batch_size == 1


def test_warmup_may_fix_variable_dims() -> None:
    config = autocomplete(parse_config(RESNET_BATCHING), name="resnet50", signature=RESNET_SIG)
    assert [w.inputs["input"].dims for w in config.model_warmup] == [(3, 224, 224), (3, 64, 64)]


def test_code_built_configs() -> None:
    built = autocomplete(ModelConfig(max_batch_size=8), name="m", signature=BATCHABLE)
    assert built.max_batch_size == 8
    built = ModelConfig(instance_group=[InstanceGroup(count=0)])
    with pytest.raises(ConfigError, match="instance_group 'm_0': count must be >= 1, got 0"):
        autocomplete(built, name="m", signature=BATCHABLE)
    queue = DynamicBatching(default_queue_policy=QueuePolicy(max_queue_size=-1))
    with pytest.raises(ConfigError, match="max_queue_size and default_timeout_microseconds"):
        autocomplete(ModelConfig(dynamic_batching=queue), name="m", signature=BATCHABLE)
    scalar = ModelConfig(inputs=[TensorConfig("x", FP32, (1,), reshape=())])
    with pytest.raises(ConfigError, match=r"input 'x': reshape \[\] \(a scalar\) needs"):
        autocomplete(scalar, name="m", signature=signature([spec("x", ())], [spec("y", ())]))


def test_autocomplete_leaves_its_argument_alone_and_is_idempotent() -> None:
    parsed = parse_config(PARTIAL, PATH)
    before = parse_config(PARTIAL, PATH)
    once = autocomplete(parsed, name="m", signature=BATCHABLE)
    assert parsed == before
    assert autocomplete(once, name="m", signature=BATCHABLE) == once


RESNET_SIG = signature(
    [spec("input", (-1, 3, -1, -1))],
    [spec("logits", (-1, 1000)), spec("embedding", (-1, 2048), "FP16")],
)


# --- JSON form ------------------------------------------------------------------------------


def test_to_json_of_a_completed_config() -> None:
    config = autocomplete(None, name="clf", signature=BATCHABLE)
    assert config.to_json() == {
        "name": "clf",
        "platform": "onnxruntime_onnx",
        "backend": "onnxruntime",
        "version_policy": {"latest": {"num_versions": 1}},
        "max_batch_size": 4,
        "input": [
            {
                "name": "x",
                "data_type": "TYPE_FP32",
                "format": "FORMAT_NONE",
                "dims": [3, 8, 8],
                "is_shape_tensor": False,
                "allow_ragged_batch": False,
                "optional": False,
            }
        ],
        "output": [
            {
                "name": "y",
                "data_type": "TYPE_FP32",
                "dims": [10],
                "label_filename": "",
                "is_shape_tensor": False,
            }
        ],
        "optimization": {
            "execution_accelerators": {
                "gpu_execution_accelerator": [],
                "cpu_execution_accelerator": [],
            }
        },
        "dynamic_batching": {
            "preferred_batch_size": [],
            "max_queue_delay_microseconds": 0,
            "preserve_ordering": False,
            "default_queue_policy": {
                "timeout_action": "REJECT",
                "default_timeout_microseconds": 0,
                "allow_timeout_override": False,
                "max_queue_size": 0,
            },
        },
        "instance_group": [{"name": "clf", "kind": "KIND_CPU", "count": 1, "gpus": []}],
        "default_model_filename": "model.onnx",
        "parameters": {},
        "model_warmup": [],
    }


def test_to_json_of_every_supported_field() -> None:
    doc = autocomplete(
        parse_config(RESNET_BATCHING), name="resnet50", signature=RESNET_SIG, gpu_available=True
    ).to_json()
    assert doc["version_policy"] == {"specific": {"versions": [1, 3]}}
    assert doc["instance_group"] == [
        {"name": "gpu_pool", "kind": "KIND_GPU", "count": 2, "gpus": [0, 1]},
        {"name": "resnet50_1", "kind": "KIND_CPU", "count": 1, "gpus": []},
    ]
    assert doc["dynamic_batching"] == {
        "preferred_batch_size": [8, 16],
        "max_queue_delay_microseconds": 500,
        "preserve_ordering": True,
        "default_queue_policy": {
            "timeout_action": "REJECT",
            "default_timeout_microseconds": 200000,
            "allow_timeout_override": True,
            "max_queue_size": 128,
        },
    }
    assert doc["model_warmup"] == [
        {
            "name": "full batch",
            "batch_size": 32,
            "inputs": {
                "input": {"data_type": "TYPE_FP32", "dims": [3, 224, 224], "random_data": True}
            },
            "count": 2,
        },
        {
            "name": "from file",
            "batch_size": 1,
            "inputs": {
                "input": {
                    "data_type": "TYPE_FP32",
                    "dims": [3, 64, 64],
                    "input_data_file": "warmup/input.raw",
                }
            },
            "count": 1,
        },
    ]
    assert doc["parameters"] == {
        "intra_op_thread_count": {"string_value": "4"},
        "enable_mem_arena": {"string_value": "1"},
    }
    assert doc["default_model_filename"] == "resnet50.onnx"
    assert [o["data_type"] for o in doc["output"]] == ["TYPE_FP32", "TYPE_FP16"]
    trt = autocomplete(
        parse_config(TRT_ON_ORT),
        name="bert",
        signature=signature(
            [spec("input_ids", (-1, -1), "INT64"), spec("attention_mask", (-1, -1), "INT64")],
            [spec("last_hidden_state", (-1, -1, 768))],
        ),
    ).to_json()
    assert trt["optimization"]["execution_accelerators"]["gpu_execution_accelerator"] == [
        {
            "name": "tensorrt",
            "parameters": {
                "precision_mode": "FP16",
                "max_workspace_size_bytes": "1073741824",
                "trt_engine_cache_enable": "1",
                "trt_engine_cache_path": "/cache",
            },
        }
    ]
    all_versions = parse_config(TENSORRT_PLAN).to_json()
    assert all_versions["version_policy"] == {"all": {}}
    assert parse_config(DENSENET).to_json()["output"][0]["reshape"] == {"shape": [1, 1000, 1, 1]}
    scalar = autocomplete(
        None, name="m", signature=signature([spec("n", (-1,))], [spec("s", (-1,))])
    )
    assert scalar.to_json()["input"][0]["reshape"] == {"shape": []}


@pytest.mark.parametrize("text", REALISTIC.values(), ids=REALISTIC.keys())
def test_to_json_is_valid_triton_model_config_json(triton_proto: ModuleType, text: str) -> None:
    """What tritonclient's get_model_config returns (json.loads) and Triton's schema accepts."""
    sigs = {
        "resnet50": RESNET_SIG,
        "bert": signature(
            [spec("input_ids", (-1, -1), "INT64"), spec("attention_mask", (-1, -1), "INT64")],
            [spec("last_hidden_state", (-1, -1, 768))],
        ),
        "yolo_trt": signature(
            [spec("images", (-1, 3, 640, 640), "FP16")], [spec("detections", (-1, -1, 6))]
        ),
        "densenet_onnx": signature(
            [spec("data_0", (1, 3, 224, 224))], [spec("fc6_1", (1, 1000, 1, 1))]
        ),
    }
    parsed = parse_config(text)
    name = parsed.name or "m"
    config = autocomplete(parsed, name=name, signature=sigs.get(name, BATCHABLE))
    doc = config.to_json()
    assert json.loads(json.dumps(doc)) == doc
    message = json_format.ParseDict(doc, triton_proto.ModelConfig())
    assert message.name == name
    assert message.max_batch_size == config.max_batch_size
    assert [list(i.dims) for i in message.input] == [list(t.dims) for t in config.inputs]


@pytest.mark.parametrize("text", REALISTIC.values(), ids=REALISTIC.keys())
def test_config_from_json_reads_back_the_serving_facts(text: str) -> None:
    """What the gateway reads from a function's GET .../config: tensors and batching."""
    config = parse_config(text)
    back = config_from_json(json.loads(json.dumps(config.to_json())), "f/config")
    assert (back.name, back.max_batch_size) == (config.name, config.max_batch_size)
    assert back.inputs == config.inputs
    assert back.outputs == config.outputs
    assert back.dynamic_batching == config.dynamic_batching
    assert back.source == "f/config"


def test_config_from_json_takes_64_bit_integers_as_strings_and_refuses_the_rest() -> None:
    doc = {"name": "m", "max_batch_size": "8",
           "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": ["-1", "4"]}],
           "output": [{"name": "y", "data_type": "TYPE_INT64", "dims": [1],
                       "reshape": {"shape": []}}],
           "dynamic_batching": {"max_queue_delay_microseconds": "100"}}
    config = config_from_json(doc)
    assert config.max_batch_size == 8
    assert config.inputs == [TensorConfig("x", FP32, (-1, 4))]
    assert config.outputs == [TensorConfig("y", INT64, (1,), reshape=())]
    assert config.dynamic_batching == DynamicBatching(max_queue_delay_microseconds=100)
    for bad in ([], {"input": []}, {"name": "m", "input": [{"name": "x", "dims": [1]}]},
                {"name": "m", "output": [{"name": "y", "data_type": "TYPE_X", "dims": [1]}]},
                {"name": "m", "max_batch_size": True},
                {"name": "m", "dynamic_batching": {"default_queue_policy": {
                    "timeout_action": "WAIT"}}}):
        with pytest.raises(ConfigError, match="f: not a model configuration"):
            config_from_json(bad, "f")


def test_an_input_format_is_read_and_given_back_as_triton_does() -> None:
    config = parse_config(DENSENET)
    [data] = config.inputs
    assert data.format == "FORMAT_NCHW" and data.reshape == (1, 3, 224, 224)
    assert config.to_json()["input"][0]["format"] == "FORMAT_NCHW"
    assert config_from_json(config.to_json()).inputs[0].format == "FORMAT_NCHW"


def test_an_image_format_needs_three_dims() -> None:
    assert config_error(
        'input { name: "x" data_type: TYPE_FP32 format: FORMAT_NHWC dims: [224, 224] }'
    ) == f"{PATH}:1: input 'x': format FORMAT_NHWC requires 3 dims (without the batch " \
        "dimension), not [224, 224]"
    assert "expects one of FORMAT_NONE, FORMAT_NHWC, FORMAT_NCHW, got FORMAT_NCDHW" in config_error(
        'input { name: "x" data_type: TYPE_FP32 format: FORMAT_NCDHW dims: [1, 2, 3] }')
