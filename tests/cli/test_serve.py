"""`modelfn serve` as a real process on 127.0.0.1, driven by the independent tritonclient."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import httpx
import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.http as triton
from onnx_models import save, simple_graph
from prometheus_client.parser import text_string_to_metric_families
from servers import Server, serving
from tritonclient.utils import InferenceServerException

from modelfn.process.supervisor import free_port

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


def simple_repo(root: Path, instances: str = "count: 1 kind: KIND_CPU", extra: str = "") -> Path:
    """``root`` holding the batching ``simple`` model (width 16), ``extra`` config lines
    appended."""
    save(root / "simple", simple_graph(width=16), config=(
        'name: "simple"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 32\n'
        f"dynamic_batching {{}}\ninstance_group [{{ {instances} }}]\n{extra}"))
    return root


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return simple_repo(tmp_path_factory.mktemp("repo") / "models")


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[Server]:
    with serving(repo) as srv:
        yield srv


@pytest.fixture(scope="module")
def reference(repo: Path) -> ort.InferenceSession:
    return ort.InferenceSession(str(repo / "simple" / "1" / "model.onnx"))


@pytest.mark.parametrize("binary", [False, True])
def test_tritonclient_infer_matches_onnxruntime(
    server: Server, reference: ort.InferenceSession, binary: bool
) -> None:
    client = triton.InferenceServerClient(server.url)
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("simple")
    meta = client.get_model_metadata("simple")
    assert meta["inputs"][0] == {"name": "INPUT0", "datatype": "FP32", "shape": [-1, 16]}
    config = client.get_model_config("simple")
    assert config["max_batch_size"] == 32
    rng = np.random.default_rng(7)
    a = rng.standard_normal((4, 16), dtype=np.float32)
    b = rng.standard_normal((4, 16), dtype=np.float32)
    inputs = [triton.InferInput("INPUT0", [4, 16], "FP32"),
              triton.InferInput("INPUT1", [4, 16], "FP32")]
    inputs[0].set_data_from_numpy(a, binary_data=binary)
    inputs[1].set_data_from_numpy(b, binary_data=binary)
    outputs = [triton.InferRequestedOutput(n, binary_data=binary) for n in ("OUTPUT0", "OUTPUT1")]
    result = client.infer("simple", inputs, outputs=outputs, request_id="abc")
    expected = reference.run(None, {"INPUT0": a, "INPUT1": b})
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), expected[0])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), expected[1])
    assert result.get_response()["id"] == "abc"
    client.close()


def test_load_and_unload_say_model_control_is_not_enabled(server: Server) -> None:
    """tritonclient's load_model and unload_model get Triton's answer for model control
    mode NONE (an error, not a 404 for a route the advertised extension implies)."""
    client = triton.InferenceServerClient(server.url)
    try:
        for call in (client.load_model, client.unload_model):
            with pytest.raises(InferenceServerException, match=(
                    r"cannot (load|unload) model 'simple': model control is not enabled")):
                call("simple")
        assert client.is_model_ready("simple")  # nothing was unloaded
    finally:
        client.close()


def _counter(url: str, name: str) -> float:
    text = httpx.get(f"http://{url}/metrics").text
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if f.name == name and s.labels.get("model") == "simple")


def _hammer(url: str, reference: ort.InferenceSession, workers: int = 32,
            per_worker: int = 25) -> None:
    """``workers`` clients send binary requests at once; every answer must be its caller's,
    and the server must have run them in batches."""
    before_count = _counter(url, "nv_inference_count")
    before_exec = _counter(url, "nv_inference_exec_count")

    def worker(seed: int) -> int:
        client = triton.InferenceServerClient(url)
        rng = np.random.default_rng(seed)
        checked = 0
        for _ in range(per_worker):
            a = rng.standard_normal((1, 16), dtype=np.float32)
            b = np.full((1, 16), seed, dtype=np.float32)  # tags the caller
            inputs = [triton.InferInput("INPUT0", [1, 16], "FP32"),
                      triton.InferInput("INPUT1", [1, 16], "FP32")]
            inputs[0].set_data_from_numpy(a, binary_data=True)
            inputs[1].set_data_from_numpy(b, binary_data=True)
            result = client.infer("simple", inputs)
            expected = reference.run(None, {"INPUT0": a, "INPUT1": b})
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), expected[0])
            np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), expected[1])
            checked += 1
        client.close()
        return checked

    with ThreadPoolExecutor(workers) as pool:
        assert sum(pool.map(worker, range(workers))) == workers * per_worker
    count = _counter(url, "nv_inference_count") - before_count
    execs = _counter(url, "nv_inference_exec_count") - before_exec
    assert count == workers * per_worker
    assert execs < count, "concurrent requests should have been batched together"


def test_concurrent_requests_form_batches_and_each_gets_its_own_answer(
    server: Server, reference: ort.InferenceSession
) -> None:
    _hammer(server.url, reference)


def test_padded_batches_answer_each_caller_with_its_own_rows(
    tmp_path: Path, reference: ort.InferenceSession
) -> None:
    """Batches padded to a few sizes (as on a GPU, here on the CPU) over HTTP: the batcher
    builds each at its size and every caller still gets exactly its own answer."""
    root = simple_repo(tmp_path / "models", extra=(
        'parameters { key: "padded_batch_sizes" value: { string_value: "1,4,16" } }\n'))
    with serving(root) as srv:
        assert "batches padded to [1, 4, 16, 32] rows" in srv.proc.tail()
        _hammer(srv.url, reference)


@pytest.mark.gpu
def test_a_gpu_instance_says_its_provider_and_batches_over_http(
    tmp_path: Path, reference: ort.InferenceSession
) -> None:
    """`modelfn serve` of a KIND_GPU model runs it on the CUDA provider (its log says so)
    and batches concurrent binary requests there, each answer its caller's."""
    root = simple_repo(tmp_path / "models", instances="count: 2 kind: KIND_GPU")
    with serving(root) as srv:
        assert "onnxruntime runs it on ['CUDAExecutionProvider'" in srv.proc.tail()
        _hammer(srv.url, reference)


def test_sigterm_drains_and_exits_cleanly(repo: Path) -> None:
    srv = Server(repo)
    srv.wait_ready()
    log = srv.stop()
    assert srv.proc.returncode == 0, log
    assert "ready: simple:1" in log


def test_a_config_the_machine_cannot_hold_exits_with_the_message_not_a_traceback(
    tmp_path: Path,
) -> None:
    save(tmp_path / "m", simple_graph(width=16), config="max_batch_size: 2147483647\n")
    srv = Server(tmp_path)
    out = srv.wait_exit()
    assert srv.proc.returncode == 2, out
    assert "m/config.pbtxt: max_batch_size 2147483647: the inputs of one full batch need" in out
    assert "Traceback" not in out


@pytest.mark.parametrize(("layout", "message"), [
    ("model", "looks like a model directory (it has version folder 1/), not a repository of "
              "models: serve its parent"),
    ("unrelated", "holds no model directories (<model>/config.pbtxt or <model>/1/...); it has: "
                  "docs, notes.txt. Is it the model repository?"),
    ("empty", "is empty: put each model in <repository>/<model>/<version>/model.onnx"),
])
def test_serving_the_wrong_directory_says_what_it_looks_like(tmp_path: Path, layout: str,
                                                             message: str) -> None:
    root = tmp_path / "models"
    save(root / "iris", simple_graph(width=16))
    target = {"model": root / "iris", "unrelated": tmp_path / "project",
              "empty": tmp_path / "nothing"}[layout]
    target.mkdir(exist_ok=True)
    if layout == "unrelated":
        (target / "docs").mkdir()
        (target / "notes.txt").write_text("x")
    srv = Server(target)
    out = srv.wait_exit()
    assert srv.proc.returncode == 2, out
    assert message in out
    assert "Traceback" not in out


@pytest.mark.parametrize("busy", ["--port", "--grpc-port"])
def test_a_port_in_use_is_one_error_line_before_any_model_loads(repo: Path,
                                                               busy: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ports = {"--port": str(free_port()), "--grpc-port": str(free_port()), busy: str(port)}
        done = subprocess.run(
            [sys.executable, "-m", "modelfn.cli.main", "serve", str(repo), "--host",
             "127.0.0.1", *(item for pair in ports.items() for item in pair)],
            capture_output=True, text=True, timeout=120, check=False)
    out = done.stdout + done.stderr
    assert done.returncode == 4, out  # a conflict, README's exit code 4
    assert out.strip() == (f"Error: cannot listen on 127.0.0.1:{port}: Address already in use "
                           "(another server listens there: choose another port)")


@pytest.mark.parametrize("port", ["70000", "0", "-5"])
def test_a_port_out_of_range_is_a_usage_error(repo: Path, port: str) -> None:
    done = subprocess.run([sys.executable, "-m", "modelfn.cli.main", "serve", str(repo),
                           "--port", port], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 2, done.stderr
    assert "Invalid value for '--port'" in done.stderr


def test_a_repository_beats_the_environments_store_and_both_given_is_refused(
        repo: Path, tmp_path: Path) -> None:
    """`. ~/.modelfn/dev/env` sets MODELFN_STORE: `modelfn serve REPOSITORY` in that shell
    serves REPOSITORY (it used to demand --model, or, with one, check the store's version
    out over the repository's own files). --store and a REPOSITORY together are refused."""
    env = {**os.environ, "MODELFN_STORE": str(tmp_path / "store")}
    srv = Server(repo, env=env)
    try:
        srv.wait_ready()
    finally:
        srv.stop()
    both = subprocess.run([sys.executable, "-m", "modelfn.cli.main", "serve", str(repo),
                           "--store", str(tmp_path / "store"), "--model", "simple"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert both.returncode == 2
    assert "give a REPOSITORY or --store, not both" in both.stderr


def test_the_server_name_is_modelfn_unless_told_otherwise(repo: Path) -> None:
    """Triton's health and metadata examples exit unless the server calls itself "triton":
    ``--server-name`` changes what the metadata answers say, over REST and gRPC."""
    import tritonclient.grpc as grpcclient

    server = Server(repo, "--server-name", "triton", grpc=True)
    try:
        server.wait_ready()
        assert triton.InferenceServerClient(server.url).get_server_metadata()["name"] \
            == "triton"
        metadata = grpcclient.InferenceServerClient(server.grpc_url).get_server_metadata()
        assert metadata.name == "triton" and "statistics" in metadata.extensions
    finally:
        server.stop()
    with serving(repo) as default:
        assert triton.InferenceServerClient(default.url).get_server_metadata()["name"] \
            == "modelfn"
