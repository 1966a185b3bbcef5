"""``init``, ``push``, ``versions`` and ``pull`` through click, on real tiny models."""

from __future__ import annotations

import shutil
import uuid
from typing import TYPE_CHECKING

import click
import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper
from onnx_models import denormal_graph, save

from modelfn.cli.store import init, pull, push, versions
from modelfn.localstack.s3 import S3Emulator
from modelfn.runtime.config_file import parse_config

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


@pytest.fixture
def cli() -> click.Group:
    group = click.Group("modelfn")
    for command in (init, push, versions, pull):
        group.add_command(command)
    return group


@pytest.fixture
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("MODELFN_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("MODELFN_STORE", raising=False)
    return CliRunner()


@pytest.fixture(scope="module")
def emulator() -> Iterator[S3Emulator]:
    with S3Emulator() as s3:
        yield s3


def tiny_onnx(path: Path, scale: float = 2.0) -> Path:
    """y = x * scale with a dynamic batch dimension: batchable, as Triton would see it."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
    k = helper.make_tensor("k", TensorProto.FLOAT, [], [scale])
    graph = helper.make_graph([helper.make_node("Mul", ["x", "k"], ["y"])], "g", [x], [y], [k])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_init_scaffolds_a_triton_model(cli: click.Group, runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(cli, ["init", str(tiny_onnx(tmp_path / "digits.onnx")),
                                 "--name", "digits", "--repo", str(tmp_path / "models")])
    assert result.exit_code == 0, result.output
    model = tmp_path / "models" / "digits"
    assert (model / "1" / "model.onnx").read_bytes() == (tmp_path / "digits.onnx").read_bytes()
    text = (model / "config.pbtxt").read_text()
    config = parse_config(text)
    assert (config.name, config.platform) == ("digits", "onnxruntime_onnx")
    assert config.max_batch_size == 4
    assert [(t.name, t.dims) for t in config.inputs] == [("x", (4,))]
    assert "data_type: TYPE_FP32" in text and config.dynamic_batching is not None
    # the kind is the serving machine's to pick (KIND_GPU where there is one), not this one's
    assert [(g.count, g.kind) for g in config.instance_group] == [(1, "KIND_AUTO")]
    assert "KIND_" not in text
    assert "note: max_batch_size 4 is Triton's auto-complete default" in result.output
    assert "default_max_batch_size" in result.output and "cold-start" in result.output

    again = runner.invoke(cli, ["init", str(tmp_path / "digits.onnx"), "--name", "digits",
                                "--repo", str(tmp_path / "models")])
    assert again.exit_code == 2 and "already exists; pass --force" in again.output


def test_init_points_out_denormal_weights(cli: click.Group, runner: CliRunner,
                                         tmp_path: Path) -> None:
    model = save(tmp_path / "src", denormal_graph())
    result = runner.invoke(cli, ["init", str(model), "--name", "dn",
                                 "--repo", str(tmp_path / "models")])
    assert result.exit_code == 0, result.output
    assert "note: 3 of the model's weights are denormal" in result.output
    assert 'key: "flush_denormal_weights"' in result.output
    # advice only: the config keeps the weights as they are
    assert "flush_denormal_weights" not in (tmp_path / "models" / "dn" / "config.pbtxt").read_text()
    plain = runner.invoke(cli, ["init", str(tiny_onnx(tmp_path / "plain.onnx")), "--name", "p",
                                "--repo", str(tmp_path / "models")])
    assert plain.exit_code == 0 and "weights are denormal" not in plain.output


def test_init_copies_the_weights_a_model_keeps_in_external_files(
        cli: click.Group, runner: CliRunner, tmp_path: Path) -> None:
    """A large model keeps its weights beside model.onnx (onnx's external data): init takes
    them along, so the scaffolded model loads and answers as the original does."""
    import onnxruntime as ort

    from modelfn.runtime.backends.onnxruntime import OnnxRuntimeBackend
    from modelfn.runtime.config_file import load_config

    source = save(tmp_path / "src", denormal_graph())
    onnx.save_model(onnx.load(str(source)), str(source), save_as_external_data=True,
                    all_tensors_to_one_file=False, location="unused", size_threshold=0)
    assert sorted(p.name for p in source.parent.iterdir()) == ["B", "W", "model.onnx"]
    result = runner.invoke(cli, ["init", str(source), "--name", "ext",
                                 "--repo", str(tmp_path / "models")])
    assert result.exit_code == 0, result.output
    version = tmp_path / "models" / "ext" / "1"
    assert sorted(p.name for p in version.iterdir()) == ["B", "W", "model.onnx"]
    backend = OnnxRuntimeBackend(load_config(version.parent), version / "model.onnx")
    backend.load()
    x = np.ones((2, 4), np.float32)
    x64 = np.ones((2, 3))
    want = ort.InferenceSession(str(source)).run(None, {"X": x, "X64": x64})
    got = backend.run(0, {"X": x, "X64": x64})
    np.testing.assert_array_equal(got["Y"], want[0])
    np.testing.assert_array_equal(got["Y64"], want[1])

    (source.parent / "W").unlink()  # a model whose weights are missing is refused, clearly
    missing = runner.invoke(cli, ["init", str(source), "--name", "gone",
                                  "--repo", str(tmp_path / "models")])
    assert missing.exit_code != 0
    assert "tensor 'W' keeps its data in 'W', which is not a file beside the model" in (
        missing.output)
    assert not (tmp_path / "models" / "gone").exists()


def test_init_force_replaces_the_model_and_refuses_what_it_cannot_do(
        cli: click.Group, runner: CliRunner, tmp_path: Path) -> None:
    """--force leaves no version of the old model behind (a stale 2/ would be served as the
    latest); its own model file inside the directory, and a repository that cannot be
    made, are one error line each, not tracebacks."""
    onnx = tiny_onnx(tmp_path / "digits.onnx")
    models = tmp_path / "models"
    assert runner.invoke(cli, ["init", str(onnx), "--name", "digits", "--repo",
                               str(models)]).exit_code == 0
    (models / "digits" / "2").mkdir()
    (models / "digits" / "2" / "model.onnx").write_bytes(b"stale")
    forced = runner.invoke(cli, ["init", str(onnx), "--name", "digits", "--repo", str(models),
                                 "--force"])
    assert forced.exit_code == 0, forced.output
    assert sorted(p.name for p in (models / "digits").iterdir()) == ["1", "config.pbtxt"]
    # its own model file: --force completes the config again and leaves the model in place
    (models / "digits" / "config.pbtxt").write_text("max_batch_size: 1\n")
    own = runner.invoke(cli, ["init", str(models / "digits" / "1" / "model.onnx"), "--name",
                              "digits", "--repo", str(models), "--force"])
    assert own.exit_code == 0, own.output
    assert (models / "digits" / "1" / "model.onnx").read_bytes() == onnx.read_bytes()
    assert parse_config((models / "digits" / "config.pbtxt").read_text()).max_batch_size == 4
    (tmp_path / "file").write_text("x")
    blocked = runner.invoke(cli, ["init", str(onnx), "--name", "digits", "--repo",
                                  str(tmp_path / "file" / "models")])
    assert blocked.exit_code == 2, blocked.output
    assert "cannot write the model into" in blocked.output
    assert blocked.exception is None or isinstance(blocked.exception, SystemExit)


def test_init_refuses_unsafe_names(cli: click.Group, runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(cli, ["init", str(tiny_onnx(tmp_path / "m.onnx")), "--name", "../x",
                                 "--repo", str(tmp_path / "models")])
    assert result.exit_code == 2 and "invalid model name '../x'" in result.output
    assert not (tmp_path / "x").exists()


def test_push_versions_pull_on_a_directory_store(
    cli: click.Group, runner: CliRunner, tmp_path: Path
) -> None:
    repo, store = tmp_path / "models", tmp_path / "store"
    runner.invoke(cli, ["init", str(tiny_onnx(tmp_path / "a.onnx")), "--name", "digits",
                        "--repo", str(repo)])
    pushed = runner.invoke(cli, ["push", str(repo / "digits"), "--store", str(store)])
    assert pushed.exit_code == 0, pushed.output
    assert "pushed digits version 1" in pushed.output

    noop = runner.invoke(cli, ["push", str(repo / "digits"), "--store", str(store)])
    assert noop.exit_code == 0 and "identical content" in noop.output

    tiny_onnx(repo / "digits" / "1" / "model.onnx", scale=3.0)
    refused = runner.invoke(cli, ["push", str(repo / "digits"), "--store", str(store),
                                  "--version", "1"])
    assert refused.exit_code == 4, refused.output  # 409
    assert "version 1 of model 'digits' already exists" in refused.output
    second = runner.invoke(cli, ["push", str(repo / "digits"), "--store", str(store)])
    assert "pushed digits version 2" in second.output

    listed = runner.invoke(cli, ["versions", "--store", store.as_uri()])
    assert listed.exit_code == 0, listed.output
    lines = [line.split() for line in listed.output.splitlines()]
    assert lines[0][:3] == ["MODEL", "VERSION", "SIZE"]
    assert [row[:2] for row in lines[1:]] == [["digits", "1"], ["digits", "2"]]

    dest = tmp_path / "pulled"
    pulled = runner.invoke(cli, ["pull", "digits:1", str(dest), "--store", str(store)])
    assert pulled.exit_code == 0, pulled.output
    config = (repo / "digits" / "config.pbtxt").read_text()
    assert (dest / "digits" / "config.pbtxt").read_text() == config
    assert (dest / "digits" / "1" / "model.onnx").read_bytes() == (tmp_path / "a.onnx").read_bytes()
    latest = runner.invoke(cli, ["pull", "digits", str(dest), "--store", str(store)])
    assert latest.exit_code == 0 and (dest / "digits" / "2" / "model.onnx").is_file()
    twice = runner.invoke(cli, ["pull", "digits:2", str(dest), "--store", str(store)])
    assert twice.exit_code == 2 and "already exists" in twice.output


def test_errors_exit_with_the_status_code(
    cli: click.Group, runner: CliRunner, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    unknown = runner.invoke(cli, ["pull", "nope:3", str(tmp_path / "d"), "--store", str(store)])
    assert unknown.exit_code == 3 and "'nope'" in unknown.output  # 404
    bad = runner.invoke(cli, ["pull", "digits:zero", str(tmp_path / "d"), "--store", str(store)])
    assert bad.exit_code == 2 and "invalid version 'zero'" in bad.output
    scheme = runner.invoke(cli, ["versions", "--store", "gs://bucket"])
    assert scheme.exit_code == 2 and "unknown scheme 'gs://'" in scheme.output
    missing = runner.invoke(cli, ["push", str(tmp_path)])
    assert missing.exit_code == 2 and "no model store: give it with --store" in missing.output


def test_s3_store_from_the_environment(
    cli: click.Group, runner: CliRunner, tmp_path: Path, emulator: S3Emulator,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bucket = f"cli-{uuid.uuid4().hex[:10]}"
    emulator.create_bucket(bucket)
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                        ("AWS_DEFAULT_REGION", "us-east-1"),
                        ("MODELFN_S3_ENDPOINT", emulator.endpoint_url),
                        ("MODELFN_STORE", f"s3://{bucket}/models")):
        monkeypatch.setenv(name, value)
    repo = tmp_path / "models"
    runner.invoke(cli, ["init", str(tiny_onnx(tmp_path / "a.onnx")), "--name", "digits",
                        "--repo", str(repo)])
    pushed = runner.invoke(cli, ["push", str(repo / "digits")])
    assert pushed.exit_code == 0, pushed.output
    assert f"to s3://{bucket}/models;" in pushed.output
    listed = runner.invoke(cli, ["versions"])
    assert listed.exit_code == 0 and "digits" in listed.output
    pulled = runner.invoke(cli, ["pull", "digits:latest", str(tmp_path / "out")])
    assert pulled.exit_code == 0, pulled.output
    assert (tmp_path / "out" / "digits" / "1" / "model.onnx").is_file()


def test_versions_of_a_store_that_is_not_there_is_an_error(
    cli: click.Group, runner: CliRunner, tmp_path: Path
) -> None:
    result = runner.invoke(cli, ["versions", "--store", str(tmp_path / "nowhere")])
    assert result.exit_code == 3, result.output
    assert f"no model store at {tmp_path / 'nowhere'}" in result.output


def test_versions_of_an_unknown_model_is_an_error(
    cli: click.Group, runner: CliRunner, tmp_path: Path
) -> None:
    (tmp_path / "store").mkdir()
    result = runner.invoke(cli, ["versions", "iris", "--store", str(tmp_path / "store")])
    assert result.exit_code == 3, result.output
    assert (f"model 'iris' has no version in the model store {(tmp_path / 'store').as_uri()} "
            "(it has no models): push one first, modelfn push DIR --store ") in result.output


def test_push_refuses_a_version_that_cannot_serve_and_names_the_users_path(
    cli: click.Group, runner: CliRunner, tmp_path: Path
) -> None:
    model = tmp_path / "models" / "digits"
    (model / "1").mkdir(parents=True)
    tiny_onnx(model / "1" / "model.onnx")
    (model / "config.pbtxt").write_text(
        'name: "digits"\nmax_batch_size: 4\n'
        'input [{ name: "pixels" data_type: TYPE_FP32 dims: [4] }]\n'
        'output [{ name: "y" data_type: TYPE_FP32 dims: [4] }]\n')
    store = tmp_path / "store"
    result = runner.invoke(cli, ["push", str(model), "--store", str(store)])
    assert result.exit_code == 2, result.output
    assert str(model / "config.pbtxt") in result.output
    assert "pixels" in result.output
    assert "tmp" not in result.output.replace(str(tmp_path), "")  # no temporary checkout path
    assert not store.exists() or not list(store.iterdir())  # nothing was claimed


def test_push_under_another_name_puts_that_name_in_the_config(
    cli: click.Group, runner: CliRunner, tmp_path: Path
) -> None:
    """--name wins over the config's `name:`: the config pushed names the model as the
    store does (Triton reads a config only from the directory its name matches), so the
    version pulled back loads as it is; the local config is left as it was."""
    from pathlib import Path as RealPath

    from modelfn.runtime.repository import check_version

    digits = RealPath(__file__).resolve().parents[2] / "examples" / "models" / "digits"
    store = tmp_path / "store"
    result = runner.invoke(cli, ["push", str(digits), "--store", str(store), "--name",
                                 "digits-lambda"])
    assert result.exit_code == 0, result.output
    assert "pushed digits-lambda version 1" in result.output
    local = (digits / "config.pbtxt").read_text()
    assert 'name: "digits"' in local
    assert (store / "digits-lambda" / "config.pbtxt").read_text() == local.replace(
        'name: "digits"', 'name: "digits-lambda"', 1)
    pulled = runner.invoke(cli, ["pull", "digits-lambda:1", str(tmp_path / "out"), "--store",
                                 str(store)])
    assert pulled.exit_code == 0, pulled.output
    assert check_version(tmp_path / "out" / "digits-lambda").name == "digits-lambda"


@pytest.fixture
def s3_store(emulator: S3Emulator, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh bucket on the S3 emulator, and the environment that reaches it."""
    bucket = f"cli-{uuid.uuid4().hex[:10]}"
    emulator.create_bucket(bucket)
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                        ("AWS_DEFAULT_REGION", "us-east-1"),
                        ("MODELFN_S3_ENDPOINT", emulator.endpoint_url)):
        monkeypatch.setenv(name, value)
    return f"s3://{bucket}/models"


def labelled_model(repo: Path, name: str = "digits", labels: bytes | None = b"a\nb\nc\nd\n"
                   ) -> Path:
    model = repo / name
    (model / "1").mkdir(parents=True)
    tiny_onnx(model / "1" / "model.onnx")
    (model / "config.pbtxt").write_text(
        f'name: "{name}"\nmax_batch_size: 4\n'
        'input [{ name: "x" data_type: TYPE_FP32 dims: [4] }]\n'
        'output [{ name: "y" data_type: TYPE_FP32 dims: [4] label_filename: "labels.txt" }]\n')
    if labels is not None:
        (model / "labels.txt").write_bytes(labels)
    return model


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_push_and_pull_carry_the_label_files(
    cli: click.Group, runner: CliRunner, tmp_path: Path, s3_store: str
) -> None:
    model = labelled_model(tmp_path / "models")
    pushed = runner.invoke(cli, ["push", str(model), "--store", s3_store])
    assert pushed.exit_code == 0, pushed.output
    pulled = runner.invoke(cli, ["pull", "digits:1", str(tmp_path / "out"), "--store", s3_store])
    assert pulled.exit_code == 0, pulled.output
    assert tree(tmp_path / "out" / "digits") == tree(model)


def test_push_refuses_a_missing_label_file_before_it_writes(
    cli: click.Group, runner: CliRunner, tmp_path: Path, s3_store: str, emulator: S3Emulator
) -> None:
    model = labelled_model(tmp_path / "models", labels=None)
    emulator.clear_requests()
    result = runner.invoke(cli, ["push", str(model), "--store", s3_store])
    assert result.exit_code == 2, result.output
    assert "output 'y': cannot read label file digits/labels.txt" in result.output
    assert emulator.count("PutObject") == 0, emulator.operations()


def test_pull_refuses_to_replace_a_local_config_that_differs(
    cli: click.Group, runner: CliRunner, tmp_path: Path, s3_store: str
) -> None:
    model = labelled_model(tmp_path / "models")
    assert runner.invoke(cli, ["push", str(model), "--store", s3_store]).exit_code == 0
    dest = tmp_path / "out"
    (dest / "digits").mkdir(parents=True)
    (dest / "digits" / "config.pbtxt").write_text("max_batch_size: 2\n# my local edits\n")
    result = runner.invoke(cli, ["pull", "digits:1", str(dest), "--store", s3_store])
    assert result.exit_code == 4, result.output  # 409
    assert (f"{dest / 'digits' / 'config.pbtxt'} already exists and differs from the one in "
            f"{s3_store}/ (digits:1)") in result.output
    assert tree(dest) == {"digits/config.pbtxt": b"max_batch_size: 2\n# my local edits\n"}

    (dest / "digits" / "config.pbtxt").unlink()
    (dest / "digits" / "config.pbtxt").mkdir()  # the copy would fail half-way: refused first
    again = runner.invoke(cli, ["pull", "digits:1", str(dest), "--store", s3_store])
    assert again.exit_code == 4 and "already exists and differs" in again.output
    assert [p.relative_to(dest).as_posix() for p in dest.rglob("*")] == [
        "digits", "digits/config.pbtxt"]

    # an identical config is no conflict: the version and the missing label file go in
    (dest / "digits" / "config.pbtxt").rmdir()
    shutil.copyfile(model / "config.pbtxt", dest / "digits" / "config.pbtxt")
    fine = runner.invoke(cli, ["pull", "digits:1", str(dest), "--store", s3_store])
    assert fine.exit_code == 0, fine.output
    assert tree(dest / "digits") == tree(model)
    assert not list(dest.rglob(".modelfn-pull-*"))


def test_versions_shows_a_corrupt_manifest_and_lists_the_rest(
    cli: click.Group, runner: CliRunner, tmp_path: Path, s3_store: str, emulator: S3Emulator
) -> None:
    model = labelled_model(tmp_path / "models")
    assert runner.invoke(cli, ["push", str(model), "--store", s3_store]).exit_code == 0
    tiny_onnx(model / "1" / "model.onnx", scale=3.0)
    assert runner.invoke(cli, ["push", str(model), "--store", s3_store]).exit_code == 0
    bucket = s3_store.removeprefix("s3://").split("/")[0]
    emulator.client().put_object(Bucket=bucket, Key="models/digits/1/MANIFEST.json",
                                 Body=b"{not json")
    result = runner.invoke(cli, ["versions", "digits", "--store", s3_store])
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.stdout.splitlines()[1:]]
    assert rows[0] == ["digits", "1", "-", "-", "corrupt", "manifest"]
    assert rows[1][:2] == ["digits", "2"] and rows[1][-2].endswith("+00:00")
    assert (f"warning: digits version 1: corrupt object {s3_store}/digits/1/MANIFEST.json: "
            "not a valid modelfn manifest") in result.stderr


def test_versions_of_a_store_skips_a_directory_that_is_no_model(
    cli: click.Group, runner: CliRunner, tmp_path: Path
) -> None:
    """One stray directory in a store made `versions STORE` fail and list nothing."""
    store = tmp_path / "store"
    model = labelled_model(tmp_path / "models")
    assert runner.invoke(cli, ["push", str(model), "--store", str(store)]).exit_code == 0
    (store / "junk").mkdir()
    result = runner.invoke(cli, ["versions", "--store", str(store)])
    assert result.exit_code == 0, result.output
    assert [line.split()[:2] for line in result.stdout.splitlines()[1:]] == [["digits", "1"]]
    assert f"note: junk/ in file://{store} is not a model (no config.pbtxt, no versions): " \
           "skipped" in result.stderr


@pytest.mark.parametrize(("name", "message"), [
    ("_routes", "invalid model name '_routes': the name is reserved: the model store keeps "
                "its routing tables there"),
    ("a" * 300, "invalid model name 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...': 300 characters, at "
                "most 200 are allowed"),
])
def test_push_pull_and_versions_refuse_a_name_the_store_cannot_hold(
    cli: click.Group, runner: CliRunner, tmp_path: Path, s3_store: str, name: str, message: str
) -> None:
    model = tmp_path / "models" / "digits"
    (model / "1").mkdir(parents=True)
    tiny_onnx(model / "1" / "model.onnx")
    (model / "config.pbtxt").write_text("max_batch_size: 4\n")
    for args in (["push", str(model), "--store", s3_store, "--name", name],
                 ["pull", name, str(tmp_path / "out"), "--store", s3_store],
                 ["versions", name, "--store", s3_store]):
        result = runner.invoke(cli, args)
        assert result.exit_code == 2, result.output
        assert message in result.output and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_versions_and_pull_take_the_store_as_every_command_does(
    cli: click.Group, runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--store (or $MODELFN_STORE), as push, serve, build and deploy take it: a positional
    STORE made `versions digits` mean the store ./digits without the environment."""
    repo, store, other = tmp_path / "models", tmp_path / "store", tmp_path / "other"
    for name in ("digits", "iris"):
        runner.invoke(cli, ["init", str(tiny_onnx(tmp_path / f"{name}.onnx")), "--name", name,
                            "--repo", str(repo)])
        assert runner.invoke(cli, ["push", str(repo / name), "--store", str(store)]).exit_code == 0
    other.mkdir()

    def models(output: str) -> list[str]:
        return sorted({line.split()[0] for line in output.splitlines()[1:] if line.strip()})

    one = runner.invoke(cli, ["versions", "digits", "--store", store.as_uri()])
    assert one.exit_code == 0, one.output
    assert models(one.output) == ["digits"]
    every = runner.invoke(cli, ["versions", "--store", str(store)])
    assert every.exit_code == 0 and models(every.output) == ["digits", "iris"], every.output
    empty = runner.invoke(cli, ["versions", "--store", str(other)])
    assert empty.exit_code == 0 and f"no models in {other.as_uri()}" in empty.output, empty.output
    pulled = runner.invoke(cli, ["pull", "digits:1", str(tmp_path / "out"), "--store",
                                 str(store)])
    assert pulled.exit_code == 0, pulled.output
    assert (tmp_path / "out" / "digits" / "1" / "model.onnx").is_file()

    monkeypatch.setenv("MODELFN_STORE", str(store))
    assert models(runner.invoke(cli, ["versions", "iris"]).output) == ["iris"]
    assert runner.invoke(cli, ["pull", "iris", str(tmp_path / "out")]).exit_code == 0
    assert (tmp_path / "out" / "iris" / "1" / "model.onnx").is_file()
    missing = runner.invoke(cli, ["pull", "digits:1"])
    assert missing.exit_code == 2 and "Missing argument 'DEST'" in missing.output
    old_way = runner.invoke(cli, ["versions", str(store), "digits"])
    assert old_way.exit_code == 2 and "unexpected extra argument" in old_way.output
    for command in ("versions", "pull", "push"):
        helped = runner.invoke(cli, [command, "--help"]).output
        assert "--store URI" in helped and "MODELFN_STORE" in helped, helped


def test_push_takes_the_highest_local_version_and_says_what_the_store_holds(
    cli: click.Group, runner: CliRunner, tmp_path: Path
) -> None:
    """A version 2 made by copying 1/ to 2/ is pushed as version 2 (it was taken for the
    latest version again: "nothing to do"); a --version with no folder says how to make one."""
    repo, store = tmp_path / "models", tmp_path / "store"
    runner.invoke(cli, ["init", str(tiny_onnx(tmp_path / "a.onnx")), "--name", "digits",
                        "--repo", str(repo)])
    model = repo / "digits"
    assert runner.invoke(cli, ["push", str(model), "--store", str(store)]).exit_code == 0
    shutil.copytree(model / "1", model / "2")
    second = runner.invoke(cli, ["push", str(model), "--store", str(store)])
    assert second.exit_code == 0, second.output
    assert second.stdout.startswith("pushed digits version 2 (digest ")
    assert second.stdout.rstrip().endswith(f"to {store.as_uri()}; versions there now: 1, 2")
    again = runner.invoke(cli, ["push", str(model), "--store", str(store)])
    assert again.exit_code == 0, again.output
    assert again.stdout.startswith(f"digits version 2 is already in {store.as_uri()} with "
                                   "identical content")
    assert "nothing to push; versions there: 1, 2, the next free is 3" in again.output

    missing = runner.invoke(cli, ["push", str(model), "--store", str(store), "--version", "3"])
    assert missing.exit_code == 2, missing.output
    assert missing.stderr == (f"Error: {model} has no folder 3/ (its versions: 1, 2): to make "
                              f"version 3, copy one and change it, cp -r {model / '2'} "
                              f"{model / '3'}\n")
    assert not (store / "digits" / "3").exists()


def test_push_of_a_folder_without_a_config_completes_it_as_init_does(
    cli: click.Group, runner: CliRunner, tmp_path: Path
) -> None:
    """push said to run init, init said --force, --force said to move the model away: now
    push writes the config init would have written, says so, and pushes."""
    model, store = tmp_path / "models" / "digits", tmp_path / "store"
    (model / "1").mkdir(parents=True)
    tiny_onnx(model / "1" / "model.onnx")
    result = runner.invoke(cli, ["push", str(model), "--store", str(store)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == (f"wrote {model / 'config.pbtxt'}, completed from "
                        f"{model / '1' / 'model.onnx'} as modelfn init does")
    assert lines[1].startswith("pushed digits version 1") and len(lines) == 2
    runner.invoke(cli, ["init", str(tiny_onnx(tmp_path / "a.onnx")), "--name", "digits",
                        "--repo", str(tmp_path / "init")])
    written = (model / "config.pbtxt").read_text()
    assert written == (tmp_path / "init" / "digits" / "config.pbtxt").read_text()
    assert (store / "digits" / "config.pbtxt").read_text() == written

    bare = tmp_path / "bare"
    bare.mkdir()
    nothing = runner.invoke(cli, ["push", str(bare), "--store", str(store)])
    assert nothing.exit_code == 2, nothing.output
    assert f"{bare} has no version folder (1/, 2/, ...)" in nothing.output


def test_init_of_a_model_folder_writes_only_its_config(
    cli: click.Group, runner: CliRunner, tmp_path: Path
) -> None:
    models = tmp_path / "models"
    model = models / "digits"
    for version in (1, 2):
        (model / str(version)).mkdir(parents=True)
        tiny_onnx(model / str(version) / "model.onnx", scale=float(version))
    made = runner.invoke(cli, ["init", str(model)])
    assert made.exit_code == 0, made.output
    assert made.output.splitlines()[0] == (f"created {model / 'config.pbtxt'}, completed from "
                                           f"{model / '2' / 'model.onnx'}")
    assert parse_config((model / "config.pbtxt").read_text()).name == "digits"
    again = runner.invoke(cli, ["init", str(model)])
    assert again.exit_code == 2
    assert f"{model / 'config.pbtxt'} already exists; pass --force" in again.output
    assert runner.invoke(cli, ["init", str(model), "--force"]).exit_code == 0
    renamed = runner.invoke(cli, ["init", str(model), "--name", "other", "--force"])
    assert renamed.exit_code == 2 and "leave --name out, or rename the folder" in renamed.output

    # its model file named as init takes it: the config, no --force, the model left in place
    (model / "config.pbtxt").unlink()
    before = (model / "1" / "model.onnx").read_bytes()
    own = runner.invoke(cli, ["init", str(model / "1" / "model.onnx"), "--name", "digits",
                              "--repo", str(models)])
    assert own.exit_code == 0, own.output
    assert (model / "config.pbtxt").is_file()
    assert (model / "1" / "model.onnx").read_bytes() == before
    assert sorted(p.name for p in model.iterdir()) == ["1", "2", "config.pbtxt"]

    # another model file into a folder that holds versions without a config: --force, or
    # init of the folder
    (model / "config.pbtxt").unlink()
    other = runner.invoke(cli, ["init", str(tiny_onnx(tmp_path / "b.onnx")), "--name",
                                "digits", "--repo", str(models)])
    assert other.exit_code == 2, other.output
    assert f"or run modelfn init {model} to complete its config" in other.output
