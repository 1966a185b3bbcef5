"""Each entrypoint runs with only what its image installs: the import-only test of the images.

For each image flavor this machine can run, ``BuildPlan.requirements`` (the very list a
build writes to ``requirements.txt``) is pip-installed into an empty folder, and the modelfn
wheel with ``--no-deps`` into another. The entrypoint then runs under ``python -S`` with
those two folders as its whole ``sys.path`` beyond the standard library, as in the image:
nothing of this test environment (onnx, click's CLI, jinja2, rich, boto3, ...) is there.

- HTTP, REST: ``python -m modelfn.handlers.http`` serves a baked repository (readiness and
  an infer), and never imports grpcio, boto3 or the CLI's libraries;
- HTTP, ``MODELFN_PROTOCOL=grpc``: the same folders answer a tritonclient gRPC ModelInfer;
- HTTP from a ``file://`` store: no boto3 is installed, and none is needed;
- Lambda: ``modelfn.handlers.aws_lambda`` imports (the init phase: the model loads) and its
  handler answers a function URL event.

The GPU flavors install ``onnxruntime-gpu`` and TensorRT, which this machine cannot run.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING

import httpx
import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
from onnx_models import save, simple_graph

from modelfn.deploy.build import BuildPlan
from modelfn.deploy.wheel import modelfn_wheel
from modelfn.localstack.function_url import build_event
from modelfn.model_store import open_store
from modelfn.process.supervisor import Process, free_port, http_probe

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

pytestmark = pytest.mark.slow

#: what no function may import (the CLI's, the build's and S3's libraries)
NEVER = ("onnx", "click.testing", "jinja2", "rich", "boto3", "botocore", "yaml", "httpx",
         "aiohttp", "kubernetes", "moto")
START_S = 120.0
#: runs an entrypoint module as ``-m`` would, and writes the modules it imported at exit
RUN_MODULE = textwrap.dedent("""
    import atexit, runpy, sys
    atexit.register(lambda: open(sys.argv[1], "w").write("\\n".join(sorted(sys.modules))))
    runpy.run_module(sys.argv[2], run_name="__main__", alter_sys=True)
""")


def install(target: Path, requirements: list[str]) -> Path:
    """``pip install --target`` of exactly ``requirements``; fails the test with pip's tail."""
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-compile",
                           "--disable-pip-version-check", "--target", str(target),
                           *requirements], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.fail(f"pip install {' '.join(requirements)}:\n{done.stderr[-3000:]}")
    return target


@pytest.fixture(scope="module")
def wheel() -> Path:
    return modelfn_wheel()


@pytest.fixture(scope="module")
def app_dir(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("app")
    return install(target, ["--no-deps", str(wheel)])


@pytest.fixture(scope="module")
def http_deps(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    requirements = BuildPlan("simple", 1).requirements(wheel)
    return install(tmp_path_factory.mktemp("http-deps"), requirements)


@pytest.fixture(scope="module")
def lambda_deps(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    plan = BuildPlan("simple", 1, target="lambda", base="localhost/debian:bookworm")
    return install(tmp_path_factory.mktemp("lambda-deps"), plan.requirements(wheel))


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("models")
    save(repo / "simple", simple_graph(scale=3.0), version=1, config="max_batch_size: 8\n")
    return repo


def function_env(*paths: Path, **env: str) -> dict[str, str]:
    """Only what a function image sets: the two folders, the function's variables."""
    return {"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(map(str, paths)),
            "HOME": str(paths[0]), "MODELFN_LOG_LEVEL": "warning", **env}


def entrypoint(module: str, modules_file: Path) -> list[str]:
    return [sys.executable, "-S", "-c", RUN_MODULE, str(modules_file), module]


def imported(modules_file: Path) -> set[str]:
    return set(modules_file.read_text().split())


def forbidden(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(f"{n}.") for n in NEVER))


def infer_body() -> tuple[dict[str, object], np.ndarray]:
    data = np.arange(32, dtype=np.float32).reshape(2, 16)
    return {"inputs": [{"name": n, "shape": [2, 16], "datatype": "FP32",
                        "data": data.ravel().tolist()} for n in ("INPUT0", "INPUT1")]}, data


def serve(env: dict[str, str], modules_file: Path, ready: Callable[[], bool],
          check: Callable[[], None]) -> None:
    process = Process(entrypoint("modelfn.handlers.http", modules_file), name="function",
                      env=env)
    with process:
        try:
            process.wait_ready(ready, START_S)
            check()
        except BaseException:
            print(process.tail())
            raise
        assert process.stop() == 0, process.tail()


def test_http_rest_runs_on_the_image_requirements_alone(
    app_dir: Path, http_deps: Path, repository: Path, tmp_path: Path
) -> None:
    port = free_port()
    env = function_env(app_dir, http_deps, PORT=str(port), MODELFN_HOST="127.0.0.1",
                       MODELFN_REPOSITORY=str(repository), MODELFN_MODELS="simple:1")
    body, data = infer_body()

    def check() -> None:
        answer = httpx.post(f"http://127.0.0.1:{port}/v2/models/simple/infer", json=body)
        assert answer.status_code == 200, answer.text
        outputs = {o["name"]: o["data"] for o in answer.json()["outputs"]}
        assert outputs["OUTPUT0"] == (data * 6).ravel().tolist()

    modules = tmp_path / "modules"
    serve(env, modules, http_probe(f"http://127.0.0.1:{port}/v2/health/ready"), check)
    loaded = imported(modules)
    assert {"onnxruntime", "uvicorn", "uvloop", "modelfn.protocol.rest"} <= loaded
    assert not [m for m in loaded if m == "grpc" or m.startswith("grpc.")]  # REST only
    assert forbidden(loaded) == []


def test_http_grpc_runs_on_the_same_requirements(
    app_dir: Path, http_deps: Path, repository: Path, tmp_path: Path
) -> None:
    port = free_port()
    env = function_env(app_dir, http_deps, PORT=str(port), MODELFN_HOST="127.0.0.1",
                       MODELFN_PROTOCOL="grpc", MODELFN_REPOSITORY=str(repository))
    client = triton_grpc.InferenceServerClient(f"127.0.0.1:{port}")

    def ready() -> bool:
        try:
            return bool(client.is_model_ready("simple"))
        except triton_grpc.InferenceServerException:
            return False

    def check() -> None:
        _, data = infer_body()
        inputs = []
        for name in ("INPUT0", "INPUT1"):
            tensor = triton_grpc.InferInput(name, [2, 16], "FP32")
            tensor.set_data_from_numpy(data)
            inputs.append(tensor)
        result = client.infer("simple", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data * 6)

    modules = tmp_path / "modules"
    try:
        serve(env, modules, ready, check)
    finally:
        client.close()
    loaded = imported(modules)
    assert {"grpc", "google.protobuf", "modelfn.protocol.grpc.server"} <= loaded
    assert forbidden(loaded) == []


def test_http_from_a_file_store_needs_no_boto3(
    app_dir: Path, http_deps: Path, repository: Path, tmp_path: Path
) -> None:
    store = open_store(f"file://{tmp_path / 'store'}")
    store.push(repository / "simple", version=1)
    port = free_port()
    env = function_env(app_dir, http_deps, PORT=str(port), MODELFN_HOST="127.0.0.1",
                       MODELFN_STORE=store.uri, MODELFN_MODELS="simple:1",
                       MODELFN_CACHE_DIR=str(tmp_path / "cache"))
    assert not list(http_deps.glob("boto3*"))
    modules = tmp_path / "modules"
    serve(env, modules, http_probe(f"http://127.0.0.1:{port}/v2/health/ready"), lambda: None)
    assert forbidden(imported(modules)) == []


def test_lambda_handler_runs_on_the_image_requirements_alone(
    app_dir: Path, lambda_deps: Path, repository: Path, tmp_path: Path
) -> None:
    body, data = infer_body()
    event = build_event(method="POST", raw_path="/v2/models/simple/infer", raw_query="",
                        headers=[("content-type", "application/json")],
                        body=json.dumps(body).encode(), source_ip="127.0.0.1",
                        request_id="r-1", function_name="simple", region="us-east-1")
    (tmp_path / "event.json").write_text(json.dumps(event))
    script = textwrap.dedent("""
        import json, sys
        from modelfn.handlers.aws_lambda import handler
        class Context:
            function_name = "simple"; memory_limit_in_mb = 1024; aws_request_id = "r-1"
            invoked_function_arn = "arn:aws:lambda:us-east-1:000000000000:function:simple"
        response = handler(json.load(open(sys.argv[1])), Context())
        open(sys.argv[2], "w").write(json.dumps(response))
        open(sys.argv[3], "w").write("\\n".join(sorted(sys.modules)))
    """)
    env = function_env(app_dir, lambda_deps, MODELFN_REPOSITORY=str(repository),
                       AWS_LAMBDA_FUNCTION_NAME="simple", AWS_REGION="us-east-1")
    done = subprocess.run([sys.executable, "-S", "-c", script, str(tmp_path / "event.json"),
                           str(tmp_path / "response.json"), str(tmp_path / "modules")],
                          env=env, capture_output=True, text=True, timeout=START_S,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    response = json.loads((tmp_path / "response.json").read_text())
    assert response["statusCode"] == 200, response
    outputs = {o["name"]: o["data"] for o in json.loads(response["body"])["outputs"]}
    assert outputs["OUTPUT0"] == (data * 6).ravel().tolist()
    loaded = imported(tmp_path / "modules")
    assert {"mangum", "aws_lambda_powertools", "onnxruntime"} <= loaded
    assert "uvicorn" not in loaded and forbidden(loaded) == []
