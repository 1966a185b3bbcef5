"""Train the ``digits`` example model and write its repository entry and request files.

The model is an sklearn ``MLPClassifier`` (64 → 64 → 32 → 10, ReLU) trained on sklearn's
bundled 8×8 handwritten digits, exported with skl2onnx:

- input ``input``: FP32 [-1, 64], the 8×8 grey levels row by row, scaled to [0, 1]
  (sklearn's ``load_digits`` values divided by 16, so every value is exact in FP32 and JSON);
- output ``label``: INT64 [-1], the predicted digit;
- output ``probabilities``: FP32 [-1, 10], the softmax over the ten digits.

Both outputs are plain tensors (ZipMap disabled), so a V2 client gets the answer directly
(``label``) and the scores when it wants them. Everything is seeded, so running the script
twice writes the same weights and the same predictions.

    python examples/make_digits.py [--out examples]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from skl2onnx import to_onnx
from skl2onnx.common.data_types import FloatTensorType
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier

SEED = 0
HIDDEN = (64, 32)
OPSET = {"": 17, "ai.onnx.ml": 3}  # onnxruntime >= 1.14 runs both
REQUEST_ROWS = 4
MAX_MODEL_BYTES = 1 << 20

CONFIG = """\
name: "digits"
platform: "onnxruntime_onnx"
max_batch_size: 64
input [
  {
    name: "input"
    data_type: TYPE_FP32
    dims: [ 64 ]
  }
]
output [
  {
    name: "label"
    data_type: TYPE_INT64
    dims: [ 1 ]
    reshape: { shape: [ ] }
  },
  {
    name: "probabilities"
    data_type: TYPE_FP32
    dims: [ 10 ]
  }
]
dynamic_batching { }
# sklearn's training leaves 314 of this model's weights denormal (nonzero, below 1.2e-38),
# which x86 CPUs multiply through a slow microcode assist. Zeroed at load, a batch of 16
# runs 5.7x faster on one core. All 1,797 digits get bit-identical answers at every
# batch size; random inputs the same labels, probabilities within 1.5e-7
# (runtime/backends/denormals.py, bench/RESULTS.md).
parameters { key: "flush_denormal_weights" value: { string_value: "1" } }
"""


def load_split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Digits scaled to [0, 1] as FP32, split 75/25 with a fixed seed."""
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=0.25, random_state=SEED, stratify=y
    )
    return x_train, x_test, y_train, y_test


def train(x: np.ndarray, y: np.ndarray) -> MLPClassifier:
    clf = MLPClassifier(
        hidden_layer_sizes=HIDDEN,
        activation="relu",
        solver="adam",
        alpha=1e-4,
        batch_size=64,
        learning_rate_init=1e-3,
        max_iter=500,
        tol=1e-4,
        n_iter_no_change=10,
        random_state=SEED,
    )
    clf.fit(x, y)
    return clf


def export(clf: MLPClassifier) -> onnx.ModelProto:
    model: onnx.ModelProto = to_onnx(
        clf,
        initial_types=[("input", FloatTensorType([None, 64]))],
        target_opset=OPSET,
        options={id(clf): {"zipmap": False}},
    )
    model.graph.name = "digits"
    # Name the dynamic batch dimension so every tool shows it as "batch", not as unknown.
    for value in [*model.graph.input, *model.graph.output]:
        value.type.tensor_type.shape.dim[0].dim_param = "batch"
    model.doc_string = "sklearn MLPClassifier (64-64-32-10) on sklearn's load_digits"
    onnx.checker.check_model(model)
    return model


def check_signature(session: ort.InferenceSession) -> None:
    inputs = {i.name: (i.type, i.shape) for i in session.get_inputs()}
    outputs = {o.name: (o.type, o.shape) for o in session.get_outputs()}
    assert list(inputs) == ["input"], inputs
    assert inputs["input"][0] == "tensor(float)" and inputs["input"][1][1] == 64, inputs
    assert outputs["label"][0] == "tensor(int64)" and len(outputs["label"][1]) == 1, outputs
    assert outputs["probabilities"][0] == "tensor(float)", outputs
    assert outputs["probabilities"][1][1] == 10, outputs
    for _, shape in [*inputs.values(), *outputs.values()]:
        assert shape[0] == "batch", shape


def v2_request(rows: np.ndarray) -> str:
    """A V2 infer request, one input row per line so the file stays readable."""
    lines = ",\n".join("        " + ", ".join(format(float(v), "g") for v in row) for row in rows)
    return (
        "{\n"
        '  "id": "digits-example",\n'
        '  "inputs": [\n'
        "    {\n"
        '      "name": "input",\n'
        f'      "shape": [{rows.shape[0]}, {rows.shape[1]}],\n'
        '      "datatype": "FP32",\n'
        '      "data": [\n'
        f"{lines}\n"
        "      ]\n"
        "    }\n"
        "  ],\n"
        '  "outputs": [{"name": "label"}, {"name": "probabilities"}]\n'
        "}\n"
    )


def write_json(path: Path, value: dict[str, Any]) -> None:
    """One top-level key a line, values compact."""
    items = ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in value.items())
    path.write_text("{\n" + items + "\n}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parent,
        help="folder that receives models/digits/ and requests/ (default: examples/)",
    )
    args = parser.parse_args()
    out: Path = args.out

    x_train, x_test, y_train, y_test = load_split()
    clf = train(x_train, y_train)
    model = export(clf)
    data = model.SerializeToString()
    assert len(data) < MAX_MODEL_BYTES, f"model is {len(data)} bytes"

    model_dir = out / "models" / "digits"
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    (model_dir / "1" / "model.onnx").write_bytes(data)
    (model_dir / "config.pbtxt").write_text(CONFIG)

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    check_signature(session)
    labels, probabilities = session.run(["label", "probabilities"], {"input": x_test})
    accuracy = float(np.mean(labels == y_test))
    sklearn_agree = float(np.mean(labels == clf.predict(x_test)))
    assert np.allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)

    rows = x_test[:REQUEST_ROWS]
    requests = out / "requests"
    requests.mkdir(parents=True, exist_ok=True)
    (requests / "digits.json").write_text(v2_request(rows))
    write_json(
        requests / "digits_expected.json",
        {
            "model_name": "digits",
            "label": [int(v) for v in labels[:REQUEST_ROWS]],
            "true_label": [int(v) for v in y_test[:REQUEST_ROWS]],
        },
    )
    print(
        f"digits: {len(data)} bytes, opset {OPSET['']}, test accuracy {accuracy:.4f} "
        f"on {len(y_test)} rows (onnxruntime agrees with sklearn on {sklearn_agree:.2%}); "
        f"wrote {model_dir} and {requests}"
    )


if __name__ == "__main__":
    main()
