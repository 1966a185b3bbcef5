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
from modelfn.runtime.config import parse_config

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
    from modelfn.runtime.config import load_config

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
    own = runner.invoke(cli, ["init", str(models / "digits" / "1" / "model.onnx"), "--name",
                              "digits", "--repo", str(models), "--force"])
    assert own.exit_code == 2 and "which --force would replace" in own.output
    assert (models / "digits" / "1" / "model.onnx").read_bytes() == onnx.read_bytes()
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

    listed = runner.invoke(cli, ["versions", store.as_uri()])
    assert listed.exit_code == 0, listed.output
    lines = [line.split() for line in listed.output.splitlines()]
    assert lines[0][:3] == ["MODEL", "VERSION", "SIZE"]
    assert [row[:2] for row in lines[1:]] == [["digits", "1"], ["digits", "2"]]

    dest = tmp_path / "pulled"
    pulled = runner.invoke(cli, ["pull", str(store), "digits:1", str(dest)])
    assert pulled.exit_code == 0, pulled.output
    config = (repo / "digits" / "config.pbtxt").read_text()
    assert (dest / "digits" / "config.pbtxt").read_text() == config
    assert (dest / "digits" / "1" / "model.onnx").read_bytes() == (tmp_path / "a.onnx").read_bytes()
    latest = runner.invoke(cli, ["pull", str(store), "digits", str(dest)])
    assert latest.exit_code == 0 and (dest / "digits" / "2" / "model.onnx").is_file()
    twice = runner.invoke(cli, ["pull", str(store), "digits:2", str(dest)])
    assert twice.exit_code == 2 and "already exists" in twice.output


def test_errors_exit_with_the_status_code(
    cli: click.Group, runner: CliRunner, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    unknown = runner.invoke(cli, ["pull", str(store), "nope:3", str(tmp_path / "d")])
    assert unknown.exit_code == 3 and "'nope'" in unknown.output  # 404
    bad = runner.invoke(cli, ["pull", str(store), "digits:zero", str(tmp_path / "d")])
    assert bad.exit_code == 2 and "invalid version 'zero'" in bad.output
    scheme = runner.invoke(cli, ["versions", "gs://bucket"])
    assert scheme.exit_code == 2 and "unknown scheme 'gs://'" in scheme.output
    missing = runner.invoke(cli, ["push", str(tmp_path)])
    assert missing.exit_code == 2 and "Missing option '--store'" in missing.output


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
    assert f"to s3://{bucket}/models/" in pushed.output
    listed = runner.invoke(cli, ["versions"])
    assert listed.exit_code == 0 and "digits" in listed.output
    pulled = runner.invoke(cli, ["pull", f"s3://{bucket}/models", "digits:latest",
                                 str(tmp_path / "out")])
    assert pulled.exit_code == 0, pulled.output
    assert (tmp_path / "out" / "digits" / "1" / "model.onnx").is_file()


def test_versions_of_a_store_that_is_not_there_is_an_error(
    cli: click.Group, runner: CliRunner, tmp_path: Path
) -> None:
    result = runner.invoke(cli, ["versions", str(tmp_path / "nowhere")])
    assert result.exit_code == 3, result.output
    assert f"no model store at {tmp_path / 'nowhere'}" in result.output


def test_versions_of_an_unknown_model_is_an_error(
    cli: click.Group, runner: CliRunner, tmp_path: Path
) -> None:
    (tmp_path / "store").mkdir()
    result = runner.invoke(cli, ["versions", str(tmp_path / "store"), "iris"])
    assert result.exit_code == 3, result.output
    assert "'iris' is not found" in result.output


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


def test_push_under_another_name_than_the_config_says_is_refused(
    cli: click.Group, runner: CliRunner, tmp_path: Path
) -> None:
    from pathlib import Path as RealPath

    digits = RealPath(__file__).resolve().parents[2] / "examples" / "models" / "digits"
    store = tmp_path / "store"
    result = runner.invoke(cli, ["push", str(digits), "--store", str(store), "--name",
                                 "digits-lambda"])
    assert result.exit_code == 2, result.output
    assert ("config name 'digits' does not match the name it is pushed as, 'digits-lambda'"
            in result.output)
    assert not store.exists() or not any(store.iterdir())  # nothing was claimed


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
    pulled = runner.invoke(cli, ["pull", s3_store, "digits:1", str(tmp_path / "out")])
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
    result = runner.invoke(cli, ["pull", s3_store, "digits:1", str(dest)])
    assert result.exit_code == 4, result.output  # 409
    assert (f"{dest / 'digits' / 'config.pbtxt'} already exists and differs from the one in "
            f"{s3_store}/ (digits:1)") in result.output
    assert tree(dest) == {"digits/config.pbtxt": b"max_batch_size: 2\n# my local edits\n"}

    (dest / "digits" / "config.pbtxt").unlink()
    (dest / "digits" / "config.pbtxt").mkdir()  # the copy would fail half-way: refused first
    again = runner.invoke(cli, ["pull", s3_store, "digits:1", str(dest)])
    assert again.exit_code == 4 and "already exists and differs" in again.output
    assert [p.relative_to(dest).as_posix() for p in dest.rglob("*")] == [
        "digits", "digits/config.pbtxt"]

    # an identical config is no conflict: the version and the missing label file go in
    (dest / "digits" / "config.pbtxt").rmdir()
    shutil.copyfile(model / "config.pbtxt", dest / "digits" / "config.pbtxt")
    fine = runner.invoke(cli, ["pull", s3_store, "digits:1", str(dest)])
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
    result = runner.invoke(cli, ["versions", s3_store, "digits"])
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
    result = runner.invoke(cli, ["versions", str(store)])
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
                 ["pull", s3_store, name, str(tmp_path / "out")],
                 ["versions", s3_store, name]):
        result = runner.invoke(cli, args)
        assert result.exit_code == 2, result.output
        assert message in result.output and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_one_argument_is_the_model_name_when_the_store_is_in_the_environment(
    cli: click.Group, runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, store, other = tmp_path / "models", tmp_path / "store", tmp_path / "other"
    for name in ("digits", "iris"):
        runner.invoke(cli, ["init", str(tiny_onnx(tmp_path / f"{name}.onnx")), "--name", name,
                            "--repo", str(repo)])
        assert runner.invoke(cli, ["push", str(repo / name), "--store", str(store)]).exit_code == 0
    other.mkdir()
    monkeypatch.setenv("MODELFN_STORE", str(store))

    def models(output: str) -> list[str]:
        return sorted({line.split()[0] for line in output.splitlines()[1:] if line.strip()})

    one = runner.invoke(cli, ["versions", "digits"])
    assert one.exit_code == 0, one.output
    assert models(one.output) == ["digits"]
    every = runner.invoke(cli, ["versions"])
    assert every.exit_code == 0 and models(every.output) == ["digits", "iris"], every.output
    # a store URI or an existing path is still STORE
    assert models(runner.invoke(cli, ["versions", store.as_uri()]).output) == ["digits", "iris"]
    empty = runner.invoke(cli, ["versions", str(other)])
    assert empty.exit_code == 0 and f"no models in {other.as_uri()}" in empty.output, empty.output
    both = runner.invoke(cli, ["versions", str(store), "iris"])
    assert models(both.output) == ["iris"]
    unknown = runner.invoke(cli, ["versions", "resnet"])
    assert unknown.exit_code == 3 and "'resnet' is not found" in unknown.output

    pulled = runner.invoke(cli, ["pull", "digits:1", str(tmp_path / "out")])
    assert pulled.exit_code == 0, pulled.output
    assert (tmp_path / "out" / "digits" / "1" / "model.onnx").is_file()
    missing = runner.invoke(cli, ["pull", str(store), "digits:1"])
    assert missing.exit_code == 2 and "Missing argument 'DEST'" in missing.output

    helped = runner.invoke(cli, ["versions", "--help"])
    assert "[STORE] [NAME]" in helped.output and "$MODELFN_STORE" in helped.output


def test_without_the_environment_the_one_argument_is_the_store(
    cli: click.Group, runner: CliRunner
) -> None:
    result = runner.invoke(cli, ["versions", "digits"])
    assert result.exit_code == 3 and "no model store at " in result.output, result.output
    assert "digits:" in result.output
    bare = runner.invoke(cli, ["versions"])
    assert bare.exit_code == 2 and "Missing argument 'STORE'" in bare.output
