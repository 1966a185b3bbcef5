"""`modelfn invoke` as a user runs it (a process) against a real `modelfn serve`: JSON, binary,
.npy and inline requests, outputs equal to onnxruntime's, and every failure a clear line
with its exit code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnxruntime as ort
import pytest
from faulty_http import LoopbackHttpServer
from onnx import TensorProto
from onnx_models import identity_graph, save
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


@pytest.fixture(scope="module")
def uint8_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """`modelfn serve` of a UINT8 identity model, ``u8``."""
    repo = tmp_path_factory.mktemp("typed")
    save(repo / "u8", identity_graph(TensorProto.UINT8, ["N", 3]))
    running = Server(repo)
    running.wait_ready()
    yield running
    running.stop()


def invoke(*args: str, code: int = 0, env: dict[str, str] | None = None
           ) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "modelfn.cli.main", "invoke", *args],
                          capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in os.environ.items() if not k.startswith("MODELFN_")}
                          | (env or {}))
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


@pytest.mark.parametrize("binary", [False, True])
def test_a_request_documents_id_outputs_and_parameters_are_sent(server: Server,
                                                                binary: bool) -> None:
    """The answer is the one the server gives that document (curl -d @FILE): its id comes
    back and only the outputs it asks for (they used to be dropped)."""
    document = {**json.loads(REQUEST_FILE.read_text()), "id": "mine-7",
                "outputs": [{"name": "label"}], "parameters": {"priority": 1}}
    out = invoke(server.url, "-m", "digits", "--data", json.dumps(document), "--output",
                 "json", *(["--binary"] if binary else []))
    doc = json.loads(out.stdout)
    assert doc["id"] == "mine-7"
    assert [o["name"] for o in doc["outputs"]] == ["label"]
    assert doc["outputs"][0]["data"] == expected()["label"].ravel().tolist()


@pytest.mark.parametrize("timeout", ["0", "-1"])
def test_a_timeout_that_is_not_positive_is_a_usage_error(server: Server, timeout: str) -> None:
    done = invoke(server.url, "-m", "digits", "--input", str(REQUEST_FILE), "--timeout",
                  timeout, code=2)
    assert "Invalid value for '--timeout'" in done.stderr and "Traceback" not in done.stderr


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


def one_error_line(done: subprocess.CompletedProcess[str], message: str) -> None:
    assert done.stderr.startswith("Error: ") and done.stderr.count("\n") == 1, done.stderr
    assert message in done.stderr and done.stdout == ""


@pytest.mark.parametrize(("tensor", "message"), [
    ({"name": "input", "shape": [1, 64], "datatype": "FP32", "data": ["a"] * 64},
     "input 'input': its data are not FP32 values: could not convert string to float: 'a'"),
    ({"shape": [1, 64], "datatype": "FP32", "data": [0] * 64}, "inputs[0] has no name"),
    ({"name": "input", "shape": [1, 64], "datatype": "FP32", "data": [[0] * 63, [0]]},
     "input 'input': its nested lists have different lengths"),
    ({"name": "input", "shape": [1, 64], "datatype": "FP99", "data": [0] * 64},
     "input 'input' has unknown datatype 'FP99'"),
    ({"name": "input", "shape": "1x64", "datatype": "FP32", "data": [0] * 64},
     "input 'input' has shape '1x64', not a list of dimensions"),
    ({"name": "input", "shape": [1, 64], "datatype": "FP32"}, "input 'input' has no data"),
    ("input", "inputs[0] is a string, not an object"),
])
def test_a_bad_request_document_is_one_usage_error(server: Server, tensor: object,
                                                   message: str) -> None:
    done = invoke(server.url, "-m", "digits", "--data", json.dumps({"inputs": [tensor]}),
                  code=2)
    one_error_line(done, f"Error: --data: {message}")


def test_inputs_that_are_not_a_list_are_one_usage_error(server: Server) -> None:
    done = invoke(server.url, "-m", "digits", "--data", '{"inputs": 5}', code=2)
    one_error_line(done, 'Error: --data: expected a V2 request, {"inputs": [')


def test_a_value_out_of_the_inputs_range_is_one_usage_error(uint8_server: Server) -> None:
    done = invoke(uint8_server.url, "-m", "u8", "--data", '{"IN": [[300, -1, 2]]}', code=2)
    one_error_line(done, "Error: --data: input 'IN': a value is out of range for UINT8")
    fits = invoke(uint8_server.url, "-m", "u8", "--data", '{"IN": [[255, 0, 2]]}',
                  "--output", "json")
    assert json.loads(fits.stdout)["outputs"][0]["data"] == [255, 0, 2]


# --- answers that are not V2 ----------------------------------------------------------------

METADATA = {"name": "m", "versions": ["1"], "platform": "onnxruntime_onnx",
            "inputs": [{"name": "input", "datatype": "FP32", "shape": [-1, 4]}],
            "outputs": [{"name": "output", "datatype": "FP32", "shape": [-1, 1]}]}
GOOD = (200, json.dumps({"model_name": "m", "outputs": [
    {"name": "output", "datatype": "FP32", "shape": [1, 1], "data": [10.0]}]}).encode(), {})
PROXY_502 = (502, b"<html>\n<head><title>502 Bad Gateway</title></head>\n<body>\n<center>"
                  b"<h1>502 Bad Gateway</h1></center>\n</body>\n</html>\n",
             {"content-type": "text/html"})
HTML = (200, b"<html><body>Welcome to nginx!</body></html>", {"content-type": "text/html"})
Answer = tuple[int, bytes, dict[str, str]]


class CannedV2(LoopbackHttpServer):
    """A real HTTP server on loopback that answers each model's metadata and infer calls
    with canned answers: what a proxy, another service or a broken server sends back.
    With ``key`` it answers 401 to a call without ``Authorization: Bearer <key>``."""

    def __init__(self, infer: dict[str, Answer], metadata: dict[str, Answer] | None = None,
                 key: str | None = None) -> None:
        self.paths: list[str] = []
        canned = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _answer(self, answers: dict[str, Answer], default: Answer) -> None:
                canned.paths.append(self.path)
                parts = self.path.split("?")[0].split("/")
                model = parts[parts.index("models") + 1]
                status, body, headers = answers.get(model, default)
                if key is not None and self.headers.get("authorization") != f"Bearer {key}":
                    status, body, headers = 401, b'{"error": "an API key is required"}', {}
                self.send_response(status)
                for name, value in {"content-type": "application/json", **headers}.items():
                    self.send_header(name, value)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self._answer(metadata or {}, (200, json.dumps(METADATA).encode(), {}))

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                self._answer(infer, GOOD)

        super().__init__(Handler)


REQUEST = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 4],
                                  "data": [1, 2, 3, 4]}]})


@pytest.mark.parametrize(("answer", "problem"), [
    ((200, b"[1, 2]", {}), "the answer is an array, not an object"),
    ((200, b'{"outputs": [{"datatype": "FP32", "shape": [1], "data": [1]}]}', {}),
     "an output has no name"),
    ((200, b'{"outputs": []}', {"inference-header-content-length": "abc"}),
     "inference-header-content-length 'abc' is not a byte count"),
    ((200, b'{"outputs": []}', {"inference-header-content-length": "999"}),
     "inference-header-content-length 999 is outside the 15-byte body"),
    ((200, b'{"outputs": null}', {}), "its outputs are null, not a list"),
    ((200, b'{"outputs": [{"name": "o", "datatype": "FP32", "shape": [2], "data": ["a", "b"]}]}',
      {}), "output 'o': its data are not FP32 values"),
    ((200, b'{"outputs": [{"name": "o", "datatype": "FP32", "shape": [1], "data": null}]}', {}),
     "output 'o': its data are null, not a list"),
    (HTML, "an HTML page (Welcome to nginx!)"),
])
def test_an_answer_that_is_not_v2_is_one_line_naming_the_url(answer: Answer,
                                                             problem: str) -> None:
    with CannedV2({"m": answer}) as canned:
        done = invoke(canned.url, "-m", "m", "--data", REQUEST, code=5)
    one_error_line(done, f"Error: {canned.url}/v2/models/m/infer did not answer with V2 "
                         f"JSON: {problem}")


@pytest.mark.parametrize("source", ["npy", "named"])
def test_metadata_that_is_not_v2_is_the_servers_fault_not_the_inputs(
    tmp_path: Path, source: str,
) -> None:
    np.save(tmp_path / "x.npy", np.ones((1, 4), np.float32))
    args = (["--input", str(tmp_path / "x.npy")] if source == "npy"
            else ["--data", '{"input": [[1, 2, 3, 4]]}'])
    bad_metadata = {"inputs": [{"name": "input"}]}
    with CannedV2({}, metadata={"html": HTML,
                                "bad": (200, json.dumps(bad_metadata).encode(), {})}) as canned:
        html = invoke(canned.url, "-m", "html", *args, code=5)
        bad = invoke(canned.url, "-m", "bad", *args, code=5)
    one_error_line(html, f"Error: {canned.url}/v2/models/html did not answer with V2 JSON: "
                         "an HTML page (Welcome to nginx!)")
    one_error_line(bad, f"Error: {canned.url}/v2/models/bad did not answer with V2 JSON: a "
                        "metadata input is not {name, datatype, shape}")


def test_a_proxys_error_page_is_one_line_and_a_502_exits_as_unavailable() -> None:
    long_error = (500, json.dumps({"error": "line one\nline two " + "x" * 1000}).encode(), {})
    with CannedV2({"m": PROXY_502, "long": long_error, "empty": (502, b"", {})}) as canned:
        page = invoke(canned.url, "-m", "m", "--data", REQUEST, code=5)
        long = invoke(canned.url, "-m", "long", "--data", REQUEST, code=1)
        empty = invoke(canned.url, "-m", "empty", "--data", REQUEST, code=5)
    assert page.stderr == "Error: HTTP 502: 502 Bad Gateway\n"
    one_error_line(long, "Error: HTTP 500: line one line two xxx")
    assert len(long.stderr) < 400 and long.stderr.endswith("...\n")
    assert empty.stderr == "Error: HTTP 502: Bad Gateway\n"


# --- auth -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "env"), [
    (["--api-key", "alpha"], {}),
    ([], {"MODELFN_API_KEY": "alpha"}),
])
def test_an_api_key_is_sent_without_auth_key(args: list[str], env: dict[str, str]) -> None:
    with CannedV2({}, key="alpha") as canned:
        done = invoke(canned.url, "-m", "m", "--data", '{"input": [[1, 2, 3, 4]]}', *args,
                      env=env)
        keyless = invoke(canned.url, "-m", "m", "--data", REQUEST, code=6)
    assert "output" in done.stdout and "[10.0]" in done.stdout
    assert keyless.stderr == "Error: HTTP 401: an API key is required\n"


@pytest.mark.parametrize(("args", "env"), [
    (["--auth", "none", "--api-key", "alpha"], {}),
    (["--auth", "iam"], {"MODELFN_API_KEY": "alpha"}),
])
def test_an_api_key_beside_another_auth_is_refused(args: list[str], env: dict[str, str]) -> None:
    with CannedV2({}, key="alpha") as canned:
        done = invoke(canned.url, "-m", "m", "--data", REQUEST, *args, env=env, code=2)
        assert canned.paths == []  # refused before any call
    one_error_line(done, "is sent only with --auth key, not --auth ")


# --- URLs -------------------------------------------------------------------------------------


def test_a_base_url_with_a_query_keeps_it_after_the_v2_path(server: Server) -> None:
    out = invoke(f"http://{server.url}/?x=1", "-m", "digits", "--input", str(REQUEST_FILE),
                 "--output", "json")
    assert json.loads(out.stdout)["model_name"] == "digits"
    with CannedV2({}) as canned:
        invoke(f"{canned.url}/prefix/?token=a%2Fb", "-m", "m", "--version", "1", "--data",
               '{"input": [[1, 2, 3, 4]]}')
    assert canned.paths == ["/prefix/v2/models/m/versions/1?token=a%2Fb",
                            "/prefix/v2/models/m/versions/1/infer?token=a%2Fb"]


@pytest.mark.parametrize("path", ["/v2/models/digits/infer", "/v2/models/digits",
                                  "/v2/models/digits/versions/1/infer", "/v2/models/digits/",
                                  "/v2"])
@pytest.mark.parametrize("model", [[], ["-m", "digits"]])
def test_a_model_or_infer_url_pasted_whole_names_the_model(server: Server, path: str,
                                                           model: list[str]) -> None:
    if path == "/v2" and not model:
        done = invoke(f"http://{server.url}{path}", "--input", str(REQUEST_FILE), code=2)
        one_error_line(done, "give the model with --model NAME, or a model's URL")
        return
    out = invoke(f"http://{server.url}{path}", *model, "--input", str(REQUEST_FILE),
                 "--output", "json")
    doc = json.loads(out.stdout)
    assert doc["model_name"] == "digits" and doc["model_version"] == "1"


def test_a_pasted_url_keeps_its_prefix_query_and_version() -> None:
    with CannedV2({}) as canned:
        invoke(f"{canned.url}/prefix/v2/models/m/versions/3/infer?token=a%2Fb", "--data",
               '{"input": [[1, 2, 3, 4]]}')
    assert canned.paths == ["/prefix/v2/models/m/versions/3?token=a%2Fb",
                            "/prefix/v2/models/m/versions/3/infer?token=a%2Fb"]


@pytest.mark.parametrize(("args", "option"), [
    (["-m", "other"], "--model other"),
    (["--version", "2"], "--version 2"),
])
def test_an_option_that_conflicts_with_the_pasted_url_is_refused(args: list[str],
                                                                 option: str) -> None:
    with CannedV2({}) as canned:
        done = invoke(f"{canned.url}/v2/models/m/versions/1/infer", *args, "--data", REQUEST,
                      code=2)
        assert canned.paths == []  # refused before any call
    one_error_line(done, f"Error: {option} conflicts with the URL, which names ")


def test_the_urls_model_wins_over_the_environments(server: Server) -> None:
    out = invoke(f"http://{server.url}/v2/models/digits/infer", "--input", str(REQUEST_FILE),
                 "--output", "json", env={"MODELFN_MODEL": "other"})
    assert json.loads(out.stdout)["model_name"] == "digits"


def test_an_unsigned_request_to_an_aws_iam_function_url_hints_at_auth_iam(
        tmp_path: Path) -> None:
    """A real AWS_IAM function URL of the local Lambda refuses an unsigned request with 403:
    the error says to sign it; signed (--auth iam), the function answers."""
    import io
    import zipfile

    from modelfn.localstack.lambda_platform import LocalLambda

    code = io.BytesIO()
    with zipfile.ZipFile(code, "w") as archive:
        archive.write(Path(__file__).parents[1] / "localstack" / "handlers" / "echo.py",
                      "echo.py")
    with LocalLambda() as aws:
        role = aws.client("iam").create_role(RoleName="echo",
                                             AssumeRolePolicyDocument="{}")["Role"]["Arn"]
        lam = aws.client("lambda")
        lam.create_function(FunctionName="echo", Role=role, Runtime="python3.12",
                            Handler="echo.mirror", Code={"ZipFile": code.getvalue()})
        url = lam.create_function_url_config(FunctionName="echo",
                                             AuthType="AWS_IAM")["FunctionUrl"]
        key, secret = next(iter(aws.credentials.items()))
        credentials = {"AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret,
                       "AWS_DEFAULT_REGION": aws.region}
        unsigned = invoke(url, "-m", "m", "--data", REQUEST, env=credentials, code=7)
        # past the signature check: the echo function answers its own 201, not V2
        signed = invoke(url, "-m", "m", "--data", REQUEST, "--auth", "iam", env=credentials,
                        code=1)
    one_error_line(unsigned, "Error: HTTP 403: ")
    assert "the request was not signed: an AWS_IAM function URL needs --auth iam" \
        in unsigned.stderr
    assert signed.stderr.startswith("Error: HTTP 201: ") and "--auth" not in signed.stderr
