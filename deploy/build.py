"""``modelfn build``: render a build context from templates, build, tag, push, report the digest.

A context holds the Containerfile (``templates/Containerfile.<kind>.j2``), the modelfn wheel,
the requirements its entrypoint imports in that image (``deploy/requirements.py``:
``onnxruntime-gpu`` instead of ``onnxruntime`` for GPU images, boto3 only to fetch from S3),
its Python models' requirements (``deploy/contents.py``; pip resolves them against
modelfn's own pins and the image gets them as a layer of their own) and, when baked, the
model versions its function serves under ``models/`` (an ensemble with its composing
models). Without ``bake`` the image names its store and models instead (``MODELFN_STORE``,
``MODELFN_MODELS``) and the runtime fetches the versions at cold start.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from modelfn.deploy import contents
from modelfn.deploy import requirements as reqs
from modelfn.deploy import wheel as wheels
from modelfn.deploy.builders import BuildRequest, run_streaming, select_builder
from modelfn.deploy.deployment import without_tag
from modelfn.deploy.errors import BuildError
from modelfn.model_store import names
from modelfn.platforms.podman import Storage
from modelfn.runtime.errors import InvalidInput, ModelNotFound
from modelfn.templates import render

if TYPE_CHECKING:
    from modelfn.deploy.builders import Builder, Progress
    from modelfn.model_store.base import ModelStore
    from modelfn.model_store.manifest import ModelRef

Target = Literal["http", "lambda"]

MODELS_DIR = "/opt/modelfn/models"
LAMBDA_HANDLER = "modelfn.handlers.aws_lambda.handler"
AWS_LAMBDA_BASE_PREFIX = "public.ecr.aws/lambda/python"
#: a CA bundle pip trusts during the build, bind-mounted into RUN steps (not left in the image)
PIP_CERT_FILE = "pip-cert.pem"
PIP_CERT_MOUNT = "/run/modelfn-pip-cert.pem"
#: the Python models' requirements in a build context (``deploy/contents.py``)
MODEL_REQUIREMENTS = "model-requirements.txt"


@dataclass(frozen=True)
class Flavor:
    """One kind of image: its template, default base, the requirement groups its entrypoint
    imports (``deploy/requirements.py``) and names left out of them."""

    template: str
    base: str
    groups: tuple[reqs.Group, ...]
    exclude: frozenset[str] = frozenset()
    prune: tuple[str, ...] = reqs.PRUNE
    #: strip debug sections from the shared libraries that have them (uvloop's alone: 13 MB
    #: to 2), then load each stripped one to prove it still loads. Only those: binutils'
    #: strip breaks auditwheel-patched libraries (numpy's OpenBLAS: "ELF load command
    #: address/offset not page-aligned"). Not on GPU flavors, whose CUDA and TensorRT
    #: libraries cannot be tried here.
    strip: bool = False


_CUDA_BASE = "docker.io/nvidia/cuda:12.6.3-cudnn-runtime-ubuntu24.04"
_ON_GPU = frozenset({"onnxruntime"})  # onnxruntime-gpu replaces it; never both
#: (target, gpu) -> image flavor
FLAVORS: dict[tuple[str, bool], Flavor] = {
    ("http", False): Flavor("Containerfile.cpu.j2", "docker.io/library/python:3.12-slim",
                            (reqs.RUNTIME, reqs.HTTP, reqs.GRPC),
                            prune=(*reqs.PRUNE, *reqs.PRUNE_CPU), strip=True),
    ("http", True): Flavor("Containerfile.gpu.j2", _CUDA_BASE,
                           (reqs.RUNTIME, reqs.GPU, reqs.HTTP, reqs.GRPC), _ON_GPU),
    ("lambda", False): Flavor("Containerfile.lambda.j2", "public.ecr.aws/lambda/python:3.12",
                              (reqs.RUNTIME, reqs.LAMBDA),
                              prune=(*reqs.PRUNE, *reqs.PRUNE_CPU), strip=True),
    ("lambda", True): Flavor("Containerfile.lambda.j2", _CUDA_BASE,
                             (reqs.RUNTIME, reqs.GPU, reqs.LAMBDA), _ON_GPU),
}


@dataclass(frozen=True)
class BuildPlan:
    """Everything a build context is rendered from."""

    name: str
    version: int
    target: Target = "http"
    gpu: bool = False
    bake: bool = True
    store_uri: str | None = None
    base: str | None = None
    install_python: bool | None = None  # None: install python3 only when the base lacks it
    pip_cert: bool = False  # the context carries a CA bundle for pip (TLS-intercepting proxies)
    #: what the function serves, ``name:version`` each, loaded in order (``deploy.contents``:
    #: an ensemble's composing models before it); empty: the model alone
    models: tuple[str, ...] = ()
    #: the union of its Python models' requirements, installed in a layer of their own
    model_requirements: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if (self.target, self.gpu) not in FLAVORS:
            raise InvalidInput(f"unknown target '{self.target}'; expected http or lambda")
        if not self.bake and not self.store_uri:
            raise InvalidInput("an image without a baked model needs a store URI (--store)")

    @property
    def served(self) -> tuple[str, ...]:
        return self.models or (f"{self.name}:{self.version}",)

    @property
    def flavor(self) -> Flavor:
        return FLAVORS[(self.target, self.gpu)]

    @property
    def base_image(self) -> str:
        return self.base or self.flavor.base

    @property
    def aws_lambda_base(self) -> bool:
        return self.base_image.startswith(AWS_LAMBDA_BASE_PREFIX)

    @property
    def default_tag(self) -> str:
        return f"modelfn/{self.name}:{self.version}-{self.target}{'-gpu' if self.gpu else ''}"

    @property
    def excluded_requirements(self) -> set[str]:
        # the AWS base runs its own runtime interface client; ours must not shadow it
        return {*self.flavor.exclude, *(["awslambdaric"] if self.aws_lambda_base else [])}

    @property
    def requirement_groups(self) -> tuple[reqs.Group, ...]:
        """What the entrypoint imports here: the flavor's groups, and boto3 when the version
        comes from S3 at cold start (a baked or ``file://`` image never imports it)."""
        from_s3 = not self.bake and (self.store_uri or "").startswith("s3://")
        return (*self.flavor.groups, *((reqs.S3,) if from_s3 else ()))

    def requirements(self, wheel: Path) -> list[str]:
        """The image's requirements, pinned as the modelfn ``wheel`` declares them."""
        return reqs.pinned(reqs.wheel_metadata(wheel), self.requirement_groups,
                           self.excluded_requirements)

    def runtime_env(self) -> dict[str, str]:
        """What the entrypoint reads: where the model is, which one, and the platform's bits."""
        model = ",".join(self.served)
        if self.bake:
            env = {"MODELFN_REPOSITORY": MODELS_DIR, "MODELFN_MODELS": model}
        else:
            assert self.store_uri is not None
            env = {"MODELFN_STORE": self.store_uri, "MODELFN_MODELS": model}
        if self.target == "lambda":
            return {**env, "HOME": "/tmp"}  # Lambda's only writable directory
        return {**env, "HOME": "/home/modelfn", "PORT": "8080"}

    def labels(self, created: dt.datetime | None = None) -> dict[str, str]:
        created = created or dt.datetime.now(dt.UTC)
        return {
            "org.opencontainers.image.title": f"modelfn-{self.name}",
            "org.opencontainers.image.description":
                f"modelfn {self.target} function serving {self.name} version {self.version}",
            "org.opencontainers.image.version": str(self.version),
            "org.opencontainers.image.created": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "org.opencontainers.image.base.name": self.base_image,
            "org.opencontainers.image.vendor": "modelfn",
            "modelfn.model": self.name,
            "modelfn.version": str(self.version),
            "modelfn.target": self.target,
            "modelfn.gpu": str(self.gpu).lower(),
            "modelfn.runtime.version": _modelfn_version(),
        }

    def template_variables(self, wheel_name: str, created: dt.datetime | None = None,
                           ) -> dict[str, Any]:
        return {
            "base": self.base_image,
            "install_python": self.install_python,
            "aws_lambda_base": self.aws_lambda_base,
            "wheel": wheel_name,
            "prune": self.flavor.prune,
            "strip": self.flavor.strip,
            "bake": self.bake,
            "models_dir": MODELS_DIR,
            "env": self.runtime_env(),
            "labels": self.labels(created),
            "handler": LAMBDA_HANDLER,
            "port": 8080,
            "model_requirements": bool(self.model_requirements),
            "pip_prefix": (f"--mount=type=bind,source={PIP_CERT_FILE},target={PIP_CERT_MOUNT} "
                           f"PIP_CERT={PIP_CERT_MOUNT} ") if self.pip_cert else "",
        }


@dataclass(frozen=True)
class BuildResult:
    image: str  # the tag, with the registry when pushed
    digest: str | None  # manifest digest in the registry (sha256:...), when pushed
    image_id: str | None  # local image ID (config digest)
    builder: str
    context: Path

    @property
    def reference(self) -> str:
        """``repo@sha256:...`` when pushed (pull by digest), else the tag."""
        if self.digest is None:
            return self.image
        return f"{without_tag(self.image)}@{self.digest}"


def _modelfn_version() -> str:
    try:
        return package_version("modelfn")
    except PackageNotFoundError:
        return "unknown"


def _copy_tree_readable(src: Path, dest: Path) -> None:
    """Copy ``src`` to ``dest`` with world-readable modes (images run as another user)."""
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__"))
    dest.chmod(0o755)
    for path in dest.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)


def copy_model_version(repository: Path, name: str, version: int, dest: Path) -> None:
    """``<repository>/<name>/<version>/`` and the files beside it (config.pbtxt, the label
    files it names, a Python model's requirements.txt) into ``dest``."""
    model_dir = repository / name
    version_dir = model_dir / str(version)
    if not version_dir.is_dir():
        raise ModelNotFound(name, version)
    target = dest / name
    _copy_tree_readable(version_dir, target / str(version))
    for path in model_dir.iterdir():
        if path.is_file():
            shutil.copyfile(path, target / path.name)
            (target / path.name).chmod(0o644)
    target.chmod(0o755)
    dest.chmod(0o755)


def render_context(plan: BuildPlan, context: Path, wheel: Path, *,
                   repository: Path | None = None, pip_cert: Path | None = None,
                   created: dt.datetime | None = None) -> Path:
    """Write the build context for ``plan`` into ``context``; returns its Containerfile."""
    if plan.pip_cert != (pip_cert is not None):
        raise InvalidInput("the plan and the context disagree about a CA bundle for pip")
    context.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(wheel, context / wheel.name)
    if pip_cert is not None:
        shutil.copyfile(pip_cert, context / PIP_CERT_FILE)
    requirements = plan.requirements(wheel)
    (context / "requirements.txt").write_text("\n".join(requirements) + "\n",
                                              encoding="utf-8")
    if plan.model_requirements:
        (context / MODEL_REQUIREMENTS).write_text("\n".join(plan.model_requirements) + "\n",
                                                  encoding="utf-8")
    if plan.bake:
        if repository is None:
            raise InvalidInput("baking a model needs a model repository (--repo) or a store")
        for ref in plan.served:
            model, number = ref.rsplit(":", 1)
            copy_model_version(repository, model, int(number), context / "models")
    containerfile = context / "Containerfile"
    text = render(plan.flavor.template, plan.template_variables(wheel.name, created))
    containerfile.write_text(text, encoding="utf-8")
    return containerfile


@dataclass
class BuildOptions:
    """How to build: the tool, where it keeps images, registry access and output."""

    builder: str | None = None
    storage: Storage = field(default_factory=Storage.from_env)
    tls_verify: bool = True
    progress: Progress | None = None
    wheel: Path | None = None  # a prebuilt modelfn wheel; default: built from the source tree
    auth_file: Path | None = None  # registry credentials for the push (Docker's config.json)


def build_image(
    name: str,
    version: int | str = "latest",
    *,
    repository: Path | None = None,
    store_uri: str | None = None,
    target: Target = "http",
    gpu: bool = False,
    bake: bool = True,
    base: str | None = None,
    tag: str | None = None,
    push: str | None = None,
    builder: str | None = None,
    tls_verify: bool = True,
    progress: Progress | None = None,
    storage: Storage | None = None,
    install_python: bool | None = None,
    wheel: Path | None = None,
    pip_cert: Path | None = None,
    context_dir: Path | None = None,
    auth_file: Path | None = None,
) -> BuildResult:
    """Build (and with ``push``, push) an image serving model ``name`` at ``version``.

    The model comes from a local ``repository`` or from ``store_uri``; ``bake`` copies the
    version into the image, otherwise the image fetches it from the store at cold start.
    ``push`` is a registry (``host:port[/namespace]``) the image is tagged under and pushed
    to; the result then carries its manifest digest. ``pip_cert`` is a CA bundle pip
    trusts inside the build (behind a TLS-intercepting proxy); it is not left in the image.
    ``auth_file`` holds the registry credentials for the push (a ``config.json`` in Docker's
    format, as ``deploy/registry.py`` writes for ECR); without it the builder's own login.
    """
    name = names.model_name(name)
    if repository is None and store_uri is None:
        raise InvalidInput("give a model repository (--repo) or a store URI (--store)")
    options = BuildOptions(builder, storage or Storage.from_env(), tls_verify, progress, wheel,
                           auth_file)
    chosen = select_builder(options.builder)
    number = _resolve_version(name, version, repository, store_uri)
    store: ModelStore | None = None
    if repository is not None and (bake or store_uri is None):
        models = contents.local_models(repository, name, number)
        needs = contents.python_requirements(repository, models)
    else:
        assert store_uri is not None
        from modelfn.model_store import open_store
        from modelfn.model_store.composing import function_models

        store = open_store(store_uri)
        models = function_models(store, name, number)
        needs = contents.store_requirements(store, models)
    plan = BuildPlan(name, number, target, gpu, bake, None if bake else store_uri, base,
                     install_python, pip_cert is not None, tuple(map(str, models)),
                     tuple(needs))
    context = context_dir or Path(tempfile.mkdtemp(prefix="modelfn-build-"))
    built_wheel = options.wheel or wheels.modelfn_wheel(progress)
    with tempfile.TemporaryDirectory(prefix="modelfn-bake-") as scratch:
        if bake and store is not None:  # the versions, from the store's cache, laid out once
            repository = _fetch_all(store, models, Path(scratch))
        containerfile = render_context(plan, context, built_wheel, repository=repository,
                                       pip_cert=pip_cert)
    image = tag or plan.default_tag
    if push:
        image = f"{push.rstrip('/')}/{image}"
    return _build_and_push(chosen, options, plan, context, containerfile, image, push is not None)


def _fetch_all(store: ModelStore, models: list[ModelRef], repository: Path) -> Path:
    """``repository`` holding every one of ``models``, fetched through the store's cache."""
    for ref in models:  # links: copy_model_version copies what they lead to, once
        (repository / ref.model).symlink_to(store.fetch(ref.model, ref.version) / ref.model,
                                            target_is_directory=True)
    return repository


def _resolve_version(name: str, version: int | str, repository: Path | None,
                     store_uri: str | None) -> int:
    if version != "latest":
        return names.version_number(version)
    if repository is not None:
        return contents.latest_version(repository, name)
    from modelfn.model_store import open_store

    assert store_uri is not None
    return open_store(store_uri).resolve(name, "latest")


def _build_and_push(builder: Builder, options: BuildOptions, plan: BuildPlan, context: Path,
                    containerfile: Path, image: str, push: bool) -> BuildResult:
    say = options.progress
    with tempfile.TemporaryDirectory(prefix="modelfn-ids-") as scratch:
        iidfile, digestfile = Path(scratch) / "iid", Path(scratch) / "digest"
        request = BuildRequest(context, containerfile, image, {"BASE": plan.base_image},
                               options.tls_verify, iidfile, source_date_epoch())
        run_streaming(builder.build(request, options.storage), f"{builder.name} build", say)
        image_id = iidfile.read_text().strip() if iidfile.is_file() else None
        digest = None
        if push:
            command = builder.push(image, options.storage, options.tls_verify, digestfile,
                                   options.auth_file)
            lines = run_streaming(command, f"{builder.name} push", say)
            digest = _read_digest(builder, options, image, digestfile, lines)
    return BuildResult(image, digest, image_id, builder.name, context)


def _read_digest(builder: Builder, options: BuildOptions, image: str, digestfile: Path,
                 push_output: list[str]) -> str:
    if builder.digest is None:
        digest = digestfile.read_text().strip() if digestfile.is_file() else ""
    else:
        lines = run_streaming(builder.digest(image, options.storage), "reading the digest")
        repo = without_tag(image)
        digest = next((ln.split("@", 1)[1] for ln in lines if ln.startswith(f"{repo}@")), "")
    if not digest.startswith("sha256:"):
        raise BuildError(f"pushed {image} but could not read its digest", output_tail=push_output)
    return digest


def source_date_epoch() -> int:
    """The time every file in a built layer gets: ``SOURCE_DATE_EPOCH`` (the reproducible-
    builds convention) when set, else 0. Fixed times make a layer's bytes depend on its
    contents alone; when the image was built is in its ``org.opencontainers.image.created``
    label instead."""
    value = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    if not value:
        return 0
    if not value.isdigit():
        raise InvalidInput(f"SOURCE_DATE_EPOCH must be whole seconds since 1970, not '{value}'")
    return int(value)
