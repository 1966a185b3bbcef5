"""`modelfn invoke` as a user runs it (a process) against a real `modelfn serve`: JSON, binary,
.npy and inline requests, outputs equal to onnxruntime's, and every failure a clear line
with its exit code."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnxruntime as ort
import pytest
from servers import Server, free_port

if TYPE_CHECKING:
    from collections.abc import Iterator

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
REQUEST_FILE = EXAMPLES / "requests" / "digits.json"
REQUEST = json.loads(REQUEST_FILE.read_text())
ROWS = np.array(REQUEST["inputs"][0]["data"], dtype=np.float32).reshape(4, 64)


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    running = Server(EXAMPLES / "models")
    running.wait_ready()
    yield running
    running.stop()


def invoke(*args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "modelfn.cli.main", "invoke", *args],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == code, done.stdout + done.stderr
    return done


def expected() -> dict[str, np.ndarray]:
    session = ort.InferenceSession(str(EXAMPLES / "models" / "digits" / "1" / "model.onnx"))
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, {"input": ROWS}), strict=True))


@pytest.mark.parametrize("binary", [False, True])
def test_json_output_equals_onnxruntime(server: Server, binary: bool) -> None:
    out = invoke(f"http://{server.url}", "-m", "digits", "--input", str(REQUEST_FILE),
                 "--output", "json", *(["--binary"] if binary else []))
    doc = json.loads(out.stdout)  # stdout holds only the V2 response
    assert doc["model_name"] == "digits" and doc["model_version"] == "1"
    outputs = {o["name"]: o for o in doc["outputs"]}
    want = expected()
    assert outputs["label"]["data"] == want["label"].ravel().tolist()
    np.testing.assert_allclose(outputs["probabilities"]["data"],
                               want["probabilities"].ravel(), rtol=1e-6)


def test_npy_and_inline_inputs_and_the_table(server: Server, tmp_path: Path) -> None:
    np.save(tmp_path / "rows.npy", ROWS)
    table = invoke(server.url, "-m", "digits", "--input", str(tmp_path / "rows.npy"),
                   "--binary").stdout
    assert "digits version 1" in table and "[2, 0, 4, 9]" in table
    inline = invoke(server.url, "-m", "digits", "--version", "1", "--data",
                    json.dumps({"input": ROWS[:1].tolist()}), "--output", "json").stdout
    assert json.loads(inline)["outputs"][0]["data"] == [2]


@pytest.mark.parametrize(("args", "code", "message"), [
    (["-m", "nope", "--data", '{"inputs": [{"name": "input", "datatype": "FP32", '
      '"shape": [1, 64], "data": [0]}]}'], 2, "1 values for shape [1, 64]"),
    (["-m", "nope", "--input", str(REQUEST_FILE)], 3, "HTTP 404: Request for unknown model"),
    (["-m", "digits", "--data", '{"input": [[1, 2]]}'], 2, "HTTP 400: unexpected shape"),
    (["-m", "digits", "--data", '{"pixels": [[1]]}'], 2, "the model has no input pixels"),
    (["-m", "digits", "--data", "{bad"], 2, "--data is not JSON"),
    (["-m", "digits", "--input", "/no/such.json"], 2, "no such file"),
    (["-m", "digits"], 2, "give the request with --input FILE or --data JSON"),
    (["-m", "digits", "--input", str(REQUEST_FILE), "--auth", "key"], 2, "needs an API key"),
])
def test_errors_are_one_line_with_an_exit_code(server: Server, args: list[str], code: int,
                                              message: str) -> None:
    done = invoke(server.url, *args, code=code)
    assert message in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_a_refused_connection_says_so() -> None:
    done = invoke(f"http://127.0.0.1:{free_port()}", "-m", "digits", "--input",
                  str(REQUEST_FILE), code=5)
    assert "refused the connection" in done.stderr
