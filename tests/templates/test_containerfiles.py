"""The Containerfile templates, rendered through the one render function for every flavor."""

from __future__ import annotations

import datetime as dt

import jinja2
import pytest

from modelfn.deploy.build import FLAVORS, LAMBDA_HANDLER, BuildPlan
from modelfn.templates import render

WHEEL = "modelfn-0.1.0-py3-none-any.whl"
CREATED = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)


def containerfile(plan: BuildPlan) -> str:
    return render(plan.flavor.template, plan.template_variables(WHEEL, CREATED))


def instructions(text: str) -> list[str]:
    """The instruction keywords, in order (continuation lines and comments left out)."""
    words: list[str] = []
    continued = False
    for line in text.splitlines():
        if not continued and line.strip() and not line.startswith("#"):
            words.append(line.split()[0])
        continued = line.endswith("\\")
    return words


def test_cpu_http_image_installs_in_a_build_stage_and_runs_the_http_handler() -> None:
    text = containerfile(BuildPlan("simple", 3, base="localhost/debian:bookworm"))
    assert text.startswith("# modelfn HTTP function (CPU")
    assert "ARG BASE=localhost/debian:bookworm\n" in text
    assert "\nFROM ${BASE} AS build\n" in text
    build, image = text.split("\nFROM ${BASE}\n")
    # pip and its work stay in the build stage; the image copies what it installed
    assert "python3 -m pip install --no-compile --target /opt/modelfn/deps" in build
    assert "--no-deps --target /opt/modelfn/app \\\n        /opt/modelfn/wheels/" + WHEEL in build
    assert "--invalidation-mode unchecked-hash" in build
    assert "find . -depth -type d -name tests -exec rm -rf {} +" in build
    assert "onnxruntime/capi/libonnxruntime.so.*" in build and "numpy/f2py" in build
    assert "strip --strip-debug" in build and "python3-pip binutils" in build
    code = "\n".join(line for line in image.splitlines() if not line.startswith("#"))
    assert "pip" not in code and "venv" not in code
    assert "PYTHONPATH=/opt/modelfn/app:/opt/modelfn/deps" in image
    assert "PYTHONDONTWRITEBYTECODE=1" in image and "PYTHONUNBUFFERED=1" in image
    assert "USER 10001:10001" in image
    assert "COPY models/ /opt/modelfn/models/" in image
    assert 'MODELFN_REPOSITORY="/opt/modelfn/models"' in image
    assert 'MODELFN_MODELS="simple:3"' in image
    assert "MODELFN_STORE" not in text
    assert text.rstrip().endswith('CMD ["python3", "-m", "modelfn.handlers.http"]')
    assert "HEALTHCHECK" not in text  # not in the OCI image format buildah writes
    # python, dependencies, modelfn, then the model: the layer that changes most often last
    assert instructions(image) == ["ENV", "RUN", "COPY", "COPY", "COPY", "ENV", "EXPOSE",
                                   "LABEL", "USER", "CMD"]
    assert image.index("/opt/modelfn/deps /opt/modelfn/deps") \
        < image.index("/opt/modelfn/app /opt/modelfn/app") < image.index("COPY models/")
    assert 'HOME="/home/modelfn"' in text and 'PORT="8080"' in text


def test_labels_name_the_model_version_and_base() -> None:
    text = containerfile(BuildPlan("simple", 3, base="localhost/debian:bookworm"))
    for label in (
        'org.opencontainers.image.title="modelfn-simple"',
        'org.opencontainers.image.version="3"',
        'org.opencontainers.image.created="2026-01-02T03:04:05Z"',
        'org.opencontainers.image.base.name="localhost/debian:bookworm"',
        'modelfn.model="simple"',
        'modelfn.version="3"',
        'modelfn.target="http"',
        'modelfn.gpu="false"',
    ):
        assert label in text


@pytest.mark.parametrize(
    ("install_python", "check", "apt"),
    [(None, True, True), (True, False, True), (False, False, False)],
    ids=["detect", "always", "never"],
)
def test_python_comes_from_the_base_or_from_apt(
    install_python: bool | None, check: bool, apt: bool
) -> None:
    build, image = containerfile(BuildPlan("simple", 1, install_python=install_python)
                                 ).split("\nFROM ${BASE}\n")
    assert ("if python3 -m pip --version" in build) is check
    assert ("if command -v python3" in image) is check
    assert ("apt-get install -y --no-install-recommends python3 python3-pip" in build) is apt
    # the image gets the interpreter alone, and no apt lists or logs
    assert ("apt-get install -y --no-install-recommends python3 \\\n" in image) is apt
    assert ("rm -rf /var/lib/apt/lists/*" in image) is apt


def test_store_image_names_its_store_and_bakes_nothing() -> None:
    text = containerfile(BuildPlan("simple", 2, bake=False, store_uri="s3://models/prod"))
    assert "COPY models/" not in text
    assert 'MODELFN_STORE="s3://models/prod"' in text
    assert 'MODELFN_MODELS="simple:2"' in text
    assert "MODELFN_REPOSITORY" not in text


def test_env_values_are_quoted() -> None:
    text = containerfile(BuildPlan("simple", 2, bake=False, store_uri='file:///m o"d'))
    assert 'MODELFN_STORE="file:///m o\\"d"' in text


def test_gpu_image_uses_a_cuda_base_and_puts_tensorrt_on_the_loader_path() -> None:
    plan = BuildPlan("simple", 1, gpu=True)
    text = containerfile(plan)
    assert plan.flavor.template == "Containerfile.gpu.j2"
    assert "ARG BASE=docker.io/nvidia/cuda:" in text and "cudnn-runtime" in text
    assert "import os, tensorrt_libs" in text and "ldconfig" in text
    assert "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in text
    assert 'modelfn.gpu="true"' in text
    assert {g.extra for g in plan.flavor.groups} == {None, "gpu", "grpc"}
    assert "onnxruntime" in plan.excluded_requirements
    # the GPU build keeps onnxruntime-gpu's libraries whole: it cannot be run here
    assert "libonnxruntime.so" not in text and "strip" not in text
    assert text.index("COPY --from=build /opt/modelfn/deps") < text.index("tensorrt_libs") \
        < text.index("COPY --from=build /opt/modelfn/app")


def test_lambda_image_on_the_aws_base_has_only_a_cmd() -> None:
    plan = BuildPlan("simple", 1, target="lambda")
    text = containerfile(plan)
    assert plan.aws_lambda_base
    assert "ARG BASE=public.ecr.aws/lambda/python:3.12" in text
    assert "COPY --from=build /opt/modelfn/deps ${LAMBDA_TASK_ROOT}" in text
    assert "COPY --from=build /opt/modelfn/app ${LAMBDA_TASK_ROOT}" in text
    assert "ENTRYPOINT" not in text and "venv" not in text and "\nUSER" not in text
    assert text.rstrip().endswith(f'CMD ["{LAMBDA_HANDLER}"]')
    assert "awslambdaric" in plan.excluded_requirements  # the base brings its own client


def test_lambda_image_on_any_base_runs_awslambdaric() -> None:
    plan = BuildPlan("simple", 1, target="lambda", base="localhost/debian:bookworm")
    text = containerfile(plan)
    assert not plan.aws_lambda_base
    assert "PYTHONPATH=/opt/modelfn/app:/opt/modelfn/deps" in text
    assert 'ENTRYPOINT ["python3", "-m", "awslambdaric"]' in text
    assert text.rstrip().endswith(f'CMD ["{LAMBDA_HANDLER}"]')
    assert 'HOME="/tmp"' in text and "\nUSER" not in text
    assert plan.excluded_requirements == set()


@pytest.mark.parametrize(("target", "gpu"), sorted(FLAVORS))
def test_every_flavor_renders_with_a_from_and_a_cmd(target: str, gpu: bool) -> None:
    plan = BuildPlan("m", 1, target="lambda" if target == "lambda" else "http", gpu=gpu)
    words = instructions(containerfile(plan))
    assert words[0] == "ARG" and words[1] == "FROM" and words[-1] == "CMD"
    assert words.count("FROM") == 2  # the build stage and the image
    assert "HEALTHCHECK" not in words


def test_rendering_is_strict_about_missing_variables() -> None:
    with pytest.raises(jinja2.UndefinedError):
        render("Containerfile.cpu.j2", {"base": "x"})
    with pytest.raises(jinja2.TemplateNotFound):
        render("Containerfile.nope.j2", {})
