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


def identity_graph(elem_type: int, dims: list[str | int]) -> object:
    """Identity on one tensor of any ONNX type: echoes what the request sent."""
    return helper.make_graph(
        [helper.make_node("Identity", ["IN"], ["OUT"])],
        "identity",
        [helper.make_tensor_value_info("IN", elem_type, dims)],
        [helper.make_tensor_value_info("OUT", elem_type, dims)],
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
