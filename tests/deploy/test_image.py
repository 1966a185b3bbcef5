"""Real images: build with ``build_image``, push to a loopback registry, pull by digest, run.

The base is Debian bookworm minbase without Python, trimmed as Debian's own slim images are
(no apt lists or caches, documentation or locales: ``SLIM``), so the build
installs python3 from apt and everything else from PyPI. The HTTP image answers a V2 infer
request on ``$PORT``, and with ``MODELFN_PROTOCOL=grpc`` a tritonclient gRPC ModelInfer
there instead; it stays within ``HTTP_IMAGE_BUDGET`` unpacked, and a new model version
built after it re-uses every layer but the last. The Lambda image runs awslambdaric against
the Runtime API emulator, behind the local function URL, as the runtime process of a local
Lambda function. Outputs are compared with onnxruntime run directly on the same model.

Everything lives under pytest's temporary directories except the base image, an OCI archive
of Debian bookworm (minbase from debootstrap, then trimmed) cached in ``$MODELFN_TEST_CACHE``
(default ``$XDG_CACHE_HOME/modelfn-test`` or ``~/.cache/modelfn-test``) and reused by later
runs.
Missing tools fail these tests with the reason; ``MODELFN_SKIP_CONTAINER_TESTS=1`` skips them.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as triton_grpc
from onnx_models import save, simple_graph
from pipeline_models import TENFOLD, pipeline_repository

from modelfn.deploy.build import LAMBDA_HANDLER, BuildResult, build_image
from modelfn.deploy.builders import unmount_under
from modelfn.deploy.errors import BuildError
from modelfn.deploy.registry import write_auth_file
from modelfn.localstack.function_url import FunctionUrl
from modelfn.localstack.lambda_service import FunctionConfig, LambdaFunction
from modelfn.platforms.podman import Storage
from modelfn.process.supervisor import free_port

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

SKIP_ENV = "MODELFN_SKIP_CONTAINER_TESTS"
CACHE_ENV = "MODELFN_TEST_CACHE"
TOOLS = ("buildah", "podman", "skopeo", "docker-registry", "debootstrap", "runc")
BASE_IMAGE = "localhost/modelfn-test/debian-minbase:bookworm"
BASE_ARCHIVE = "debian-bookworm-minbase-slim.oci.tar"
#: what Debian's slim images leave out, removed from the debootstrap tree: apt's package
#: lists and caches (82 MB here; a build's ``apt-get update`` fetches its own), documentation,
#: man pages and translations. Without this the base alone is 204 MB.
SLIM = ("var/lib/apt/lists", "var/cache/apt", "usr/share/doc", "usr/share/man",
        "usr/share/info", "usr/share/locale")
DEBIAN_MIRROR = "http://deb.debian.org/debian"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

#: figures the image tests measure, printed at the end of the module
MEASURED: dict[str, str] = {}


def require_containers() -> None:
    if os.environ.get(SKIP_ENV) == "1":
        pytest.skip(f"{SKIP_ENV}=1")
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"the image tests need {', '.join(missing)}: run scripts/ci-containers.sh "
                    f"(or set {SKIP_ENV}=1 to skip them)", pytrace=False)
    if os.geteuid() != 0:
        pytest.fail("the image tests need root (debootstrap, containers/storage, runc); "
                    f"set {SKIP_ENV}=1 to skip them", pytrace=False)


def run(command: list[str], *, timeout: float = 900, what: str = "") -> str:
    """Run a tool; a failure fails the test with its output."""
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        output = (done.stdout + done.stderr).strip().splitlines()[-30:]
        pytest.fail(f"{what or command[0]} failed ({done.returncode}): {' '.join(command)}\n"
                    + "\n".join(output), pytrace=False)
    return done.stdout


def image_cache_dir() -> Path:
    if explicit := os.environ.get(CACHE_ENV):
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "modelfn-test"


def short_temp_dir() -> Path:
    """A temporary directory with a short path: podman refuses runroots over 50 characters."""
    return Path(tempfile.mkdtemp(prefix="mfn-", dir="/tmp" if Path("/tmp").is_dir() else None))


@dataclass(frozen=True)
class Containers:
    """podman and buildah on one private containers/storage (vfs, chroot builds)."""

    storage: Storage

    @classmethod
    def under(cls, root: Path) -> Containers:
        return cls(Storage(root=root, driver="vfs", isolation="chroot"))

    def podman(self, *args: str) -> list[str]:
        return ["podman", *self.storage.global_args(), "--cgroup-manager", "cgroupfs",
                "--events-backend", "file", "--runtime", "runc", *args]

    def buildah(self, *args: str) -> list[str]:
        return ["buildah", *self.storage.global_args(), *args]

    def run_args(self) -> list[str]:
        """``podman run`` flags that work in these sandboxes (no CAP_SYS_RESOURCE, no crun)."""
        return ["--network", "host", "--ulimit", "nofile=1024:1024",
                "--ulimit", "nproc=1024:1024"]

    def remove_all(self) -> None:
        subprocess.run(self.podman("rm", "--all", "--force", "--time", "0"),
                       capture_output=True, check=False)
        subprocess.run(self.buildah("rm", "--all"), capture_output=True, check=False)
        assert self.storage.root is not None
        unmount_under(self.storage.root)
        shutil.rmtree(self.storage.root, ignore_errors=True)


@pytest.fixture(scope="module")
def containers_available(container_global_state: None) -> None:
    """The tools are there (podman's state outside --root is removed after the module)."""
    require_containers()


@pytest.fixture(scope="module")
def build_containers(containers_available: None) -> Iterator[Containers]:
    """The storage images are built and pushed from."""
    containers = Containers.under(short_temp_dir())
    try:
        yield containers
    finally:
        containers.remove_all()


@pytest.fixture
def run_containers(containers_available: None) -> Iterator[Containers]:
    """A fresh storage to pull and run images in, as a serverless platform would."""
    containers = Containers.under(short_temp_dir())
    try:
        yield containers
    finally:
        containers.remove_all()


@pytest.fixture(scope="module")
def registry(
    containers_available: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The reference registry (Debian's docker-registry) on 127.0.0.1: ``host:port``."""
    root = tmp_path_factory.mktemp("registry")
    address = f"127.0.0.1:{free_port()}"
    config = root / "config.yml"
    config.write_text(
        "version: 0.1\nlog: {level: warn}\n"
        f"storage: {{filesystem: {{rootdirectory: {root / 'data'}}}, delete: {{enabled: true}}}}\n"
        f"http: {{addr: {address}}}\n",
        encoding="utf-8",
    )
    with open(root / "registry.log", "wb") as log:
        process = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=log,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"http://{address}/v2/", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail("docker-registry did not start:\n"
                            + (root / "registry.log").read_text(errors="replace"), pytrace=False)
            time.sleep(0.05)
        yield address
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def build_base_archive(archive: Path, scratch: Path, containers: Containers) -> None:
    """Debian bookworm minbase (debootstrap), trimmed (``SLIM``), committed as an OCI archive
    at ``archive``."""
    rootfs = scratch / "rootfs"
    try:
        run(["debootstrap", "--variant=minbase", "bookworm", str(rootfs), DEBIAN_MIRROR],
            what="debootstrap")
        for folder in SLIM:  # files only: apt wants its directories (lists/partial, ...)
            for entry in (rootfs / folder).rglob("*"):
                if not entry.is_dir() or entry.is_symlink():
                    entry.unlink()
        container = run(containers.buildah("from", "scratch")).strip()
        run(containers.buildah("copy", container, str(rootfs), "/"), what="buildah copy")
        run(containers.buildah("config", "--env", f"PATH={DEFAULT_PATH}", "--cmd", "/bin/bash",
                               container))
        archive.parent.mkdir(parents=True, exist_ok=True)
        partial = archive.with_name(f".{archive.name}.partial")
        run(containers.buildah("commit", "--rm", "--format", "oci", container,
                               f"oci-archive:{partial}:{BASE_IMAGE}"), what="buildah commit")
        partial.replace(archive)
    finally:
        unmount_under(rootfs.parent)
        shutil.rmtree(rootfs, ignore_errors=True)


@pytest.fixture(scope="module")
def base_image(
    build_containers: Containers, tmp_path_factory: pytest.TempPathFactory
) -> str:
    """A Debian base without Python in the build storage, built once and cached as an archive."""
    archive = image_cache_dir() / BASE_ARCHIVE
    if archive.is_file():
        MEASURED["base image"] = f"reused {archive.name} from the test cache"
    else:
        started = time.monotonic()
        build_base_archive(archive, tmp_path_factory.mktemp("base"), build_containers)
        MEASURED["base image"] = f"built in {time.monotonic() - started:.1f} s (debootstrap)"
    image_id = run(build_containers.buildah("pull", "--quiet", f"oci-archive:{archive}"))
    run(build_containers.buildah("tag", image_id.strip().splitlines()[-1], BASE_IMAGE))
    return BASE_IMAGE


pytestmark = [pytest.mark.containers, pytest.mark.slow]

START_BUDGET = 300.0  # seconds a container may take to serve its first inference
#: the CPU HTTP image, unpacked, on the trimmed Debian base (issue 13's goal); bench/RESULTS.md
HTTP_IMAGE_BUDGET = 250e6
#: what Lambda passes a runtime; the wrapper hands these to the container
LAMBDA_ENV = ("AWS_LAMBDA_RUNTIME_API", "_HANDLER", "AWS_LAMBDA_FUNCTION_NAME",
              "AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "AWS_LAMBDA_FUNCTION_VERSION",
              "AWS_LAMBDA_INITIALIZATION_TYPE", "AWS_LAMBDA_LOG_GROUP_NAME",
              "AWS_LAMBDA_LOG_STREAM_NAME", "AWS_REGION", "AWS_DEFAULT_REGION", "TZ")


@pytest.fixture(scope="module", autouse=True)
def report(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    capture = request.config.pluginmanager.getplugin("capturemanager")
    lines = "\n".join(f"  {key}: {value}" for key, value in MEASURED.items())
    if capture is not None and lines:
        with capture.global_and_fixture_disabled():
            print(f"\nimage test measurements:\n{lines}")


@pytest.fixture(scope="module")
def model_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("models")
    save(repo / "simple", simple_graph(scale=3.0), version=1)
    return repo


def infer_request(rng: np.random.Generator) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    arrays = {name: rng.standard_normal((2, 16)).astype(np.float32)
              for name in ("INPUT0", "INPUT1")}
    body = {"inputs": [{"name": name, "shape": list(array.shape), "datatype": "FP32",
                        "data": array.ravel().tolist()} for name, array in arrays.items()]}
    return body, arrays


def check_outputs(answer: dict[str, Any], model_repo: Path, arrays: dict[str, np.ndarray]) -> None:
    session = ort.InferenceSession(str(model_repo / "simple" / "1" / "model.onnx"),
                                   providers=["CPUExecutionProvider"])
    expected = dict(zip(["OUTPUT0", "OUTPUT1"], session.run(["OUTPUT0", "OUTPUT1"], arrays),
                        strict=True))
    got = {o["name"]: np.asarray(o["data"], dtype=np.float32).reshape(o["shape"])
           for o in answer["outputs"]}
    assert sorted(got) == ["OUTPUT0", "OUTPUT1"]
    for name, value in expected.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-6)


def host_pip_cert() -> str | None:
    """The CA bundle the host's pip uses ($PIP_CERT, else pip's own configuration)."""
    if os.environ.get("PIP_CERT"):
        return os.environ["PIP_CERT"]
    found = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.cert"],
                           capture_output=True, text=True, check=False)
    return found.stdout.strip() or None


def build_and_push(target: str, builder: str, model_repo: Path, registry: str,
                   build_containers: Containers, tmp_path: Path) -> BuildResult:
    lines: list[str] = []
    started = time.monotonic()
    pip_cert = host_pip_cert()  # whatever the host's pip trusts, the build's does
    result = build_image(
        "simple", 1, repository=model_repo, target="lambda" if target == "lambda" else "http",
        bake=True, base=BASE_IMAGE, push=registry, builder=builder, tls_verify=False,
        progress=lines.append, storage=build_containers.storage,
        pip_cert=Path(pip_cert) if pip_cert else None, context_dir=tmp_path / "context",
        # credentials as deploy --registry ecr hands them over (the registry accepts any)
        auth_file=write_auth_file(tmp_path / "auth", registry, "AWS", "token"),
    )
    MEASURED[f"{target} image build + push ({builder})"] = f"{time.monotonic() - started:.1f} s"
    assert result.builder == builder
    assert result.digest is not None and result.digest.startswith("sha256:")
    assert any("STEP" in line for line in lines)
    return result


def pull_by_digest(result: BuildResult, containers: Containers, target: str) -> int:
    """Pull ``result`` by digest, check its labels; returns its unpacked size in bytes."""
    run(containers.podman("pull", "--quiet", "--tls-verify=false", result.reference),
        what="podman pull")
    size = int(run(containers.podman("image", "inspect", "--format", "{{.Size}}",
                                     result.reference)).strip())
    manifest = json.loads(run(["skopeo", "inspect", "--raw", "--tls-verify=false",
                               f"docker://{result.reference}"]))
    compressed = sum(layer["size"] for layer in manifest["layers"])
    MEASURED[f"{target} image size"] = (f"{size / 1e6:.0f} MB unpacked, "
                                        f"{compressed / 1e6:.0f} MB compressed")
    history = run(containers.podman("history", "--format", "{{.Size}}\t{{.CreatedBy}}",
                                    result.reference))
    MEASURED[f"{target} image layers"] = "; ".join(
        f"{size} {created.strip()[:60]}" for size, _, created in
        (line.partition("\t") for line in history.splitlines()) if size not in ("0B", "0 B"))
    config = json.loads(run(["skopeo", "inspect", "--tls-verify=false",
                             f"docker://{result.reference}"]))
    assert config["Digest"] == result.digest
    assert config["Labels"]["modelfn.model"] == "simple"
    assert config["Labels"]["modelfn.version"] == "1"
    assert config["Labels"]["org.opencontainers.image.base.name"] == BASE_IMAGE
    return size


@pytest.fixture(scope="module")
def http_image(
    build_containers: Containers, registry: str, base_image: str, model_repo: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> BuildResult:
    """The CPU HTTP image, built once and pushed: every HTTP test runs it."""
    return build_and_push("http", "podman", model_repo, registry, build_containers,
                          tmp_path_factory.mktemp("http"))


def wait_for_answer(containers: Containers, container: str, started: float,
                    answered: Callable[[], Any]) -> Any:
    """Poll ``answered`` (None: not yet) until it answers, the container stops or time runs
    out; the container's log is the failure message."""
    while True:
        answer = answered()
        if answer is not None:
            return answer
        state = run(containers.podman("container", "inspect", "--format",
                                      "{{.State.Status}}", container)).strip()
        if state != "running" or time.monotonic() - started > START_BUDGET:
            logs = run(containers.podman("logs", container))
            pytest.fail(f"the container ({state}) served no inference:\n{logs}")
        time.sleep(0.1)


def test_http_image_serves_v2_inference(
    http_image: BuildResult, run_containers: Containers, model_repo: Path,
    rng: np.random.Generator,
) -> None:
    result = http_image
    size = pull_by_digest(result, run_containers, "http")
    port = free_port()
    body, arrays = infer_request(rng)
    started = time.monotonic()
    container = run(run_containers.podman(
        "run", "--detach", *run_containers.run_args(), "--env", f"PORT={port}",
        result.reference)).strip()
    url = f"http://127.0.0.1:{port}/v2/models/simple/infer"
    with httpx.Client(timeout=30) as client:

        def answered() -> Any:
            try:
                response = client.post(url, json=body)
            except httpx.TransportError:
                return None
            return response.json() if response.status_code == 200 else None

        answer = wait_for_answer(run_containers, container, started, answered)
        MEASURED["http: podman run -> first inference"] = f"{time.monotonic() - started:.2f} s"
        assert client.get(f"http://127.0.0.1:{port}/v2/health/ready").status_code == 200
    assert answer["model_name"] == "simple" and answer["model_version"] == "1"
    check_outputs(answer, model_repo, arrays)
    user = run(run_containers.podman("container", "inspect", "--format", "{{.Config.User}}",
                                     container)).strip()
    assert user == "10001:10001"
    run(run_containers.podman("rm", "--force", "--time", "0", container))
    serve_in_container_mode(result.reference, run_containers, body, model_repo, arrays)
    assert size <= HTTP_IMAGE_BUDGET, f"the CPU HTTP image is {size / 1e6:.0f} MB unpacked"


def test_http_image_serves_grpc_when_asked(
    http_image: BuildResult, run_containers: Containers, model_repo: Path,
    rng: np.random.Generator,
) -> None:
    """MODELFN_PROTOCOL=grpc on the same image: KServe V2 gRPC on $PORT (the grpc extra is
    in every HTTP image; a deploy chooses the protocol at run time)."""
    run(run_containers.podman("pull", "--quiet", "--tls-verify=false", http_image.reference))
    port = free_port()
    _, arrays = infer_request(rng)
    started = time.monotonic()
    container = run(run_containers.podman(
        "run", "--detach", *run_containers.run_args(), "--env", f"PORT={port}",
        "--env", "MODELFN_PROTOCOL=grpc", http_image.reference)).strip()
    client = triton_grpc.InferenceServerClient(f"127.0.0.1:{port}")
    inputs = []
    for name, array in arrays.items():
        tensor = triton_grpc.InferInput(name, list(array.shape), "FP32")
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)

    def answered() -> Any:
        try:
            result = client.infer("simple", inputs, model_version="1")
        except triton_grpc.InferenceServerException:
            return None
        return {"outputs": [{"name": name, "shape": list(result.as_numpy(name).shape),
                             "data": result.as_numpy(name).ravel().tolist()}
                            for name in ("OUTPUT0", "OUTPUT1")]}

    try:
        answer = wait_for_answer(run_containers, container, started, answered)
        MEASURED["http, grpc: podman run -> first inference"] = \
            f"{time.monotonic() - started:.2f} s"
    finally:
        client.close()
    check_outputs(answer, model_repo, arrays)
    run(run_containers.podman("rm", "--force", "--time", "0", container))


def test_a_new_model_version_reuses_every_layer_but_the_last(
    http_image: BuildResult, build_containers: Containers, model_repo: Path, tmp_path: Path,
) -> None:
    """Version 2 built after version 1 on the same builder: only the model layer is new."""
    repo = tmp_path / "models"
    shutil.copytree(model_repo, repo)
    save(repo / "simple", simple_graph(scale=5.0), version=2)
    started = time.monotonic()
    second = build_image("simple", 2, repository=repo, bake=True, base=BASE_IMAGE,
                         builder="podman", storage=build_containers.storage,
                         pip_cert=Path(cert) if (cert := host_pip_cert()) else None,
                         context_dir=tmp_path / "context", tls_verify=False)
    MEASURED["http image, next model version: build"] = f"{time.monotonic() - started:.1f} s"

    def layers(image: str) -> list[str]:
        return json.loads(run(build_containers.podman(
            "image", "inspect", "--format", "{{json .RootFS.Layers}}", image)))

    first, then = layers(http_image.image), layers(second.image)
    assert len(first) == len(then)
    assert first[:-1] == then[:-1]
    assert first[-1] != then[-1]


def serve_in_container_mode(image: str, containers: Containers, body: dict[str, Any],
                            model_repo: Path, arrays: dict[str, np.ndarray]) -> None:
    """The local platform's --containers mode on the same image: a revision at zero is
    started by the first request (held, then answered) and goes back to zero."""
    from modelfn.localstack.plane import RevisionSpec, RevisionState, RouteSpec, TrafficTarget
    from modelfn.localstack.serving import LocalServingPlane

    with LocalServingPlane(containers=True, storage=containers.storage, idle_s=1.0) as plane:
        plane.ensure_revision(RevisionSpec("default", "simple", "simple-00001", image, env={},
                                           progress_deadline_s=START_BUDGET))
        urls = plane.set_route(RouteSpec("default", "simple",
                                         (TrafficTarget("simple-00001", 100),)))
        deadline = time.monotonic() + START_BUDGET
        while plane.revision_status("default", "simple-00001").state is RevisionState.UNKNOWN:
            assert time.monotonic() < deadline, "the container revision never settled"
            time.sleep(0.1)
        status = plane.revision_status("default", "simple-00001")
        assert status.state is RevisionState.READY, status.message
        while plane.revision_status("default", "simple-00001").instances:
            assert time.monotonic() < deadline, "the container revision never went to zero"
            time.sleep(0.1)
        started = time.monotonic()
        answer = httpx.post(f"{urls.url}/v2/models/simple/infer", json=body, timeout=120)
        MEASURED["http: local platform --containers, zero -> first answer"] = \
            f"{time.monotonic() - started:.2f} s"
        assert answer.status_code == 200, answer.text
        check_outputs(answer.json(), model_repo, arrays)


def lambda_runtime(path: Path, containers: Containers, image: str) -> Path:
    """A stand-in for ``python -m awslambdaric HANDLER``: the image, with this sandbox's API.

    Runs as Lambda does: another user, a read-only root filesystem, a writable /tmp.
    """
    command = containers.podman(
        "run", "--rm", *containers.run_args(), "--read-only", "--user", "993:990",
        *(f"--env={name}" for name in LAMBDA_ENV), image)
    path.write_text(f"#!/bin/sh\nexec {shlex.join(command)}\n")
    path.chmod(0o755)
    return path


def test_lambda_image_answers_a_function_url_event(
    build_containers: Containers, run_containers: Containers, registry: str, base_image: str,
    model_repo: Path, tmp_path: Path, rng: np.random.Generator,
) -> None:
    result = build_and_push("lambda", "buildah", model_repo, registry, build_containers,
                            tmp_path)
    pull_by_digest(result, run_containers, "lambda")
    runtime = lambda_runtime(tmp_path / "runtime", run_containers, result.reference)
    config = FunctionConfig(LAMBDA_HANDLER, task_root=tmp_path, name="simple", timeout=60,
                            init_timeout=START_BUDGET, memory_mb=1024, python=str(runtime))
    body, arrays = infer_request(rng)
    with LambdaFunction(config) as function:
        front = FunctionUrl(function).start()
        try:
            with httpx.Client(base_url=front.url, timeout=START_BUDGET + 60) as client:
                started = time.monotonic()
                cold = client.post("/v2/models/simple/infer", json=body)
                MEASURED["lambda: podman run -> first inference"] = (
                    f"{time.monotonic() - started:.2f} s")
                assert cold.status_code == 200, cold.text
                started = time.monotonic()
                warm = client.post("/v2/models/simple/versions/1/infer", json=body)
                MEASURED["lambda: warm invoke"] = f"{(time.monotonic() - started) * 1000:.1f} ms"
                assert warm.status_code == 200, warm.text
        finally:
            front.close()
    check_outputs(cold.json(), model_repo, arrays)
    assert warm.json()["outputs"] == cold.json()["outputs"]
    entrypoint = json.loads(run(run_containers.podman(
        "image", "inspect", "--format", "{{json .Config.Entrypoint}}", result.reference)))
    assert entrypoint == ["python3", "-m", "awslambdaric"]


#: tenfold as pipeline_models has it, needing its requirement: it fails to load without it
TENFOLD_WITH_SIX = "import six  # the requirement the image installs\n" + TENFOLD


def test_an_ensemble_image_installs_its_python_models_requirements(
    build_containers: Containers, base_image: str, tmp_path: Path,
) -> None:
    """An HTTP image baked with an ensemble whose Python step imports its requirement (six,
    which modelfn's dependencies lack): the build installs it, and the image answers the
    ensemble through both steps. A requirement pip cannot satisfy fails the build with
    pip's own message."""
    repo = pipeline_repository(tmp_path / "models", requirements="six\n")
    (repo / "tenfold" / "1" / "model.py").write_text(TENFOLD_WITH_SIX)
    cert = host_pip_cert()
    result = build_image("pipeline", 1, repository=repo, bake=True, base=base_image,
                         builder="podman", storage=build_containers.storage,
                         pip_cert=Path(cert) if cert else None,
                         context_dir=tmp_path / "context", tls_verify=False)
    port = free_port()
    started = time.monotonic()
    container = run(build_containers.podman(
        "run", "--detach", *build_containers.run_args(), "--env", f"PORT={port}",
        result.image)).strip()
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    body = {"inputs": [{"name": name, "shape": [2, 4], "datatype": "FP32",
                        "data": a.ravel().tolist()} for name in ("A", "B")]}
    with httpx.Client(timeout=30) as client:

        def answered() -> Any:
            try:
                response = client.post(f"http://127.0.0.1:{port}/v2/models/pipeline/infer",
                                       json=body)
            except httpx.TransportError:
                return None
            return response.json() if response.status_code == 200 else None

        try:
            answer = wait_for_answer(build_containers, container, started, answered)
        finally:
            run(build_containers.podman("rm", "--force", "--time", "0", container))
    (out,) = answer["outputs"]
    np.testing.assert_allclose(np.asarray(out["data"]).reshape(2, 4), (a + a) * 10)

    (repo / "tenfold" / "1" / "requirements.txt").write_text(
        "modelfn-test-no-such-distribution==0.0.1\n")
    with pytest.raises(BuildError) as caught:
        build_image("pipeline", 1, repository=repo, bake=True, base=base_image,
                    builder="podman", storage=build_containers.storage,
                    pip_cert=Path(cert) if cert else None,
                    context_dir=tmp_path / "failed", tls_verify=False)
    assert "No matching distribution found for modelfn-test-no-such-distribution==0.0.1" in \
        caught.value.message
