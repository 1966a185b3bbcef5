"""Tiny real ONNX models for tests, written into Triton-style repositories."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from onnx import TensorProto, helper, numpy_helper, save_model

if TYPE_CHECKING:
    from pathlib import Path

OPSET = [helper.make_opsetid("", 17)]


def save(model_dir: Path, graph: object, version: int = 1, config: str | None = None,
         opset: int | None = None) -> Path:
    """Write ``graph`` as ``<model_dir>/<version>/model.onnx`` (and config.pbtxt if given)."""
    path = model_dir / str(version) / "model.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    imports = OPSET if opset is None else [helper.make_opsetid("", opset)]
    model = helper.make_model(graph, opset_imports=imports)  # type: ignore[arg-type]
    model.ir_version = 8
    save_model(model, str(path))
    if config is not None:
        (model_dir / "config.pbtxt").write_text(config)
    return path


def simple_graph(batch: str | int = "N", width: int = 16, scale: float = 1.0) -> object:
    """Triton's 'simple' model: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1.

    ``scale`` multiplies OUTPUT0 so two versions of the model give different answers.
    """
    shape = [batch, width]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape)
              for n in ("INPUT0", "INPUT1")]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape)
               for n in ("OUTPUT0", "OUTPUT1")]
    scale_init = helper.make_tensor("scale", TensorProto.FLOAT, [], [scale])
    nodes = [
        helper.make_node("Add", ["INPUT0", "INPUT1"], ["sum"]),
        helper.make_node("Mul", ["sum", "scale"], ["OUTPUT0"]),
        helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
    ]
    return helper.make_graph(nodes, "simple", inputs, outputs, initializer=[scale_init])


def identity_graph(elem_type: int, dims: list[str | int], inp: str = "IN",
                   out: str = "OUT") -> object:
    """Identity on one tensor of any ONNX type: echoes what the request sent."""
    return helper.make_graph(
        [helper.make_node("Identity", [inp], [out])],
        "identity",
        [helper.make_tensor_value_info(inp, elem_type, dims)],
        [helper.make_tensor_value_info(out, elem_type, dims)],
    )


def failing_graph() -> object:
    """Reshape to a shape given at run time: a bad 'target' input makes ORT fail."""
    return helper.make_graph(
        [helper.make_node("Reshape", ["X", "target"], ["Y"])],
        "failing",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4]),
         helper.make_tensor_value_info("target", TensorProto.INT64, ["N"])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["M"])],
    )


def lookup_graph(table: list[float]) -> object:
    """VALUE = TABLE[INDEX] per row; an INDEX outside the table makes ORT fail the whole batch
    on the CPU provider (the CUDA provider's Gather answers 0 instead: on an H200 it did, so
    a test that needs the failure pins KIND_CPU, which auto-complete would make KIND_GPU)."""
    return helper.make_graph(
        [helper.make_node("Gather", ["table", "INDEX"], ["VALUE"], axis=0)],
        "lookup",
        [helper.make_tensor_value_info("INDEX", TensorProto.INT64, ["N", 1])],
        [helper.make_tensor_value_info("VALUE", TensorProto.FLOAT, ["N", 1])],
        initializer=[helper.make_tensor("table", TensorProto.FLOAT, [len(table)], table)],
    )


def slow_graph(size: int = 1024, steps: int = 24) -> object:
    """y = mean(x expanded to size x size, then multiplied by (1/size) ``steps`` times) = x.

    Fixed-size input, a fraction of a second of CPU per request.
    """
    nodes = [helper.make_node("Expand", ["x", "square"], ["a0"])]
    nodes += [helper.make_node("MatMul", [f"a{i}", "w"], [f"a{i + 1}"]) for i in range(steps)]
    nodes.append(helper.make_node("ReduceMean", [f"a{steps}"], ["y"], keepdims=1))
    w = np.full((size, size), 1.0 / size, np.float32)
    return helper.make_graph(
        nodes,
        "slow",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])],
        initializer=[
            helper.make_tensor("square", TensorProto.INT64, [2], [size, size]),
            helper.make_tensor("w", TensorProto.FLOAT, [size, size], w.tobytes(), raw=True),
        ],
    )


#: a denormal FP32 weight (below 1.18e-38) and a denormal FP64 one (below 2.2e-308)
DENORMAL_FP32 = 1e-39
DENORMAL_FP64 = 1e-310


def denormal_graph() -> object:
    """Y = X @ W (4 x 2) and Y64 = X64 * B: W holds two denormal weights beside normal ones,
    B one of its three. A large X makes a denormal weight's product a normal number, so an
    answer shows whether the weights reached the model flushed."""
    w = np.array([[1.0, DENORMAL_FP32], [0.5, 0.0], [-DENORMAL_FP32, 2.0], [0.0, 0.25]],
                 dtype=np.float32)
    b = np.array([1.0, DENORMAL_FP64, 3.0], dtype=np.float64)
    return helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["Y"]),
         helper.make_node("Mul", ["X64", "B"], ["Y64"])],
        "denormal",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4]),
         helper.make_tensor_value_info("X64", TensorProto.DOUBLE, ["N", 3])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 2]),
         helper.make_tensor_value_info("Y64", TensorProto.DOUBLE, ["N", 3])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")],
    )


# Triton's example models (the server's docs/examples/model_repository, Triton's QA models and
# python_backend's), as ONNX with the names, tensors and configs Triton's clients expect.

def add_sub_graph(elem_type: int, dims: list[str | int], via: int | None = None) -> object:
    """Triton's 'simple' family: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1, computed
    in ``via`` (cast to it and back) where ``elem_type`` cannot do arithmetic: STRING holds
    decimal integers (Triton's simple_string), INT8 wraps as Triton's simple_int8 does."""
    nodes = []
    operands = ["INPUT0", "INPUT1"]
    if via is not None:
        nodes += [helper.make_node("Cast", [name], [f"_{name}"], to=via) for name in operands]
        operands = [f"_{name}" for name in operands]
    results = ["OUTPUT0", "OUTPUT1"] if via is None else ["CAST0", "CAST1"]
    nodes += [helper.make_node("Add", operands, [results[0]]),
              helper.make_node("Sub", operands, [results[1]])]
    if via is not None:
        nodes += [helper.make_node("Cast", [result], [out], to=elem_type)
                  for result, out in zip(results, ("OUTPUT0", "OUTPUT1"), strict=True)]
    return helper.make_graph(
        nodes, "add_sub",
        [helper.make_tensor_value_info(name, elem_type, dims) for name in ("INPUT0", "INPUT1")],
        [helper.make_tensor_value_info(name, elem_type, dims) for name in ("OUTPUT0", "OUTPUT1")],
    )


def pooled_classifier_graph(inp: str, out: str, in_dims: list[str | int],
                            out_dims: list[str | int], classes: int = 1000) -> object:
    """A stand-in image classifier: each channel's mean through a fixed [channels, classes]
    matrix. It keeps a real network's tensor names and shapes (densenet's data_0 and fc6_1,
    resnet50's input and output) without its weights: the answer depends on the image."""
    channels = int(in_dims[1])
    weights = np.random.default_rng(0).standard_normal((channels, classes)).astype(np.float32)
    return helper.make_graph(
        [helper.make_node("GlobalAveragePool", [inp], ["pooled"]),
         helper.make_node("Flatten", ["pooled"], ["means"], axis=1),
         helper.make_node("MatMul", ["means", "weights"], ["scores"]),
         helper.make_node("Reshape", ["scores", "out_shape"], [out])],
        "pooled_classifier",
        [helper.make_tensor_value_info(inp, TensorProto.FLOAT, in_dims)],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, out_dims)],
        [numpy_helper.from_array(weights, "weights"),
         numpy_helper.from_array(np.array([-1, *out_dims[1:]], np.int64), "out_shape")],
    )


def _tensors(kind: str, datatype: str, dims: str, names: tuple[str, ...]) -> str:
    entries = ",\n".join(
        f'  {{\n    name: "{name}"\n    data_type: {datatype}\n    dims: {dims}\n  }}'
        for name in names)
    return f"{kind} [\n{entries}\n]\n"


def _add_sub_config(name: str, datatype: str, max_batch_size: int, dims: str,
                    extra: str = "") -> str:
    return (f'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: {max_batch_size}\n'
            + _tensors("input", datatype, dims, ("INPUT0", "INPUT1"))
            + _tensors("output", datatype, dims, ("OUTPUT0", "OUTPUT1")) + extra)


DENSENET_CONFIG = """name: "densenet_onnx"
platform: "onnxruntime_onnx"
max_batch_size : 0
input [
  {
    name: "data_0"
    data_type: TYPE_FP32
    format: FORMAT_NCHW
    dims: [ 3, 224, 224 ]
    reshape { shape: [ 1, 3, 224, 224 ] }
  }
]
output [
  {
    name: "fc6_1"
    data_type: TYPE_FP32
    dims: [ 1000 ]
    reshape { shape: [ 1, 1000, 1, 1 ] }
    label_filename: "densenet_labels.txt"
  }
]
"""

#: Triton's resnet50_trt (python_backend's preprocessing example), served by ONNX Runtime
RESNET50_CONFIG = """name: "resnet50_trt"
platform: "onnxruntime_onnx"
max_batch_size: 256
input [
{
    name: "input"
    data_type: TYPE_FP32
    dims: [3, -1, -1 ]
}
]
output[
{
    name: "output"
    data_type: TYPE_FP32
    dims: [ 1000 ]
    label_filename: "labels.txt"
}
]
"""

#: custom_identity_int32 as Triton's QA has it, with ONNX Runtime for its identity backend
CUSTOM_IDENTITY_CONFIG = """name: "custom_identity_int32"
platform: "onnxruntime_onnx"
max_batch_size: 1024
version_policy: { latest { num_versions: 1 }}
instance_group [ { kind: KIND_CPU } ]

input [
  {
    name: "INPUT0"
    data_type: TYPE_INT32
    dims: [ -1 ]
  }
]
output [
  {
    name: "OUTPUT0"
    data_type: TYPE_INT32
    dims: [ -1 ]
  }
]
"""

SIMPLE_IDENTITY_CONFIG = """name: "simple_identity"
platform: "onnxruntime_onnx"
max_batch_size: 8

input [
  {
    name: "INPUT0"
    data_type: TYPE_STRING
    dims: [ -1 ]
  }
]
output [
  {
    name: "OUTPUT0"
    data_type: TYPE_STRING
    dims: [ -1 ]
  }
]
"""


def class_labels(classes: int = 1000) -> str:
    """A labels file of ``classes`` lines, for a stand-in classifier without Triton's."""
    return "".join(f"CLASS {index}\n" for index in range(classes))


def save_classifier(model_dir: Path, config: str, labels_file: str, labels: str,
                    inp: str, out: str, in_dims: list[str | int],
                    out_dims: list[str | int]) -> None:
    save(model_dir, pooled_classifier_graph(inp, out, in_dims, out_dims), config=config)
    (model_dir / labels_file).write_text(labels)


def triton_example_repository(repo: Path, densenet_labels: str | None = None) -> list[str]:
    """Lay out Triton's example models that its clients call, each as ONNX with Triton's
    names, tensors and config: simple, simple_int8, simple_string, simple_identity,
    custom_identity_int32, densenet_onnx (with ``densenet_labels``, Triton's labels file,
    when given) and pytorch (python_backend's PyTorch add/sub, which its BLS examples call).
    Returns the models' names."""
    string, int8, int32 = TensorProto.STRING, TensorProto.INT8, TensorProto.INT32
    for name, elem_type, via, datatype in (("simple", int32, None, "TYPE_INT32"),
                                            ("simple_int8", int8, int32, "TYPE_INT8"),
                                            ("simple_string", string, int32, "TYPE_STRING")):
        save(repo / name, add_sub_graph(elem_type, ["N", 16], via),
             config=_add_sub_config(name, datatype, 8, "[ 16 ]"))
    save(repo / "pytorch", add_sub_graph(TensorProto.FLOAT, [4]),
         config=_add_sub_config("pytorch", "TYPE_FP32", 0, "[ 4 ]",
                                "\ninstance_group [{ kind: KIND_CPU }]\n"))
    save(repo / "simple_identity", identity_graph(string, ["N", "W"], "INPUT0", "OUTPUT0"),
         config=SIMPLE_IDENTITY_CONFIG)
    save(repo / "custom_identity_int32", identity_graph(int32, ["N", "W"], "INPUT0", "OUTPUT0"),
         config=CUSTOM_IDENTITY_CONFIG)
    save_classifier(repo / "densenet_onnx", DENSENET_CONFIG, "densenet_labels.txt",
                    densenet_labels or class_labels(), "data_0", "fc6_1",
                    [1, 3, 224, 224], [1, 1000, 1, 1])
    return ["simple", "simple_int8", "simple_string", "pytorch", "simple_identity",
            "custom_identity_int32", "densenet_onnx"]
