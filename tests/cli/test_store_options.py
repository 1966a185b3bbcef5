"""What every command that reaches a model store shares: one ``--endpoint-url`` reading the
same variables, one answer when no store is given, and one answer for a model or version
the store does not hold."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import click
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from modelfn.cli.main import COMMANDS, cli
from modelfn.cli.params import ENDPOINT_URL_ENVVARS
from modelfn.localstack.s3 import S3Emulator

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

IMAGE = "registry.example/modelfn/digits@sha256:" + "a" * 64


@pytest.fixture
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    for name in ("MODELFN_STORE", "MODELFN_TARGET", "MODELFN_ENDPOINT_URL", "AWS_ENDPOINT_URL",
                 "MODELFN_S3_ENDPOINT", "MODELFN_REPOSITORY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MODELFN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("MODELFN_DEV_DIR", str(tmp_path / "dev"))
    return CliRunner()


def tiny_model(model_dir: Path) -> Path:
    """A model folder with version 1 and no config (push completes one)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    (model_dir / "1").mkdir(parents=True)
    onnx.save(model, str(model_dir / "1" / "model.onnx"))
    return model_dir


def commands() -> Iterator[tuple[str, click.Command]]:
    for name, (target, _) in COMMANDS.items():
        command = cli.get_command(click.Context(cli), name)
        assert command is not None, target
        yield name, command
        if isinstance(command, click.Group):
            yield from ((f"{name} {sub}", c) for sub, c in command.commands.items())


def test_every_endpoint_url_reads_the_same_variables() -> None:
    """push read MODELFN_S3_ENDPOINT, deploy MODELFN_ENDPOINT_URL: one shell set for one
    reached the endpoint with only some commands."""
    found = {}
    for name, command in commands():
        for param in command.params:
            if "--endpoint-url" in getattr(param, "opts", ()):
                found[name] = param.envvar
    assert {"push", "versions", "pull", "deploy", "status", "traffic"} <= set(found)
    assert all(envvar == ENDPOINT_URL_ENVVARS for envvar in found.values()), found
    assert ENDPOINT_URL_ENVVARS == ["MODELFN_ENDPOINT_URL", "AWS_ENDPOINT_URL",
                                    "MODELFN_S3_ENDPOINT"]


@pytest.fixture(scope="module")
def emulator() -> Iterator[S3Emulator]:
    with S3Emulator() as s3:
        yield s3


@pytest.mark.parametrize("variable", ENDPOINT_URL_ENVVARS)
def test_each_variable_takes_push_versions_and_pull_to_the_endpoint(
        runner: CliRunner, tmp_path: Path, emulator: S3Emulator,
        monkeypatch: pytest.MonkeyPatch, variable: str) -> None:
    bucket = f"opt-{uuid.uuid4().hex[:10]}"
    emulator.create_bucket(bucket)
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                        ("AWS_DEFAULT_REGION", "us-east-1"), (variable, emulator.endpoint_url)):
        monkeypatch.setenv(name, value)
    store = f"s3://{bucket}/models"
    model = tiny_model(tmp_path / "models" / "relu")
    pushed = runner.invoke(cli, ["push", str(model), "--store", store])
    assert pushed.exit_code == 0, pushed.output
    listed = runner.invoke(cli, ["versions", "relu", "--store", store])
    assert listed.exit_code == 0 and "relu" in listed.stdout, listed.output
    pulled = runner.invoke(cli, ["pull", "relu:1", str(tmp_path / "out"), "--store", store])
    assert pulled.exit_code == 0, pulled.output
    assert (tmp_path / "out" / "relu" / "1" / "model.onnx").is_file()
    # deploy reads the version's config from the same store (a dry run renders the Service)
    deployed = runner.invoke(cli, ["deploy", "relu:1", "--target", "knative", "--dry-run",
                                   "--image", IMAGE, "--store", store])
    assert deployed.exit_code == 0, deployed.output
    assert "kind: Service" in deployed.stdout


@pytest.mark.parametrize("args", [
    ["push", "{model}"],
    ["versions"],
    ["pull", "relu:1", "{out}"],
    ["serve", "--model", "relu"],
    ["build", "relu:1"],
], ids=["push", "versions", "pull", "serve", "build"])
def test_no_store_says_how_to_source_the_local_platforms_env(
        runner: CliRunner, tmp_path: Path, args: list[str]) -> None:
    """Without `set -a; . ~/.modelfn/dev/env; set +a` push only said to give --store."""
    model = tiny_model(tmp_path / "models" / "relu")
    line = [a.format(model=model, out=tmp_path / "out") for a in args]
    result = runner.invoke(cli, line)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("Error: no model store: give it with --store URI (or "
                                    "MODELFN_STORE)")
    assert (f"for the local platform, source its env first: set -a; . {tmp_path / 'dev' / 'env'}"
            "; set +a (MODELFN_DEV_DIR: another state dir)\n") in result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert not (model / "config.pbtxt").exists()  # nothing done before the store is known


@pytest.fixture
def store(runner: CliRunner, tmp_path: Path) -> str:
    """A directory store holding relu versions 1 and 2."""
    uri = (tmp_path / "store").as_uri()
    model = tiny_model(tmp_path / "models" / "relu")
    (model / "2").mkdir()
    (model / "2" / "model.onnx").write_bytes((model / "1" / "model.onnx").read_bytes())
    for version in ("1", "2"):
        pushed = runner.invoke(cli, ["push", str(model), "--store", uri, "--version", version])
        assert pushed.exit_code == 0, pushed.output
    return uri


def _builder_available() -> bool:
    from modelfn.deploy.builders import BUILDERS

    return any(builder.available() for builder in BUILDERS.values())


@pytest.mark.parametrize(("args", "missing"), [
    (["deploy", "relu:7", "--target", "knative", "--dry-run", "--image", IMAGE], "version 7"),
    (["deploy", "nosuch:1", "--target", "knative", "--dry-run", "--image", IMAGE], "nosuch"),
    (["pull", "relu:7", "{out}"], "version 7"),
    (["pull", "nosuch", "{out}"], "nosuch"),
    (["versions", "nosuch"], "nosuch"),
    pytest.param(["build", "nosuch", "--bake"], "nosuch", marks=pytest.mark.skipif(
        not _builder_available(), reason="build picks an image builder first: none here")),
], ids=["deploy-version", "deploy-model", "pull-version", "pull-model", "versions", "build"])
def test_a_model_the_store_lacks_is_named_with_what_it_holds(
        runner: CliRunner, tmp_path: Path, store: str, args: list[str], missing: str) -> None:
    """deploy said "Request for unknown model", Triton's words for an inference request:
    every command now says which store, what it holds, and to push first (exit 3)."""
    line = [a.format(out=tmp_path / "out") for a in args] + ["--store", store]
    result = runner.invoke(cli, line)
    assert result.exit_code == 3, result.output
    if missing == "version 7":
        want = (f"Error: version 7 of model 'relu' is not in the model store {store} "
                "(versions there: 1, 2): push it first, ")
    else:
        want = (f"Error: model 'nosuch' has no version in the model store {store} "
                "(models there: relu): push one first, ")
    assert result.stderr.startswith(want), result.stderr
    assert result.stderr.endswith(f"modelfn push DIR --store {store}\n")
    assert "Request for unknown model" not in result.output


def test_serve_reaches_the_store_at_the_endpoint_url_too(
        runner: CliRunner, tmp_path: Path, emulator: S3Emulator) -> None:
    """serve --store took no --endpoint-url: with MODELFN_ENDPOINT_URL alone, the one push
    reads first, it looked for the store on AWS itself."""
    import os
    import socket
    import subprocess
    import sys

    bucket = f"opt-{uuid.uuid4().hex[:10]}"
    emulator.create_bucket(bucket)
    env = {k: v for k, v in os.environ.items()
           if k not in ("MODELFN_STORE", "AWS_ENDPOINT_URL", "MODELFN_S3_ENDPOINT")}
    env.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
               AWS_DEFAULT_REGION="us-east-1", MODELFN_ENDPOINT_URL=emulator.endpoint_url,
               MODELFN_CACHE=str(tmp_path / "cache"), MODELFN_STORE=f"s3://{bucket}/models",
               MODELFN_S3_MAX_ATTEMPTS="1")
    model = tiny_model(tmp_path / "models" / "relu")

    def modelfn(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "modelfn.cli.main", *args], env=env,
                              capture_output=True, text=True, timeout=120)

    assert modelfn("push", str(model)).returncode == 0
    with socket.socket() as probe:  # a port that is free: serve fails before it listens
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    served = modelfn("serve", "--model", "nosuch", "--port", str(port))
    assert served.returncode == 3, served.stderr
    assert (f"model 'nosuch' has no version in the model store s3://{bucket}/models (models "
            "there: relu)") in served.stderr
