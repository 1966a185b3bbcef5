"""Build contexts, the builder table, command lines and failures, without a container engine.

``fake_builder`` puts a small ``podman`` script on PATH that records its arguments and
writes the ``--iidfile`` and ``--digestfile`` a real one would, so ``build_image`` and the
CLI run end to end here; ``test_real_buildah_failure_carries_the_output_tail`` runs the real
buildah when it is installed.
"""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from click.testing import CliRunner
from ensemble_repos import ensemble_config, save_ensemble, step, tensor
from onnx_models import save, simple_graph
from pipeline_models import pipeline_repository

from modelfn.cli.build import build
from modelfn.deploy.build import (
    MODEL_REQUIREMENTS,
    BuildPlan,
    BuildResult,
    build_image,
    render_context,
)
from modelfn.deploy.builders import (
    BUILDERS,
    ORDER,
    TAIL_LINES,
    Builder,
    BuildRequest,
    run_streaming,
    select_builder,
)
from modelfn.deploy.errors import BuildError
from modelfn.deploy.wheel import source_digest, source_root
from modelfn.localstack.s3 import S3Emulator
from modelfn.model_store import open_store
from modelfn.platforms.podman import Storage
from modelfn.runtime.errors import InvalidInput, ModelfnError, ModelNotFound

if TYPE_CHECKING:
    from collections.abc import Callable

IMAGE_ID = "sha256:" + "1" * 64
DIGEST = "sha256:" + "2" * 64
METADATA = """Metadata-Version: 2.1
Name: modelfn
Version: 0.1.0
Requires-Dist: click>=8.1
Requires-Dist: numpy>=1.26
Requires-Dist: onnxruntime>=1.18
Requires-Dist: onnx>=1.16
Requires-Dist: orjson>=3.9
Requires-Dist: starlette>=0.37
Requires-Dist: uvicorn[standard]>=0.29
Requires-Dist: uvloop>=0.19; sys_platform != "win32"
Requires-Dist: httptools>=0.6
Requires-Dist: boto3>=1.34
Requires-Dist: anyio>=4
Requires-Dist: onnxruntime-gpu<1.27,>=1.18; extra == "gpu"
Requires-Dist: tensorrt-cu12<11,>=10; extra == "gpu"
Requires-Dist: cuda-python<13,>=12; extra == "gpu"
Requires-Dist: awslambdaric>=3; extra == "lambda"
Requires-Dist: mangum>=0.17; python_version >= "3.11" and extra == "lambda"
Requires-Dist: aws-lambda-powertools>=3; extra == "lambda"
Requires-Dist: grpcio>=1.66; extra == "grpc"
Requires-Dist: protobuf>=6.33.5; extra == "grpc"
Requires-Dist: pytest>=8; extra == "dev"
Requires-Dist: grpcio>=1.60; extra == "dev"
"""
RUNTIME = ["numpy>=1.26", "onnxruntime>=1.18", "orjson>=3.9", "starlette>=0.37", "anyio>=4"]
HTTP = ["uvicorn>=0.29", 'uvloop>=0.19; sys_platform != "win32"', "httptools>=0.6",
        "grpcio>=1.66", "protobuf>=6.33.5"]
LAMBDA = ['mangum>=0.17; python_version >= "3.11"', "aws-lambda-powertools>=3"]

FAKE_BUILDER = """#!{python}
import json, os, pathlib, sys
args = sys.argv[1:]
with open(os.environ["FAKE_BUILDER_LOG"], "a") as log:
    log.write(json.dumps([os.path.basename(sys.argv[0]), *args]) + "\\n")
def value(flag):
    return args[args.index(flag) + 1]
if "build" in args or "bud" in args:
    for step in range(100):
        print(f"STEP {{step}}: RUN something")
    if os.environ.get("FAKE_BUILDER_FAIL"):
        print("Error: building at STEP 100: exit status 7", file=sys.stderr)
        sys.exit(7)
    pathlib.Path(value("--iidfile")).write_text("{image_id}\\n")
elif "push" in args:
    print("Copying blob ... done")
    pathlib.Path(value("--digestfile")).write_text("{digest}")
"""


@pytest.fixture
def fake_wheel(tmp_path: Path) -> Path:
    wheel = tmp_path / "wheels" / "modelfn-0.1.0-py3-none-any.whl"
    wheel.parent.mkdir()
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("modelfn-0.1.0.dist-info/METADATA", METADATA)
    return wheel


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "models"
    save(repo / "simple", simple_graph(), version=1)
    save(repo / "simple", simple_graph(scale=2.0), version=2, config="max_batch_size: 8\n")
    return repo


@pytest.fixture
def fake_builder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[], list[list[str]]]:
    """A fake ``podman`` and ``buildah`` on PATH; returns a reader of their recorded calls."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = FAKE_BUILDER.format(python=sys.executable, image_id=IMAGE_ID, digest=DIGEST)
    for tool in ("podman", "buildah"):
        (bin_dir / tool).write_text(script)
        (bin_dir / tool).chmod(0o755)
    log = tmp_path / "builder.log"
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_BUILDER_LOG", str(log))
    monkeypatch.delenv("MODELFN_STORAGE_ROOT", raising=False)

    def calls() -> list[list[str]]:
        if not log.exists():
            return []
        return [json.loads(line) for line in log.read_text().splitlines()]

    return calls


# --- build contexts -------------------------------------------------------------------------


def test_baked_context_holds_the_version_config_wheel_and_requirements(
    tmp_path: Path, repo: Path, fake_wheel: Path
) -> None:
    context = tmp_path / "ctx"
    containerfile = render_context(BuildPlan("simple", 2), context, fake_wheel, repository=repo)
    assert containerfile == context / "Containerfile"
    files = sorted(p.relative_to(context).as_posix() for p in context.rglob("*") if p.is_file())
    assert files == ["Containerfile", "modelfn-0.1.0-py3-none-any.whl",
                     "models/simple/2/model.onnx", "models/simple/config.pbtxt",
                     "requirements.txt"]
    # what the HTTP entrypoint imports, gRPC included; not the CLI's click, onnx or boto3
    assert (context / "requirements.txt").read_text().splitlines() == RUNTIME + HTTP
    model = context / "models/simple/2/model.onnx"
    assert stat.S_IMODE(model.stat().st_mode) == 0o644
    assert stat.S_IMODE(model.parent.stat().st_mode) == 0o755
    assert 'MODELFN_MODELS="simple:2"' in containerfile.read_text()


def test_store_context_has_no_models(tmp_path: Path, fake_wheel: Path) -> None:
    plan = BuildPlan("simple", 4, target="lambda", bake=False, store_uri="s3://b/p")
    containerfile = render_context(plan, tmp_path / "ctx", fake_wheel)
    assert not (tmp_path / "ctx" / "models").exists()
    assert 'MODELFN_STORE="s3://b/p"' in containerfile.read_text()
    reqs = (tmp_path / "ctx" / "requirements.txt").read_text().splitlines()
    # the AWS base ships its own runtime interface client; boto3 fetches from S3
    assert reqs == RUNTIME + LAMBDA + ["boto3>=1.34"]


@pytest.mark.parametrize("store", [None, "file:///models"])
def test_a_baked_or_file_store_image_has_no_boto3(store: str | None, fake_wheel: Path) -> None:
    plan = BuildPlan("simple", 1, bake=store is None, store_uri=store)
    assert plan.requirements(fake_wheel) == RUNTIME + HTTP


def test_gpu_requirements_never_mix_cpu_and_gpu_onnxruntime(fake_wheel: Path) -> None:
    plan = BuildPlan("simple", 1, gpu=True)
    assert plan.requirements(fake_wheel) == [
        *(r for r in RUNTIME if not r.startswith("onnxruntime")), "onnxruntime-gpu<1.27,>=1.18",
        "tensorrt-cu12<11,>=10", "cuda-python<13,>=12", *HTTP]


def test_lambda_on_a_custom_base_gets_awslambdaric(fake_wheel: Path) -> None:
    plan = BuildPlan("simple", 1, target="lambda", base="localhost/debian:bookworm")
    assert plan.requirements(fake_wheel) == RUNTIME + LAMBDA + ["awslambdaric>=3"]


def test_missing_version_and_missing_sources_are_clear_errors(
    tmp_path: Path, repo: Path, fake_wheel: Path
) -> None:
    with pytest.raises(ModelNotFound):
        render_context(BuildPlan("simple", 9), tmp_path / "a", fake_wheel, repository=repo)
    with pytest.raises(InvalidInput, match="store URI"):
        BuildPlan("simple", 1, bake=False)
    with pytest.raises(InvalidInput, match="unknown target"):
        BuildPlan("simple", 1, target="knative")  # type: ignore[arg-type]


def test_default_tags_and_references() -> None:
    assert BuildPlan("simple", 3).default_tag == "modelfn/simple:3-http"
    assert BuildPlan("simple", 3, target="lambda", gpu=True).default_tag == (
        "modelfn/simple:3-lambda-gpu")
    pushed = BuildResult("127.0.0.1:5000/modelfn/simple:3-http", DIGEST, IMAGE_ID, "podman",
                         Path("."))
    assert pushed.reference == f"127.0.0.1:5000/modelfn/simple@{DIGEST}"
    local = BuildResult("127.0.0.1:5000/simple", None, IMAGE_ID, "podman", Path("."))
    assert local.reference == "127.0.0.1:5000/simple"


def test_wheel_source_digest_tracks_the_source_tree() -> None:
    root = source_root()
    assert root is not None and (root / "deploy" / "build.py").is_file()
    assert source_digest(root) == source_digest(root)


# --- builders -------------------------------------------------------------------------------


def fake_table(available: set[str]) -> dict[str, Builder]:
    def probe(name: str) -> Callable[[], bool]:
        return lambda: name in available

    return {name: Builder(name, probe(name), b.build, b.push, b.digest)
            for name, b in BUILDERS.items()}


@pytest.mark.parametrize(
    ("available", "chosen"),
    [({"docker", "podman", "buildah"}, "docker"), ({"podman", "buildah"}, "podman"),
     ({"buildah"}, "buildah")],
)
def test_first_available_builder_wins(available: set[str], chosen: str) -> None:
    assert ORDER == ("docker", "podman", "buildah")
    assert select_builder(None, fake_table(available)).name == chosen


def test_builder_selection_errors() -> None:
    with pytest.raises(BuildError, match="no image builder found"):
        select_builder(None, fake_table(set()))
    with pytest.raises(BuildError, match="'docker' is not available"):
        select_builder("docker", fake_table({"podman"}))
    with pytest.raises(InvalidInput, match="unknown builder 'kaniko'"):
        select_builder("kaniko", fake_table({"podman"}))
    assert select_builder("buildah", fake_table({"podman", "buildah"})).name == "buildah"


def test_build_command_lines() -> None:
    request = BuildRequest(Path("/ctx"), Path("/ctx/Containerfile"), "r/m:1-http",
                           {"BASE": "b:1"}, tls_verify=False, iidfile=Path("/x/iid"),
                           timestamp=0)
    storage = Storage(Path("/s"), "vfs", "chroot")
    common = ["--file", "/ctx/Containerfile", "--tag", "r/m:1-http", "--build-arg", "BASE=b:1",
              "--iidfile", "/x/iid", "/ctx"]
    stores = ["--root", "/s/root", "--runroot", "/s/run", "--storage-driver", "vfs"]
    assert BUILDERS["docker"].build(request, storage) == [
        "docker", "buildx", "build", "--provenance=false", "--load",
        "--build-arg", "SOURCE_DATE_EPOCH=0", *common]
    assert BUILDERS["podman"].build(request, storage) == [
        "podman", *stores, "build", "--format", "oci", "--isolation", "chroot",
        "--tls-verify=false", "--timestamp", "0", *common]
    assert BUILDERS["buildah"].build(request, storage) == [
        "buildah", *stores, "bud", "--format", "oci", "--layers", "--isolation", "chroot",
        "--tls-verify=false", "--timestamp", "0", *common]
    assert BUILDERS["podman"].build(request, Storage())[:3] == ["podman", "build", "--format"]


def test_push_and_digest_command_lines() -> None:
    storage = Storage(Path("/s"))
    digestfile = Path("/x/digest")
    stores = ["--root", "/s/root", "--runroot", "/s/run"]
    for tool in ("podman", "buildah"):
        assert BUILDERS[tool].push("r:5000/m:1", storage, False, digestfile) == [
            tool, *stores, "push", "--tls-verify=false", "--digestfile", "/x/digest",
            "r:5000/m:1", "docker://r:5000/m:1"]
        assert BUILDERS[tool].digest is None
    assert BUILDERS["podman"].push("r/m:1", storage, True, digestfile)[5:7] == [
        "push", "--digestfile"]
    assert BUILDERS["docker"].push("r/m:1", storage, False, digestfile) == [
        "docker", "push", "r/m:1"]
    digest = BUILDERS["docker"].digest
    assert digest is not None and digest("r/m:1", storage)[:3] == ["docker", "image", "inspect"]


def test_storage_from_env() -> None:
    storage = Storage.from_env({"MODELFN_STORAGE_ROOT": "/t", "MODELFN_STORAGE_DRIVER": "vfs",
                                "MODELFN_BUILD_ISOLATION": "chroot"})
    assert storage == Storage(Path("/t"), "vfs", "chroot")
    assert Storage.from_env({}) == Storage()


# --- running builds -------------------------------------------------------------------------


def test_build_image_builds_pushes_and_reports_the_digest(
    tmp_path: Path, repo: Path, fake_wheel: Path, fake_builder: Callable[[], list[list[str]]]
) -> None:
    lines: list[str] = []
    result = build_image(
        "simple", repository=repo, bake=True, push="127.0.0.1:5000", builder="podman",
        tls_verify=False, progress=lines.append, wheel=fake_wheel,
        storage=Storage(tmp_path / "s", "vfs", "chroot"), context_dir=tmp_path / "ctx",
    )
    assert result.image == "127.0.0.1:5000/modelfn/simple:2-http"
    assert (result.digest, result.image_id, result.builder) == (DIGEST, IMAGE_ID, "podman")
    assert result.reference == f"127.0.0.1:5000/modelfn/simple@{DIGEST}"
    assert result.context == tmp_path / "ctx"
    assert (result.context / "models/simple/2/model.onnx").is_file()
    assert lines[:2] == ["STEP 0: RUN something", "STEP 1: RUN something"]
    assert lines[-1] == "Copying blob ... done"
    build_call, push_call = fake_builder()
    assert build_call[0] == "podman" and "build" in build_call
    assert build_call[-1] == str(tmp_path / "ctx")
    assert "BASE=docker.io/library/python:3.12-slim" in build_call
    assert push_call[-2:] == [result.image, f"docker://{result.image}"]


def test_build_image_bakes_from_a_store(
    tmp_path: Path, repo: Path, fake_wheel: Path, fake_builder: Callable[[], list[list[str]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MODELFN_CACHE_DIR", str(tmp_path / "cache"))
    store_uri = f"file://{tmp_path / 'store'}"
    open_store(store_uri).push(repo / "simple", version=2)
    result = build_image("simple", "latest", store_uri=store_uri, bake=True, target="lambda",
                         base="localhost/debian:bookworm", builder="buildah",
                         wheel=fake_wheel, context_dir=tmp_path / "ctx")
    assert result.image == "modelfn/simple:2-lambda" and result.digest is None
    assert (result.context / "models/simple/2/model.onnx").is_file()
    assert "MODELFN_STORE" not in (result.context / "Containerfile").read_text()
    assert fake_builder()[0][:2] == ["buildah", "bud"]


def test_failed_build_raises_build_error_with_the_output_tail(
    tmp_path: Path, repo: Path, fake_wheel: Path, fake_builder: Callable[[], list[list[str]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Uses the fake builder script on PATH (see the module docstring)."""
    monkeypatch.setenv("FAKE_BUILDER_FAIL", "1")
    with pytest.raises(BuildError) as caught:
        build_image("simple", 1, repository=repo, builder="podman", push="r:5000",
                    wheel=fake_wheel, context_dir=tmp_path / "ctx")
    error = caught.value
    assert isinstance(error, ModelfnError) and error.status_code == 500
    assert error.returncode == 7
    assert len(error.output_tail) == TAIL_LINES
    assert error.output_tail[-1] == "Error: building at STEP 100: exit status 7"
    assert error.output_tail[0] == f"STEP {100 - TAIL_LINES + 1}: RUN something"
    assert "podman build failed" in error.message and "exit status 7" in error.message
    assert len(fake_builder()) == 1  # nothing pushed


def test_missing_program_is_a_build_error() -> None:
    with pytest.raises(BuildError, match="cannot run"):
        run_streaming(["/nonexistent/buildah", "bud"], "buildah build")


@pytest.mark.skipif(shutil.which("buildah") is None, reason="buildah is not installed")
def test_real_buildah_failure_carries_the_output_tail(
    tmp_path: Path, container_global_state: None
) -> None:
    """A real buildah on a Containerfile with an unknown instruction (no image is pulled)."""
    context = tmp_path / "ctx"
    context.mkdir()
    (context / "Containerfile").write_text("FROM scratch\nFROBNICATE the image\n")
    storage = Storage(tmp_path / "storage", "vfs", "chroot")
    request = BuildRequest(context, context / "Containerfile", "localhost/broken:1")
    try:
        with pytest.raises(BuildError) as caught:
            run_streaming(BUILDERS["buildah"].build(request, storage), "buildah build")
    finally:
        subprocess.run(["buildah", *storage.global_args(), "rm", "--all"], capture_output=True,
                       check=False)
    assert caught.value.returncode not in (0, None)
    assert any("FROBNICATE" in line.upper() for line in caught.value.output_tail)


# --- the CLI --------------------------------------------------------------------------------


def test_cli_build_prints_the_pushed_reference(
    tmp_path: Path, repo: Path, fake_wheel: Path, fake_builder: Callable[[], list[list[str]]]
) -> None:
    result = CliRunner().invoke(build, [
        "simple:1", "--repo", str(repo), "--bake", "--builder", "podman", "--push",
        "127.0.0.1:5000", "--no-tls-verify", "--wheel", str(fake_wheel), "--storage-root",
        str(tmp_path / "s"), "--storage-driver", "vfs", "--isolation", "chroot",
    ])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"127.0.0.1:5000/modelfn/simple@{DIGEST}"
    assert "STEP 99: RUN something" in result.stderr
    build_call = fake_builder()[0]
    assert build_call[1:8] == ["--root", str(tmp_path / "s" / "root"), "--runroot",
                               str(tmp_path / "s" / "run"), "--storage-driver", "vfs", "build"]


def test_cli_store_image_without_bake(
    tmp_path: Path, repo: Path, fake_wheel: Path, fake_builder: Callable[[], list[list[str]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The image names the store and the version; the build reads the version's manifest
    (what the function serves), nothing else."""
    with S3Emulator() as emulator:
        emulator.create_bucket("models")
        for name, value in (("AWS_ACCESS_KEY_ID", "testing"),
                            ("AWS_SECRET_ACCESS_KEY", "testing"),
                            ("AWS_DEFAULT_REGION", "us-east-1"),
                            ("MODELFN_S3_ENDPOINT", emulator.endpoint_url),
                            ("MODELFN_CACHE", str(tmp_path / "cache"))):
            monkeypatch.setenv(name, value)
        open_store("s3://models/prod").push(repo / "simple", version=2)
        emulator.clear_requests()
        result = CliRunner().invoke(build, [
            "simple:2", "--store", "s3://models/prod", "--entrypoint", "lambda", "--builder",
            "buildah", "--wheel", str(fake_wheel), "--keep-context", str(tmp_path / "ctx"),
            "-q"])
        assert emulator.operations() == {"GetObject": 2}  # the manifest: composing, backend
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "modelfn/simple:2-lambda"
    assert result.stderr == ""
    text = (tmp_path / "ctx" / "Containerfile").read_text()
    assert 'MODELFN_STORE="s3://models/prod"' in text and "COPY models/" not in text
    assert "model-requirements.txt" not in text


def test_cli_target_is_a_deprecated_alias_of_entrypoint(
    tmp_path: Path, repo: Path, fake_wheel: Path, fake_builder: Callable[[], list[list[str]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`build --target lambda` (deploy's word for a platform) still builds the Lambda image,
    with one warning line; --help shows --entrypoint only."""
    monkeypatch.setenv("MODELFN_CACHE", str(tmp_path / "cache"))
    store = f"file://{tmp_path / 'store'}"
    open_store(store).push(repo / "simple", version=2)
    args = ["simple:2", "--store", store, "--builder", "buildah", "--wheel",
            str(fake_wheel), "-q"]
    old = CliRunner().invoke(build, [*args, "--target", "lambda"])
    assert old.exit_code == 0, old.output
    assert old.stdout.strip() == "modelfn/simple:2-lambda"
    assert old.stderr == ("warning: modelfn build --target is deprecated, use --entrypoint "
                          "lambda (--target names where `modelfn deploy` puts a function)\n")
    both = CliRunner().invoke(build, [*args, "--target", "lambda", "--entrypoint", "http"])
    assert both.exit_code == 2 and "disagree: give --entrypoint only" in both.stderr
    shown = CliRunner().invoke(build, ["--help"]).stdout
    assert "--entrypoint [http|lambda]" in shown and "--target [" not in shown


def test_cli_build_errors_exit_non_zero(
    tmp_path: Path, repo: Path, fake_wheel: Path, fake_builder: Callable[[], list[list[str]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runner = CliRunner()
    missing = runner.invoke(build, ["simple"])
    assert missing.exit_code == 2, missing.output
    assert missing.output.startswith("Error: no model store: give it with --store URI")
    assert "or a local repository with --repo DIR" in missing.output
    monkeypatch.setenv("FAKE_BUILDER_FAIL", "1")
    failed = runner.invoke(build, ["simple:1", "--repo", str(repo), "--bake", "--builder",
                                   "podman", "--wheel", str(fake_wheel), "-q"])
    assert failed.exit_code == 1
    assert "Error: podman build failed" in failed.stderr
    assert "exit status 7" in failed.stderr
    unknown = runner.invoke(build, ["simple:9", "--repo", str(repo), "--builder", "podman",
                                    "--wheel", str(fake_wheel)])
    assert unknown.exit_code == 3  # --repo alone implies --bake, and there is no version 9


def test_a_failure_streamed_to_progress_is_not_repeated_in_the_error(
    tmp_path: Path, repo: Path, fake_wheel: Path, fake_builder: Callable[[], list[list[str]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The builder's output was shown line by line: the error names the command only (it
    used to print the registry's error twice). Uses the fake builder script on PATH."""
    monkeypatch.setenv("FAKE_BUILDER_FAIL", "1")
    shown: list[str] = []
    with pytest.raises(BuildError) as caught:
        build_image("simple", 1, repository=repo, builder="podman", push="r:5000",
                    wheel=fake_wheel, context_dir=tmp_path / "ctx", progress=shown.append)
    assert shown[-1] == "Error: building at STEP 100: exit status 7"
    assert caught.value.output_tail == []
    assert caught.value.message.count("exit status 7") == 1


def test_pip_cert_comes_from_pips_own_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                               ) -> None:
    """Only the option wiring: build_image is replaced to capture what the CLI passes (a
    real build with a CA bundle is the image test's job)."""
    from click.testing import CliRunner

    from modelfn.cli.build import build

    cert = tmp_path / "proxy-ca.pem"
    cert.write_text("-----BEGIN CERTIFICATE-----\n")
    monkeypatch.setenv("PIP_CERT", str(cert))
    monkeypatch.delenv("MODELFN_PIP_CERT", raising=False)
    seen: dict[str, object] = {}

    def fake_build_image(*args: object, **kwargs: object) -> None:
        seen.update(kwargs)
        raise BuildError("stop here")

    monkeypatch.setattr("modelfn.deploy.build.build_image", fake_build_image)
    result = CliRunner().invoke(build, ["simple:1", "--repo", str(tmp_path)])
    assert seen["pip_cert"] == cert, result.output


def test_layers_get_a_fixed_time(monkeypatch: pytest.MonkeyPatch) -> None:
    from modelfn.deploy.build import source_date_epoch

    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    assert source_date_epoch() == 0
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    assert source_date_epoch() == 1700000000
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "yesterday")
    with pytest.raises(InvalidInput, match="SOURCE_DATE_EPOCH"):
        source_date_epoch()


# --- a function's models: an ensemble and its Python models' requirements ------------------


def test_an_ensemble_image_holds_its_models_and_their_python_requirements(
    tmp_path: Path, fake_wheel: Path, fake_builder: Callable[[], list[list[str]]]
) -> None:
    """Baked from a local repository: every model the function serves (the ensemble's own
    first), MODELFN_MODELS in load order, and the union of the Python models'
    requirements.txt installed in a build step of its own, with modelfn's pins as
    constraints, then added to the image's dependencies as a layer of its own."""
    repo = pipeline_repository(tmp_path / "models", requirements="numpy\npackaging>=20\n")
    (repo / "tenfold" / "requirements.txt").write_text("packaging>=20  # shared\nsix\n")
    result = build_image("pipeline", 1, repository=repo, builder="podman", wheel=fake_wheel,
                         context_dir=tmp_path / "ctx")
    context = result.context
    assert sorted(p.name for p in (context / "models").iterdir()) == [
        "add", "pipeline", "tenfold"]
    assert (context / "models/tenfold/1/model.py").is_file()
    assert (context / "models/pipeline/1").is_dir()
    assert (context / MODEL_REQUIREMENTS).read_text().splitlines() == [
        "packaging>=20", "six", "numpy"]
    text = (context / "Containerfile").read_text()
    assert 'MODELFN_MODELS="add:1,tenfold:1,pipeline:1"' in text
    build_stage, image = text.split("# --- the image")
    install = build_stage[build_stage.index("COPY model-requirements.txt"):]
    assert "--target /opt/modelfn/model-deps" in install
    assert "--constraint /opt/modelfn/requirements.txt" in install
    assert "--requirement /opt/modelfn/model-requirements.txt" in install
    lines = image.splitlines()
    deps = lines.index("COPY --from=build /opt/modelfn/deps /opt/modelfn/deps")
    assert lines[deps + 1] == "COPY --from=build /opt/modelfn/model-deps /opt/modelfn/deps"
    assert fake_builder()[0][0] == "podman"


def test_a_function_without_python_models_gets_no_requirements_step(
    tmp_path: Path, repo: Path, fake_wheel: Path
) -> None:
    containerfile = render_context(BuildPlan("simple", 2), tmp_path / "ctx", fake_wheel,
                                   repository=repo)
    assert "model-deps" not in containerfile.read_text()
    assert not (tmp_path / "ctx" / MODEL_REQUIREMENTS).exists()


@pytest.mark.parametrize("base", ["public.ecr.aws/lambda/python:3.12", "localhost/debian"])
def test_a_lambda_image_adds_the_requirements_where_its_dependencies_are(
    tmp_path: Path, fake_wheel: Path, base: str
) -> None:
    plan = BuildPlan("pipeline", 1, target="lambda", base=base,
                     models=("add:1", "tenfold:1", "pipeline:1"),
                     model_requirements=("numpy",))
    repo = pipeline_repository(tmp_path / "models")
    text = render_context(plan, tmp_path / "ctx", fake_wheel, repository=repo).read_text()
    where = "${LAMBDA_TASK_ROOT}" if base.startswith("public.ecr.aws") else "/opt/modelfn/deps"
    lines = text.split("# --- the image")[1].splitlines()
    deps = lines.index(f"COPY --from=build /opt/modelfn/deps {where}")
    assert lines[deps + 1] == f"COPY --from=build /opt/modelfn/model-deps {where}"


def test_an_image_fetching_its_models_installs_their_requirements_too(
    tmp_path: Path, fake_wheel: Path, fake_builder: Callable[[], list[list[str]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not baked: the image names the store and the ensemble's models at the versions its
    push recorded, and installs the Python models' requirements, read from the store."""
    monkeypatch.setenv("MODELFN_CACHE", str(tmp_path / "cache"))
    repo = pipeline_repository(tmp_path / "models", requirements="six\n")
    store_uri = f"file://{tmp_path / 'store'}"
    store = open_store(store_uri)
    for name in ("add", "tenfold", "pipeline"):
        store.push(repo / name)
    result = build_image("pipeline", "latest", store_uri=store_uri, bake=False,
                         builder="podman", wheel=fake_wheel, context_dir=tmp_path / "ctx")
    text = (result.context / "Containerfile").read_text()
    assert 'MODELFN_MODELS="add:1,tenfold:1,pipeline:1"' in text
    assert "COPY models/" not in text
    assert (result.context / MODEL_REQUIREMENTS).read_text() == "six\n"


def test_an_ensemble_that_runs_two_versions_of_a_model_is_refused(
    tmp_path: Path, fake_wheel: Path
) -> None:
    """A function serves one version of each model: an ensemble whose steps pin two versions
    of one is refused before anything is built."""
    repo = pipeline_repository(tmp_path / "models")
    save(repo / "add", simple_graph(width=4, scale=3.0), version=2)
    save_ensemble(repo / "pipeline", ensemble_config(
        [step("add", {"INPUT0": "A", "INPUT1": "B"}, {"OUTPUT0": "sum"}, version=1),
         step("add", {"INPUT0": "sum", "INPUT1": "B"}, {"OUTPUT0": "OUT"}, version=2)],
        [tensor("A"), tensor("B")], [tensor("OUT")]))
    with pytest.raises(InvalidInput, match="runs model 'add' at versions 1 and 2"):
        build_image("pipeline", 1, repository=repo, builder="podman", wheel=fake_wheel,
                    context_dir=tmp_path / "ctx")


def test_an_ensemble_baked_from_a_store_holds_every_model_with_the_files_beside_it(
    tmp_path: Path, fake_wheel: Path, fake_builder: Callable[[], list[list[str]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each model at the version the ensemble's push recorded, laid out as pushed: its
    version folder (an ensemble's empty one too) and the files beside its config."""
    monkeypatch.setenv("MODELFN_CACHE", str(tmp_path / "cache"))
    repo = pipeline_repository(tmp_path / "models", requirements="six\n")
    (repo / "tenfold" / "requirements.txt").write_text("packaging\n")
    store_uri = f"file://{tmp_path / 'store'}"
    store = open_store(store_uri)
    for name in ("add", "tenfold", "pipeline"):
        store.push(repo / name)
    result = build_image("pipeline", 1, store_uri=store_uri, bake=True, builder="podman",
                         wheel=fake_wheel, context_dir=tmp_path / "ctx")
    models = result.context / "models"
    files = sorted(p.relative_to(models).as_posix() for p in models.rglob("*"))
    assert files == ["add", "add/1", "add/1/model.onnx", "add/config.pbtxt", "pipeline",
                     "pipeline/1", "pipeline/config.pbtxt", "tenfold", "tenfold/1",
                     "tenfold/1/model.py", "tenfold/1/requirements.txt",
                     "tenfold/config.pbtxt", "tenfold/requirements.txt"]
    assert (result.context / MODEL_REQUIREMENTS).read_text().splitlines() == [
        "packaging", "six"]
    text = (result.context / "Containerfile").read_text()
    assert 'MODELFN_MODELS="add:1,tenfold:1,pipeline:1"' in text
    assert "MODELFN_STORE" not in text
