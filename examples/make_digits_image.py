"""Write the ``digits_image`` ensemble's request images and their expected answers, and
measure the ensemble's accuracy on pictures of the whole ``digits`` test split.

Each picture is a row of the test split that ``make_digits.py`` holds out, drawn as a
client's camera or scanner would hand it over: the 8×8 grey levels scaled up smoothly
(bicubic) to a side of 24 to 200 pixels, a margin of paper around it, dark ink on white
paper or light ink on black, saved as PNG or JPEG. ``requests/digits_image/`` gets the
first test row of each digit; ``requests/digits_image_expected.json`` the label and top 3
the ensemble answers for each (computed here with the ensemble's own steps: the
preprocess module beside ``digits_preprocess``'s model.py, the ONNX model in
onnxruntime, then the top 3), and the accuracy on the whole test split drawn so.
Everything is seeded: the script writes the same files every time.

    python examples/make_digits_image.py [--out examples]
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnxruntime as ort
from PIL import Image

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from make_digits import load_split  # noqa: E402  (the sibling script)

if TYPE_CHECKING:
    from types import ModuleType

SEED = 0
TOP = 3
#: the formats the pictures alternate between, with what each is saved with
FORMATS = {"png": ("PNG", {"optimize": False}), "jpg": ("JPEG", {"quality": 90})}


def load_preprocess(models: Path) -> ModuleType:
    """``digits_preprocess``'s image module, as its model.py imports it."""
    path = models / "digits_preprocess" / "1" / "digit_image.py"
    spec = importlib.util.spec_from_file_location("digit_image", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def draw(row: np.ndarray, rng: np.random.Generator, suffix: str) -> bytes:
    """One test row (64 values in [0, 1]) as an encoded picture of a random size, margin
    and polarity."""
    grey = Image.fromarray(np.round(row.reshape(8, 8) * 255).astype(np.uint8), mode="L")
    side = int(rng.integers(24, 201))
    margin = int(rng.integers(0, side // 2 + 1))
    picture = Image.new("L", (side + 2 * margin, side + 2 * margin), 0)
    picture.paste(grey.resize((side, side), Image.BICUBIC), (margin, margin))
    if rng.random() < 0.5:  # dark ink on white paper
        picture = Image.eval(picture, lambda v: 255 - v)
    kind, options = FORMATS[suffix]
    out = io.BytesIO()
    picture.save(out, kind, **options)
    return out.getvalue()


def top(probabilities: np.ndarray) -> list[str]:
    """digits_postprocess's TOP for one row."""
    best = np.argsort(-probabilities, kind="stable")[:TOP]
    return [f"{digit}:{probabilities[digit]:.2f}" for digit in best]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=HERE,
                        help="folder that receives requests/digits_image/ and "
                             "requests/digits_image_expected.json (default: examples/)")
    args = parser.parse_args()
    out: Path = args.out

    preprocess = load_preprocess(HERE / "models")
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(HERE / "models" / "digits" / "1" / "model.onnx"),
                                   options, providers=["CPUExecutionProvider"])
    _, x_test, _, y_test = load_split()
    rng = np.random.default_rng(SEED)
    suffixes = list(FORMATS)

    # the whole test split as pictures: the ensemble's accuracy, against the model's own
    pictures = [draw(row, rng, suffixes[i % 2]) for i, row in enumerate(x_test)]
    rows = np.stack([preprocess.to_row(p) for p in pictures])
    labels = session.run(["label"], {"input": rows})[0]
    direct = session.run(["label"], {"input": x_test})[0]

    # the request images: the first test row of each digit
    folder = out / "requests" / "digits_image"
    folder.mkdir(parents=True, exist_ok=True)
    expected: dict[str, dict[str, object]] = {}
    for digit in range(10):
        index = int(np.flatnonzero(y_test == digit)[0])
        name = f"test{index:03d}.{suffixes[digit % 2]}"
        picture = draw(x_test[index], rng, suffixes[digit % 2])
        (folder / name).write_bytes(picture)
        label, probabilities = session.run(None, {"input": preprocess.to_row(picture)[None]})
        expected[name] = {"label": int(label[0]), "top": top(probabilities[0]),
                          "true_label": digit}
    right = sum(e["label"] == e["true_label"] for e in expected.values())
    accuracy = float(np.mean(labels == y_test))
    images = ",\n".join(f"    {json.dumps(k)}: {json.dumps(v)}" for k, v in expected.items())
    summary = {"images_right": right, "test_split_accuracy": round(accuracy, 4),
               "test_split_rows": len(y_test),
               "digits_accuracy_on_the_rows": round(float(np.mean(direct == y_test)), 4)}
    (out / "requests" / "digits_image_expected.json").write_text(
        '{\n  "model_name": "digits_image",\n  "images": {\n' + images + "\n  },\n"
        + ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in summary.items())
        + "\n}\n")
    sizes = [len((folder / name).read_bytes()) for name in expected]
    print(f"digits_image: {right}/10 request images right ({min(sizes)} to {max(sizes)} "
          f"bytes); the {len(y_test)} test rows as pictures: {accuracy:.4f} "
          f"(the rows themselves: {np.mean(direct == y_test):.4f}); wrote {folder}")


if __name__ == "__main__":
    main()
