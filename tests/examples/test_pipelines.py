"""The ``digits_image`` and ``snippet`` examples' own parts: the image preprocessing and the
tokenizer beside their model.py files, the classifier against its vocabulary and labels,
the make scripts reproducing the committed files (seeded), and examples/README.md's
figures against the files the scripts wrote."""

from __future__ import annotations

import importlib.util
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper
from PIL import Image

if TYPE_CHECKING:
    from types import ModuleType

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MODELS = EXAMPLES / "models"
REQUESTS = EXAMPLES / "requests"


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


digit_image = load(MODELS / "digits_preprocess" / "1" / "digit_image.py")
tokenizer = load(MODELS / "snippet_tokenizer" / "1" / "tokenizer.py")


def png(grey: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(grey.astype(np.uint8), mode="L").save(out, "PNG")
    return out.getvalue()


def test_a_digit_reads_the_same_in_either_polarity_size_and_margin() -> None:
    ink = np.zeros((40, 30))
    ink[5:35, 12:18] = 255  # a thick "1"
    rows = [digit_image.to_row(png(ink)), digit_image.to_row(png(255 - ink))]
    big = np.zeros((200, 150))
    big[25:175, 60:90] = 255
    rows.append(digit_image.to_row(png(np.pad(big, 40))))
    for row in rows:
        assert row.shape == (64,) and row.dtype == np.float32
    np.testing.assert_array_equal(rows[1], rows[0])
    np.testing.assert_allclose(rows[2], rows[0], atol=0.01)  # another scale, other rounding
    grid = rows[0].reshape(8, 8)
    # the bar fills the box's height, a fifth of its width, in the middle
    assert (grid[:, 3:5] > 0.75).all() and not grid[:, :3].any() and not grid[:, 5:].any()


def test_a_blank_image_is_zeros_and_garbage_is_not_an_image() -> None:
    assert not digit_image.to_row(png(np.full((20, 20), 255))).any()
    with pytest.raises(digit_image.NotAnImage, match="no image format Pillow reads"):
        digit_image.to_row(b"GIF89a?")
    with pytest.raises(digit_image.NotAnImage, match="broken image"):
        digit_image.to_row(png(np.zeros((50, 50)))[:60])


def test_the_tokenizer_pads_truncates_and_knows_unknown_tokens() -> None:
    vocabulary = tokenizer.read_vocabulary(MODELS / "snippet_tokenizer" / "1" / "vocab.txt")
    assert tokenizer.tokens("Import os, SYS_2 $HOME|x") == [
        "import", "os", ",", "sys_2", "$", "home", "|", "x"]
    ids = tokenizer.ids(["import os", "zzzqqq " * 100, ""], vocabulary)
    assert ids.shape == (3, tokenizer.LENGTH) and ids.dtype == np.int64
    assert ids[0, :2].tolist() == [vocabulary["import"], vocabulary["os"]]
    assert not ids[0, 2:].any() and not ids[2].any()  # padding is id 0
    assert (ids[1] == vocabulary[tokenizer.UNKNOWN]).all()


def test_a_vocabulary_without_its_two_reserved_lines_is_refused(tmp_path: Path) -> None:
    (tmp_path / "vocab.txt").write_text("import\nos\n")
    with pytest.raises(ValueError, match="must be <pad> and <unk>"):
        tokenizer.read_vocabulary(tmp_path / "vocab.txt")


def test_the_classifier_fits_its_vocabulary_labels_and_padding() -> None:
    model = onnx.load(str(MODELS / "snippet_classifier" / "1" / "model.onnx"))
    weights = next(numpy_helper.to_array(t) for t in model.graph.initializer
                   if t.name == "weights")
    words = (MODELS / "snippet_tokenizer" / "1" / "vocab.txt").read_text().splitlines()
    labels = (MODELS / "snippet_classifier" / "labels.txt").read_text().splitlines()
    assert weights.shape == (len(words), len(labels))
    assert not weights[0].any()  # the padding adds nothing
    assert labels == (MODELS / "snippet" / "labels.txt").read_text().splitlines()
    assert sorted(labels) == ["prose", "python", "shell"]
    session = ort.InferenceSession(str(MODELS / "snippet_classifier" / "1" / "model.onnx"),
                                   providers=["CPUExecutionProvider"])
    # padding alone is the bias alone: as many tokens as the line has, no more
    ids = tokenizer.ids(["def f(x): return x"], tokenizer.read_vocabulary(
        MODELS / "snippet_tokenizer" / "1" / "vocab.txt"))
    (probabilities,) = session.run(None, {"TOKENS": ids})
    assert labels[int(probabilities.argmax())] == "python"


def test_readme_gives_the_measured_accuracies() -> None:
    readme = (EXAMPLES / "README.md").read_text()
    image = json.loads((REQUESTS / "digits_image_expected.json").read_text())
    snippet = json.loads((REQUESTS / "snippet_expected.json").read_text())
    for figure in (f"{image['test_split_accuracy']:.1%}", f"{image['images_right']} of the 10",
                   f"{snippet['held_out_accuracy']:.1%}", f"{snippet['held_out_lines']} "):
        assert figure in readme, figure


def run(script: str, out: Path) -> str:
    done = subprocess.run([sys.executable, str(EXAMPLES / script), "--out", str(out)],
                          check=True, capture_output=True, text=True)
    return done.stdout


@pytest.mark.slow
def test_make_digits_image_writes_the_committed_images_and_answers(tmp_path: Path) -> None:
    run("make_digits_image.py", tmp_path)
    name = "digits_image_expected.json"
    assert (tmp_path / "requests" / name).read_text() == (REQUESTS / name).read_text()
    made = sorted(p.name for p in (tmp_path / "requests" / "digits_image").iterdir())
    assert made == sorted(p.name for p in (REQUESTS / "digits_image").iterdir())
    for file in made:
        new = np.asarray(Image.open(tmp_path / "requests" / "digits_image" / file))
        old = np.asarray(Image.open(REQUESTS / "digits_image" / file))
        # PNG is lossless; another libjpeg may round a JPEG's pixels another way
        assert new.shape == old.shape and np.abs(new.astype(int) - old).max() <= (
            0 if file.endswith(".png") else 4), file


@pytest.mark.slow
def test_make_snippet_trains_the_committed_model_from_the_committed_lines(
        tmp_path: Path) -> None:
    run("make_snippet.py", tmp_path)
    for path in ("models/snippet_tokenizer/1/vocab.txt", "models/snippet_classifier/labels.txt",
                 "models/snippet/labels.txt", "requests/snippet.json",
                 "requests/snippet_expected.json"):
        assert (tmp_path / path).read_text() == (EXAMPLES / path).read_text(), path

    def weights(root: Path) -> np.ndarray:
        model = onnx.load(str(root / "models" / "snippet_classifier" / "1" / "model.onnx"))
        return np.concatenate([numpy_helper.to_array(t).ravel()
                               for t in model.graph.initializer])

    # another BLAS moves lbfgs's last bits, never an answer (snippet_expected.json)
    np.testing.assert_allclose(weights(tmp_path), weights(EXAMPLES), atol=1e-4)


@pytest.mark.slow
def test_collect_reads_each_kind_of_line_from_the_project() -> None:
    make_snippet = load(EXAMPLES / "make_snippet.py")
    pairs = make_snippet.collect(EXAMPLES.parent)
    kinds = {label: [t for lab, t in pairs if lab == label] for label in ("prose", "python",
                                                                            "shell")}
    assert {label for label, _ in pairs} == set(kinds)
    assert all(len(texts) >= 200 for texts in kinds.values()), {k: len(v) for k, v in
                                                                 kinds.items()}
    assert "import numpy as np" in kinds["python"]
    assert all("\t" not in text and text == text.strip() for _, text in pairs)
    labels, texts = make_snippet.read_data(make_snippet.DATA)
    assert set(labels) == set(kinds) and len(texts) == len(set(texts))
