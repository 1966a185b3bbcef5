"""Train the ``snippet`` example: a classifier that tells a line of Python from a shell
command and from English prose, with its tokenizer in a Python stage.

The data is modelfn's own: ``--collect`` reads the lines of the project's tracked files
into ``data/snippets.tsv`` (Python code lines, not comments or docstrings; shell lines of
``scripts/``, ``.ci/`` and the ``sh`` blocks of the Markdown files; prose lines of the
Markdown files outside code blocks and tables), at most ``PER_CLASS`` of each, drawn with
a fixed seed. That file is committed; training reads only it, so it writes the same
model every time, however the project's files change.

Training splits the lines 80/20 (seeded, stratified), builds the vocabulary from the
training lines (tokens seen at least twice; ``snippet_tokenizer/1/tokenizer.py`` says how
a line is split) and fits sklearn's ``LogisticRegression`` on token counts. A linear model
on counts is a sum of one weight row per token, so the ONNX model is written with
``onnx.helper`` as exactly that: ``Gather`` the rows of the token ids, ``ReduceSum``,
add the bias, ``Softmax``. It writes:

- ``models/snippet_tokenizer/1/vocab.txt``, beside the tokenizer that reads it;
- ``models/snippet_classifier/1/model.onnx`` and the labels of both that model and the
  ``snippet`` ensemble (``labels.txt``, Triton's ``label_filename``);
- ``requests/snippet.json`` (a V2 request asking for the top class of a few lines) and
  ``requests/snippet_expected.json`` (their classes and the held-out accuracy).

    python examples/make_snippet.py --collect   # re-read the project's lines first
    python examples/make_snippet.py [--out examples]
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import re
import subprocess
import sys
import tokenize
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from make_digits import write_json  # noqa: E402  (the sibling script)

if TYPE_CHECKING:
    from collections.abc import Iterator
    from types import ModuleType

SEED = 0
PER_CLASS = 1000
MIN_CHARS, MAX_CHARS = 12, 160
MIN_COUNT = 2  # a token joins the vocabulary when the training lines hold it this often
DATA = HERE / "data" / "snippets.tsv"
OPSET, IR_VERSION = 17, 8  # onnxruntime >= 1.14 runs both
#: lines of none of the files, for the request file
EXAMPLES = [
    "for name in sorted(os.listdir(path)): print(name.upper())",
    "curl -s localhost:8000/v2/health/ready && echo ready",
    "The function keeps serving while the new version warms up.",
    'with open(path, "rb") as f: data = f.read()',
    "grep -rn TODO src/ | wc -l",
    "A model that fails to load is reported, and the others go on serving.",
]
SHELL_FENCES = ("```sh", "```bash", "```console", "```shell")
#: the commands a line of a comment, a docstring or an untagged Markdown block starts
#: with when it is one for a shell
COMMANDS = frozenset("modelfn python python3 curl pip taskset podman buildah docker kubectl "
                     "git export kill bash cd aws uvicorn wrk perf_analyzer tritonserver "
                     "sudo apt-get cp mv rm mkdir ls cat grep sed awk echo source".split())


def load_tokenizer(models: Path) -> ModuleType:
    """``snippet_tokenizer``'s tokenizer module, as its model.py imports it."""
    path = models / "snippet_tokenizer" / "1" / "tokenizer.py"
    spec = importlib.util.spec_from_file_location("tokenizer", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- collecting the lines ---------------------------------------------------------------

def tracked(root: Path) -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=root, check=True,
                         capture_output=True).stdout
    return [root / name for name in out.decode().split("\0") if name]


def python_lines(path: Path) -> Iterator[tuple[str, str]]:
    """(label, line): the lines that hold code are Python; of the others (comments,
    docstrings), those that are a command (a script's usage line) are shell."""
    source = path.read_text(encoding="utf-8")
    code: set[int] = set()
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
            tokenize.DEDENT, tokenize.STRING, tokenize.ENDMARKER}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in skip and token.start[0] == token.end[0]:
            code.add(token.start[0])
    for number, line in enumerate(source.splitlines(), start=1):
        if number in code:
            yield "python", line
        elif is_command(text := line.strip().removeprefix("# ")) and (
                " -" in text or "/" in text):  # a usage line, not a sentence about one
            yield "shell", text


def is_command(line: str) -> bool:
    """A line that starts with a command this project's docs run (``modelfn``, ``curl``,
    ``python``, a script of ``scripts/``, ...)."""
    first = line.removeprefix("$ ").split(" ", 1)[0]
    return first in COMMANDS or first.startswith(("scripts/", ".venv/bin/", "./"))


def markdown_lines(path: Path) -> Iterator[tuple[str, str]]:
    """(label, line): shell inside ``sh`` blocks, and the commands of untagged blocks;
    prose outside any block and table."""
    fence: str | None = None
    for line in path.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            fence = None if fence is not None else stripped
            continue
        if fence is not None:
            if fence.startswith(SHELL_FENCES) or (fence == "```" and is_command(stripped)):
                yield "shell", stripped.removeprefix("$ ")
        elif not stripped.startswith(("|", "<", "    ")):
            yield "prose", re.sub(r"^(#+|[-*>]|\d+\.)\s+", "", stripped)


def shell_lines(path: Path) -> Iterator[tuple[str, str]]:
    """(label, line): a shell script's lines but comments; a Containerfile's ``RUN``
    commands."""
    heredoc: str | None = None  # the word that ends the here-document (another language)
    for line in path.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if heredoc is not None:
            heredoc = None if stripped == heredoc else heredoc
        elif path.name.startswith("Containerfile"):
            if stripped.startswith("RUN ") and "{" not in stripped:
                yield "shell", stripped.removeprefix("RUN ")
        elif not stripped.startswith("#"):
            if found := re.search(r"<<-?\s*'?\"?(\w+)", stripped):
                heredoc = found.group(1)
            yield "shell", stripped


def is_shell(path: Path) -> bool:
    if path.suffix == ".sh" or path.name.startswith("Containerfile"):
        return True
    if path.suffix or path.parent.name not in ("scripts", ".ci"):
        return False
    first = path.read_bytes()[:64]
    return first.startswith(b"#!") and (b"sh\n" in first or b"bash" in first)


def collect(root: Path) -> list[tuple[str, str]]:
    """(label, line) of every tracked file, each line once (none that two classes hold)."""
    found: dict[str, set[str]] = {}
    for path in tracked(root):
        if path.suffix == ".py" and not path.name.endswith("_pb2.py"):
            pairs = python_lines(path)
        elif path.suffix == ".md":
            pairs = markdown_lines(path)
        elif is_shell(path):
            pairs = shell_lines(path)
        else:
            continue
        for label, line in pairs:
            text = " ".join(line.split())  # no tabs: the file is tab-separated
            if MIN_CHARS <= len(text) <= MAX_CHARS and len(text.split()) >= 2:
                found.setdefault(text, set()).add(label)
    return [(labels.pop(), text) for text, labels in found.items() if len(labels) == 1]


def sample(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    rng = np.random.default_rng(SEED)
    kept = []
    for label in sorted({label for label, _ in pairs}):
        texts = sorted(text for lab, text in pairs if lab == label)
        chosen = rng.choice(len(texts), size=min(PER_CLASS, len(texts)), replace=False)
        kept += [(label, texts[i]) for i in sorted(chosen)]
    return kept


def read_data(path: Path) -> tuple[list[str], list[str]]:
    labels, texts = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        label, text = line.split("\t", 1)
        labels.append(label)
        texts.append(text)
    return labels, texts


# -- training -------------------------------------------------------------------------

def vocabulary(texts: list[str], tok: ModuleType) -> list[str]:
    counts: dict[str, int] = {}
    for text in texts:
        for token in tok.tokens(text)[:tok.LENGTH]:
            counts[token] = counts.get(token, 0) + 1
    kept = sorted((t for t, n in counts.items() if n >= MIN_COUNT),
                  key=lambda t: (-counts[t], t))
    return [tok.PAD, tok.UNKNOWN, *kept]


def counts(ids: np.ndarray, size: int) -> np.ndarray:
    """Each row's count of each token id; the padding (id 0) counts nothing."""
    out = np.zeros((ids.shape[0], size), np.float64)
    np.add.at(out, (np.repeat(np.arange(ids.shape[0]), ids.shape[1]), ids.reshape(-1)), 1.0)
    out[:, 0] = 0.0
    return out


def export(weights: np.ndarray, bias: np.ndarray, length: int) -> onnx.ModelProto:
    """token ids [batch, length] -> probabilities [batch, classes]: the rows of
    ``weights`` the ids pick, summed, plus ``bias``, through a softmax."""
    classes = weights.shape[1]
    graph = helper.make_graph(
        [helper.make_node("Gather", ["weights", "TOKENS"], ["rows"], axis=0),
         helper.make_node("ReduceSum", ["rows", "axis"], ["sums"], keepdims=0),
         helper.make_node("Add", ["sums", "bias"], ["logits"]),
         helper.make_node("Softmax", ["logits"], ["PROBABILITIES"], axis=-1)],
        "snippet_classifier",
        [helper.make_tensor_value_info("TOKENS", TensorProto.INT64, ["batch", length])],
        [helper.make_tensor_value_info("PROBABILITIES", TensorProto.FLOAT,
                                       ["batch", classes])],
        [numpy_helper.from_array(weights.astype(np.float32), "weights"),
         numpy_helper.from_array(bias.astype(np.float32), "bias"),
         numpy_helper.from_array(np.array([1], np.int64), "axis")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="modelfn examples/make_snippet.py")
    model.ir_version = IR_VERSION
    model.doc_string = "bag-of-words logistic regression: Python, shell or prose"
    onnx.checker.check_model(model)
    return model


def v2_request(texts: list[str]) -> str:
    """A V2 infer request for the ensemble, one line of text a row, asking for the top
    class of each (Triton's classification extension)."""
    rows = ",\n".join(f"        {json.dumps(text, ensure_ascii=False)}" for text in texts)
    return (
        "{\n"
        '  "id": "snippet-example",\n'
        '  "inputs": [\n'
        "    {\n"
        '      "name": "TEXT",\n'
        f'      "shape": [{len(texts)}, 1],\n'
        '      "datatype": "BYTES",\n'
        '      "data": [\n'
        f"{rows}\n"
        "      ]\n"
        "    }\n"
        "  ],\n"
        '  "outputs": [{"name": "PROBABILITIES", "parameters": {"classification": 1}}]\n'
        "}\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--collect", action="store_true",
                        help=f"first re-read the project's lines into {DATA.relative_to(HERE)}")
    parser.add_argument("--out", type=Path, default=HERE,
                        help="folder that receives models/ and requests/ (default: examples/)")
    args = parser.parse_args()
    out: Path = args.out

    if args.collect:
        pairs = sample(collect(HERE.parent))
        DATA.parent.mkdir(parents=True, exist_ok=True)
        DATA.write_text("".join(f"{label}\t{text}\n" for label, text in pairs),
                        encoding="utf-8")
    labels, texts = read_data(DATA)
    tok = load_tokenizer(HERE / "models")
    train_x, test_x, train_y, test_y = train_test_split(
        texts, labels, test_size=0.2, random_state=SEED, stratify=labels)
    words = vocabulary(train_x, tok)
    index = {word: i for i, word in enumerate(words)}
    clf = LogisticRegression(C=1.0, class_weight="balanced", max_iter=5000)
    clf.fit(counts(tok.ids(train_x, index), len(words)), train_y)
    weights = clf.coef_.T.copy()
    weights[0] = 0.0  # the padding adds nothing
    model = export(weights, clf.intercept_, tok.LENGTH)

    tokenizer_dir = out / "models" / "snippet_tokenizer" / "1"
    classifier_dir = out / "models" / "snippet_classifier"
    tokenizer_dir.mkdir(parents=True, exist_ok=True)
    (classifier_dir / "1").mkdir(parents=True, exist_ok=True)
    (tokenizer_dir / "vocab.txt").write_text("".join(f"{w}\n" for w in words),
                                             encoding="utf-8")
    data = model.SerializeToString()
    (classifier_dir / "1" / "model.onnx").write_bytes(data)
    label_text = "".join(f"{label}\n" for label in clf.classes_)  # class i on line i
    (classifier_dir / "labels.txt").write_text(label_text)
    (out / "models" / "snippet").mkdir(parents=True, exist_ok=True)
    (out / "models" / "snippet" / "labels.txt").write_text(label_text)

    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    classes = [str(c) for c in clf.classes_]

    def predict(lines: list[str]) -> list[str]:
        (probabilities,) = session.run(None, {"TOKENS": tok.ids(lines, index)})
        return [classes[i] for i in np.argmax(probabilities, axis=1)]

    accuracy = float(np.mean(np.array(predict(test_x)) == np.array(test_y)))
    sklearn = clf.predict(counts(tok.ids(test_x, index), len(words)))
    assert predict(test_x) == list(sklearn), "the ONNX model and sklearn disagree"
    per_class = {label: float(np.mean([p == label for p, y in zip(predict(test_x), test_y,
                                                                   strict=True) if y == label]))
                 for label in classes}
    requests = out / "requests"
    requests.mkdir(parents=True, exist_ok=True)
    (requests / "snippet.json").write_text(v2_request(EXAMPLES), encoding="utf-8")
    write_json(requests / "snippet_expected.json", {
        "model_name": "snippet", "class": predict(EXAMPLES), "labels": classes,
        "held_out_accuracy": round(accuracy, 4), "held_out_lines": len(test_y),
        "held_out_recall": {k: round(v, 4) for k, v in per_class.items()},
    })
    print(f"snippet: {len(texts)} lines ({', '.join(f'{labels.count(c)} {c}' for c in classes)}),"
          f" vocabulary {len(words)}, model {len(data)} bytes; held-out accuracy {accuracy:.4f}"
          f" on {len(test_y)} lines ({', '.join(f'{c} {v:.3f}' for c, v in per_class.items())});"
          f" the examples: {predict(EXAMPLES)}")


if __name__ == "__main__":
    main()
