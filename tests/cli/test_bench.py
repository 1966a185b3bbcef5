"""``modelfn bench``'s table and warnings on given results: the client-bound verdict shows.
Against a real ``modelfn serve`` and small canned servers: every failure is one line with
``invoke``'s exit code, a run that completed no request fails, and the client's auth."""

from __future__ import annotations

import json
import shutil
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from click.testing import CliRunner
from faulty_http import LoopbackHttpServer
from onnx import TensorProto
from onnx_models import identity_graph, save
from rich.console import Console
from servers import Server

from modelfn.cli import bench
from modelfn.cli.invoke import invoke
from modelfn.client.loadgen import LoadResult

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from click.testing import Result

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def result(concurrency: int, client_cpu: float | None) -> LoadResult:
    return LoadResult(
        model="digits", concurrency=concurrency, binary=False, duration_s=5.0, requests=50_000,
        rows=50_000, errors=0, req_per_s=10_000.0, rows_per_s=10_000.0, p50_ms=3.0,
        p90_ms=4.0, p99_ms=6.0, mean_ms=3.1, avg_batch_size=12.0, client_cpu=client_cpu,
    )


def rendered(results: list[LoadResult]) -> str:
    console = Console(width=200, record=True)
    console.print(bench.results_table(results))
    return console.export_text()


def test_table_marks_a_client_bound_run_as_a_lower_bound() -> None:
    text = rendered([result(1, 0.35), result(32, 0.97), result(8, None)])
    lines = {line.split()[1]: line for line in text.splitlines() if line.strip().startswith("json")}
    assert "client CPU" in text
    assert "35%" in lines["1"] and "≥" not in lines["1"] and "!" not in lines["1"]
    assert "97%!" in lines["32"] and "≥10,000.0" in lines["32"]
    assert lines["8"].rstrip().endswith("-")


def test_command_warns_when_its_client_was_the_bottleneck(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def fake_run_bench(url: str, model: str, **kwargs: Any) -> list[LoadResult]:
        return [result(1, 0.3), result(32, 0.95)]

    monkeypatch.setattr(bench, "run_bench", fake_run_bench)
    out = CliRunner().invoke(bench.bench_command, ["127.0.0.1:9", "-m", "digits", "-c", "1,32"])
    assert out.exit_code == 0, out.output
    assert "warning: c=32: the load generator used 95% of its CPU core" in out.stderr
    assert "c=1:" not in out.stderr


def test_command_is_quiet_when_the_client_had_room(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench, "run_bench", lambda url, model, **kw: [result(32, 0.5)])
    out = CliRunner().invoke(bench.bench_command, ["127.0.0.1:9", "-m", "digits", "-c", "32"])
    assert out.exit_code == 0, out.output
    assert "warning" not in out.stderr


# --- against servers --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """`modelfn serve` of digits (max_batch_size 64) and an FP16 identity model, ``f16``."""
    repo = tmp_path_factory.mktemp("models")
    shutil.copytree(EXAMPLES / "models" / "digits", repo / "digits")
    save(repo / "f16", identity_graph(TensorProto.FLOAT16, ["N", 3]))
    running = Server(repo)
    running.wait_ready()
    yield running
    running.stop()


def run(url: str, *args: str, code: int = 0, env: Mapping[str, str | None] | None = None,
        rows: Path | None = None) -> Result:
    """``modelfn bench`` for 0.3 s at c=1; ``rows``: where its --json goes."""
    out = CliRunner().invoke(bench.bench_command, [
        url, "-c", "1", "--duration", "0.3", "--warmup", "0", *args,
        *(["--json", str(rows)] if rows else [])], env=env)
    assert out.exit_code == code, out.output
    assert "Traceback" not in out.output
    return out


def completed(rows: Path) -> int:
    (row,) = json.loads(rows.read_text())
    assert row["errors"] == 0
    return int(row["requests"])


def error_line(out: Result) -> str:
    """The one error line at the end of stderr, the table and no other error before it."""
    lines = out.stderr.splitlines()
    assert lines and lines[-1].startswith("Error: ") and "Error" not in "".join(lines[:-1])
    return lines[-1]


@pytest.mark.parametrize(("name", "content", "message"), [
    ("bad.json", b"{nope", "Error: bad.json: cannot read the inputs: not JSON: Expecting "
                           "property name"),
    ("obj.npy", None, "Error: obj.npy: cannot read the inputs: Object arrays cannot be loaded"),
    ("text.npy", np.array([["a", "b", "c", "d"]]), "Error: text.npy: its <U1 values are not "
                                                   "FP32 values"),
    ("doc.json", b'{"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 64], '
                 b'"data": [[1, 2], [3]]}]}',
     "Error: doc.json: input 'input': its nested lists have different lengths"),
])
def test_a_bad_input_file_is_one_usage_error(server: Server, tmp_path: Path, name: str,
                                             content: bytes | np.ndarray | None,
                                             message: str) -> None:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        np.save(path, np.array([{"a": 1}], dtype=object) if content is None else content,
                allow_pickle=True)
    out = run(server.url, "-m", "digits", "--input", str(path), code=2)
    assert out.stdout == "" and out.stderr.startswith(message)


def test_json_into_a_missing_directory_is_refused_before_the_run(server: Server,
                                                                 tmp_path: Path) -> None:
    out = run(server.url, "-m", "digits", code=2, rows=tmp_path / "nodir" / "rows.json")
    assert out.stdout == ""  # nothing measured
    assert error_line(out) == (f"Error: --json {tmp_path / 'nodir' / 'rows.json'}: "
                               f"{tmp_path / 'nodir'} is not a directory")


def test_a_run_that_completed_no_request_fails_with_its_errors_status(
    server: Server, tmp_path: Path,
) -> None:
    out = run(server.url, "-m", "digits", "-b", "100", code=2, rows=tmp_path / "rows.json")
    assert "req/s" in out.stdout  # the table still shows the run
    assert error_line(out).startswith("Error: no request completed at c=1: ")
    assert "failed; first: HTTP 400: input 'input' has batch size 100" in out.stderr
    (row,) = json.loads((tmp_path / "rows.json").read_text())
    assert row["requests"] == 0 and row["errors"] > 0 and row["error_status"] == 400


def test_fp16_without_binary_is_refused_up_front(server: Server, tmp_path: Path) -> None:
    out = run(server.url, "-m", "f16", code=2)
    assert out.stdout == "" and out.stderr == (
        "Error: input 'IN' is FP16, which has no JSON form in V2: send it as binary data "
        "(--binary)\n")
    run(server.url, "-m", "f16", "--binary", rows=tmp_path / "rows.json")
    assert completed(tmp_path / "rows.json") > 0


def test_an_unknown_model_is_the_same_line_and_code_as_invokes(server: Server) -> None:
    out = run(server.url, "-m", "nope", code=3)
    one = CliRunner().invoke(invoke, [server.url, "-m", "nope", "--data", json.dumps(
        {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 64],
                     "data": [0] * 64}]})])
    assert one.exit_code == 3
    assert out.stderr == one.stderr == ("Error: HTTP 404: Request for unknown model: 'nope' is "
                                        "not found\n")


def test_a_base_url_with_a_query_keeps_it_after_the_v2_path(server: Server,
                                                            tmp_path: Path) -> None:
    run(f"http://{server.url}/?x=1", "-m", "digits", rows=tmp_path / "rows.json")
    assert completed(tmp_path / "rows.json") > 0


class Canned(LoopbackHttpServer):
    """A real HTTP server on loopback: GET answers ``metadata``; POST answers a V2 output,
    or 401 without ``Authorization: Bearer <key>`` when ``key`` is set."""

    def __init__(self, metadata: tuple[int, bytes], key: str | None = None) -> None:
        self.calls = 0
        self.auth: list[str] = []  # the Authorization header of each call
        canned = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _answer(self, status: int, body: bytes) -> None:
                canned.calls += 1
                canned.auth.append(self.headers.get("authorization", ""))
                if key is not None and self.headers.get("authorization") != f"Bearer {key}":
                    status, body = 401, b'{"error": "an API key is required"}'
                self.send_response(status)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self._answer(*metadata)

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                self._answer(200, b'{"outputs": []}')

        super().__init__(Handler)


METADATA = (200, json.dumps({"name": "m", "inputs": [
    {"name": "x", "datatype": "FP32", "shape": [-1, 3]}]}).encode())


@pytest.mark.parametrize(("metadata", "code", "message"), [
    ((200, b"<html><title>Sign in</title></html>"), 5,
     "{url}/v2/models/m did not answer with V2 JSON: an HTML page (Sign in)"),
    ((200, b'{"name": "m"}'), 5,
     "{url}/v2/models/m did not answer with V2 JSON: the model metadata has no inputs list"),
    ((502, b"<html>\n<head><title>502 Bad Gateway</title></head>\n<body>\n</body></html>"), 5,
     "HTTP 502: 502 Bad Gateway"),
])
def test_metadata_that_is_not_v2_is_one_line(metadata: tuple[int, bytes], code: int,
                                             message: str) -> None:
    with Canned(metadata) as canned:
        out = run(canned.url, "-m", "m", code=code)
    assert out.stderr == f"Error: {message.format(url=canned.url)}\n"


def test_a_keyed_endpoint_takes_the_api_key(tmp_path: Path) -> None:
    with Canned(METADATA, key="alpha") as canned:
        keyless = run(canned.url, "-m", "m", "--input", str(_request(tmp_path)), code=6)
        run(canned.url, "-m", "m", "--api-key", "alpha", rows=tmp_path / "flag.json")
        run(canned.url, "-m", "m", env={"MODELFN_API_KEY": "alpha"},
            rows=tmp_path / "env.json")
        calls = canned.calls
        refused = run(canned.url, "-m", "m", "--auth", "none", "--api-key", "alpha", code=2)
        assert canned.calls == calls  # refused before any call
    assert error_line(keyless).startswith("Error: no request completed at c=1: ")
    assert keyless.stderr.endswith("failed; first: HTTP 401: an API key is required\n")
    assert completed(tmp_path / "flag.json") > 0 and completed(tmp_path / "env.json") > 0
    assert refused.stderr == ("Error: an API key (--api-key or MODELFN_API_KEY) is sent only "
                              "with --auth key, not --auth none: give one or the other\n")


def _request(tmp_path: Path) -> Path:
    path = tmp_path / "request.json"
    path.write_text(json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 3],
                                            "data": [1, 2, 3]}]}))
    return path


def test_iam_auth_signs_every_call_for_the_urls_region(tmp_path: Path) -> None:
    env = {"AWS_ACCESS_KEY_ID": "AKIDTESTING", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_SESSION_TOKEN": None, "AWS_PROFILE": None}
    with Canned(METADATA) as canned:
        run(canned.url, "-m", "m", "--auth", "iam", "--region", "eu-west-1", env=env,
            rows=tmp_path / "rows.json")
    assert completed(tmp_path / "rows.json") > 0
    assert len(canned.auth) > 1 and all(
        a.startswith("AWS4-HMAC-SHA256 Credential=AKIDTESTING/")
        and "/eu-west-1/lambda/aws4_request" in a for a in canned.auth)
