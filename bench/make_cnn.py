"""Generate the ``cnn`` benchmark model: a ResNet-18-style network built with the onnx helper API.

Input ``input`` FP32 [N, 3, 224, 224] (N dynamic), output ``logits`` FP32 [N, 1000]. The layout
is ResNet-18's: a 7×7/2 stem convolution and a 3×3/2 max pool, four stages of two basic blocks
(64, 128, 256, 512 channels; the first block of stages 2-4 downsamples with a strided 3×3 and a
1×1 projection shortcut), global average pooling and a fully connected layer to 1000 classes.
Batch normalisation is folded into the convolutions (each convolution has a bias), as an
inference export would do. Weights are random (He initialisation, fixed seed), so the compute is
real and the activations stay finite; the predictions mean nothing.

    python bench/make_cnn.py [--out bench/models] [--check]

writes ``<out>/cnn/1/model.onnx`` (about 47 MB, generated, not committed) and
``<out>/cnn/config.pbtxt``. ``--check`` times single-image inference on one thread.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SEED = 0
OPSET = 17
STAGES = (64, 128, 256, 512)
BLOCKS_PER_STAGE = 2
CLASSES = 1000

CONFIG = """\
name: "cnn"
platform: "onnxruntime_onnx"
max_batch_size: 64
input [
  {
    name: "input"
    data_type: TYPE_FP32
    dims: [ 3, 224, 224 ]
  }
]
output [
  {
    name: "logits"
    data_type: TYPE_FP32
    dims: [ 1000 ]
  }
]
dynamic_batching { }
"""


class GraphBuilder:
    """Appends nodes and initializers with unique names."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.count = 0

    def name(self, kind: str) -> str:
        self.count += 1
        return f"{kind}_{self.count}"

    def constant(self, kind: str, value: np.ndarray) -> str:
        name = self.name(kind)
        self.initializers.append(numpy_helper.from_array(value.astype(np.float32), name))
        return name

    def node(self, op: str, inputs: list[str], **attrs: Any) -> str:
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def conv(
        self, x: str, c_in: int, c_out: int, kernel: int, stride: int, *, gain: float = 1.0
    ) -> str:
        """A convolution with batch normalisation folded in: He-initialised weight, zero bias."""
        fan_in = c_in * kernel * kernel
        std = gain * np.sqrt(2.0 / fan_in)
        weight = self.rng.standard_normal((c_out, c_in, kernel, kernel)) * std
        bias = np.zeros(c_out)
        pad = kernel // 2
        return self.node(
            "Conv",
            [x, self.constant("w", weight), self.constant("b", bias)],
            kernel_shape=[kernel, kernel],
            strides=[stride, stride],
            pads=[pad, pad, pad, pad],
        )

    def relu(self, x: str) -> str:
        return self.node("Relu", [x])

    def basic_block(self, x: str, c_in: int, c_out: int, stride: int) -> str:
        # The second convolution starts small so each residual sum grows the variance only a
        # little; with eight blocks the logits stay in a sane range.
        y = self.relu(self.conv(x, c_in, c_out, 3, stride))
        y = self.conv(y, c_out, c_out, 3, 1, gain=0.5)
        shortcut = x if stride == 1 and c_in == c_out else self.conv(x, c_in, c_out, 1, stride)
        return self.relu(self.node("Add", [y, shortcut]))


def build(seed: int = SEED) -> onnx.ModelProto:
    g = GraphBuilder(seed)
    x = g.relu(g.conv("input", 3, STAGES[0], 7, 2))
    x = g.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    c_in = STAGES[0]
    for stage, c_out in enumerate(STAGES):
        for block in range(BLOCKS_PER_STAGE):
            stride = 2 if stage > 0 and block == 0 else 1
            x = g.basic_block(x, c_in, c_out, stride)
            c_in = c_out
    x = g.node("GlobalAveragePool", [x])
    x = g.node("Flatten", [x], axis=1)
    fc_weight = g.rng.standard_normal((CLASSES, c_in)) * np.sqrt(1.0 / c_in)
    g.nodes.append(
        helper.make_node(
            "Gemm",
            [x, g.constant("fc_w", fc_weight), g.constant("fc_b", np.zeros(CLASSES))],
            ["logits"],
            name="fc",
            transB=1,
        )
    )
    graph = helper.make_graph(
        g.nodes,
        "cnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, 224, 224])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", CLASSES])],
        g.initializers,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="modelfn-bench",
        doc_string="ResNet-18-style CNN with random weights, for benchmarks only",
    )
    model.ir_version = 8  # readable by onnxruntime 1.18 and later
    onnx.checker.check_model(model)
    return model


def write(out: Path) -> Path:
    model_dir = out / "cnn"
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    path = model_dir / "1" / "model.onnx"
    path.write_bytes(build().SerializeToString())
    (model_dir / "config.pbtxt").write_text(CONFIG)
    return path


def check(path: Path, runs: int = 10) -> None:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(SEED).standard_normal((1, 3, 224, 224)).astype(np.float32)
    (logits,) = session.run(["logits"], {"input": x})
    assert logits.shape == (1, CLASSES) and np.isfinite(logits).all()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(["logits"], {"input": x})
        times.append(time.perf_counter() - start)
    batch4 = np.repeat(x, 4, axis=0)
    (logits4,) = session.run(["logits"], {"input": batch4})
    assert np.allclose(logits4[0], logits[0], rtol=1e-3, atol=1e-3)
    print(
        f"cnn: median {np.median(times) * 1e3:.1f} ms per image on one thread "
        f"(min {min(times) * 1e3:.1f} ms), |logits| max {np.abs(logits).max():.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "models")
    parser.add_argument("--check", action="store_true", help="time one image on one thread")
    args = parser.parse_args()
    path = write(args.out)
    print(f"cnn: wrote {path} ({path.stat().st_size / 1e6:.1f} MB)")
    if args.check:
        check(path)


if __name__ == "__main__":
    main()
