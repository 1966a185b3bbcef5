"""``modelfn init --python NAME``: the scaffold it writes, what it refuses, and the model
served as written by a real ``modelfn serve``, called with tritonclient over HTTP and
gRPC."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import click
import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton
from click.testing import CliRunner
from servers import Server
from tritonclient.utils import InferenceServerException

from modelfn.cli.store import init
from modelfn.runtime.config_file import parse_config

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


@pytest.fixture
def cli() -> click.Group:
    group = click.Group("modelfn")
    group.add_command(init)
    return group


def scaffold(cli: click.Group, repo: Path, name: str, *args: str) -> Any:
    return CliRunner().invoke(cli, ["init", "--python", name, "--repo", str(repo), *args])


def test_init_python_writes_a_python_backend_config_and_model(cli: click.Group,
                                                              tmp_path: Path) -> None:
    result = scaffold(cli, tmp_path / "models", "doubler")
    assert result.exit_code == 0, result.output
    model_dir = tmp_path / "models" / "doubler"
    assert sorted(p.relative_to(model_dir).as_posix() for p in model_dir.rglob("*")) == [
        "1", "1/model.py", "config.pbtxt"]
    assert f"created {model_dir / 'config.pbtxt'} and {model_dir / '1' / 'model.py'}" in (
        result.output)
    config = parse_config((model_dir / "config.pbtxt").read_text())
    assert (config.name, config.backend, config.max_batch_size) == ("doubler", "python", 8)
    assert config.dynamic_batching is not None
    assert [(t.name, t.datatype.v2, t.dims) for t in (*config.inputs, *config.outputs)] == [
        ("INPUT", "FP32", (-1,)), ("OUTPUT", "FP32", (-1,))]
    source = (model_dir / "1" / "model.py").read_text()
    compile(source, "model.py", "exec")
    for part in ("import triton_python_backend_utils as pb_utils", "class TritonPythonModel:",
                 "def initialize(self, args):", "def execute(self, requests):",
                 "def finalize(self):", '"""doubler: a model for'):
        assert part in source


def test_init_python_refuses_an_existing_model_unless_forced(cli: click.Group,
                                                             tmp_path: Path) -> None:
    repo = tmp_path / "models"
    assert scaffold(cli, repo, "m").exit_code == 0
    (repo / "m" / "1" / "model.py").write_text("# mine\n")
    (repo / "m" / "2").mkdir()
    again = scaffold(cli, repo, "m")
    assert again.exit_code != 0
    assert f"{repo / 'm'} already exists; pass --force" in again.output
    assert (repo / "m" / "1" / "model.py").read_text() == "# mine\n"
    forced = scaffold(cli, repo, "m", "--force")
    assert forced.exit_code == 0, forced.output
    assert "class TritonPythonModel" in (repo / "m" / "1" / "model.py").read_text()
    assert not (repo / "m" / "2").exists()  # the model as init makes it, nothing left over


@pytest.mark.parametrize(("args", "message"), [
    (["init", "--python", "../up"], "invalid model name '../up'"),
    (["init", "--python", "a", "--name", "b"], "--python a names the model: leave --name out"),
    (["init", "{model}", "--python", "a"], "give MODEL ({model}) or --python, not both"),
    (["init"], "Missing argument 'MODEL' (or --python NAME for a new Python model)"),
])
def test_init_python_usage_errors_say_what_to_change(cli: click.Group, tmp_path: Path,
                                                     args: list[str], message: str) -> None:
    model = tmp_path / "m.onnx"
    model.write_bytes(b"")
    args = [a.replace("{model}", str(model)) for a in args]
    result = CliRunner().invoke(cli, [*args, "--repo", str(tmp_path / "models")])
    assert result.exit_code == 2
    assert message.replace("{model}", str(model)) in result.output
    assert not (tmp_path / "models").exists()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    repo = tmp_path_factory.mktemp("init_python") / "models"
    group = click.Group("modelfn")
    group.add_command(init)
    assert scaffold(group, repo, "doubler").exit_code == 0
    server = Server(repo, grpc=True)
    try:
        server.wait_ready(timeout=60)
        yield server
    finally:
        log = server.stop()
        assert server.proc.returncode == 0, log


def double(client: Any, module: Any, values: np.ndarray, binary: bool = True) -> np.ndarray:
    tensor = module.InferInput("INPUT", list(values.shape), "FP32")
    if module is triton:
        tensor.set_data_from_numpy(values, binary_data=binary)
    else:
        tensor.set_data_from_numpy(values)
    answer: np.ndarray = client.infer("doubler", [tensor]).as_numpy("OUTPUT")
    return answer


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_the_scaffold_answers_as_written_over_http(served: Server, binary: bool) -> None:
    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    with triton.InferenceServerClient(served.url) as client:
        np.testing.assert_array_equal(double(client, triton, values, binary), values * 2)
        config = client.get_model_config("doubler")
    assert (config["backend"], config["max_batch_size"]) == ("python", 8)


def test_the_scaffold_answers_over_grpc_and_batches_any_lengths(served: Server) -> None:
    rows = [np.full((1, n), n, np.float32) for n in range(1, 17)]
    with triton_grpc.InferenceServerClient(served.grpc_url) as client, \
            ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda v: double(client, triton_grpc, v), rows))
    for values, answer in zip(rows, answers, strict=True):
        np.testing.assert_array_equal(answer, values * 2)


def test_the_scaffold_refuses_nan_alone_and_serves_on(served: Server) -> None:
    with triton.InferenceServerClient(served.url) as client:
        with pytest.raises(InferenceServerException) as refused:
            double(client, triton, np.array([[1.0, np.nan]], np.float32))
        assert refused.value.status() == "400"
        assert "INPUT holds NaN or infinity" in refused.value.message()
        np.testing.assert_array_equal(double(client, triton, np.ones((1, 2), np.float32)),
                                      [[2.0, 2.0]])
