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


def test_cpu_http_image_installs_into_a_venv_and_runs_the_http_handler() -> None:
    text = containerfile(BuildPlan("simple", 3, base="localhost/debian:bookworm"))
    assert text.startswith("# modelfn HTTP function (CPU")
    assert "ARG BASE=localhost/debian:bookworm\nFROM ${BASE}\n" in text
    assert "python3 -m venv /opt/modelfn/venv" in text
    assert "RUN pip install --requirement /opt/modelfn/requirements.txt" in text
    assert f"RUN pip install --no-deps /opt/modelfn/wheels/{WHEEL}" in text
    assert "PYTHONDONTWRITEBYTECODE=1" in text and "PYTHONUNBUFFERED=1" in text
    assert "USER 10001:10001" in text
    assert "COPY models/ /opt/modelfn/models/" in text
    assert 'MODELFN_REPOSITORY="/opt/modelfn/models"' in text
    assert 'MODELFN_MODELS="simple:3"' in text
    assert "MODELFN_STORE" not in text
    assert text.rstrip().endswith('CMD ["python3", "-m", "modelfn.handlers.http"]')
    assert "HEALTHCHECK" not in text  # not in the OCI image format buildah writes
    # python, dependencies, modelfn, then the model: the layer that changes most often last
    assert instructions(text) == ["ARG", "FROM", "ENV", "RUN", "COPY", "RUN", "COPY", "RUN",
                                  "COPY", "ENV", "EXPOSE", "LABEL", "USER", "CMD"]
    assert text.index("requirements.txt") < text.index(WHEEL) < text.index("COPY models/")
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
    text = containerfile(BuildPlan("simple", 1, install_python=install_python))
    assert ('python3 -c "import ensurepip, venv"' in text) is check
    assert ("apt-get install -y --no-install-recommends python3 python3-pip python3-venv"
            in text) is apt
    assert "python3 -m venv /opt/modelfn/venv" in text


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
    assert plan.flavor.extras == {"gpu"}
    assert "onnxruntime" in plan.excluded_requirements


def test_lambda_image_on_the_aws_base_has_only_a_cmd() -> None:
    plan = BuildPlan("simple", 1, target="lambda")
    text = containerfile(plan)
    assert plan.aws_lambda_base
    assert "ARG BASE=public.ecr.aws/lambda/python:3.12" in text
    assert '--target "${LAMBDA_TASK_ROOT}"' in text
    assert "ENTRYPOINT" not in text and "venv" not in text and "\nUSER" not in text
    assert text.rstrip().endswith(f'CMD ["{LAMBDA_HANDLER}"]')
    assert "awslambdaric" in plan.excluded_requirements  # the base brings its own client


def test_lambda_image_on_any_base_runs_awslambdaric() -> None:
    plan = BuildPlan("simple", 1, target="lambda", base="localhost/debian:bookworm")
    text = containerfile(plan)
    assert not plan.aws_lambda_base
    assert "python3 -m venv /opt/modelfn/venv" in text
    assert 'ENTRYPOINT ["python3", "-m", "awslambdaric"]' in text
    assert text.rstrip().endswith(f'CMD ["{LAMBDA_HANDLER}"]')
    assert 'HOME="/tmp"' in text and "\nUSER" not in text
    assert plan.excluded_requirements == set()


@pytest.mark.parametrize(("target", "gpu"), sorted(FLAVORS))
def test_every_flavor_renders_with_a_from_and_a_cmd(target: str, gpu: bool) -> None:
    plan = BuildPlan("m", 1, target="lambda" if target == "lambda" else "http", gpu=gpu)
    words = instructions(containerfile(plan))
    assert words[0] == "ARG" and words[1] == "FROM" and words[-1] == "CMD"
    assert "HEALTHCHECK" not in words


def test_rendering_is_strict_about_missing_variables() -> None:
    with pytest.raises(jinja2.UndefinedError):
        render("Containerfile.cpu.j2", {"base": "x"})
    with pytest.raises(jinja2.TemplateNotFound):
        render("Containerfile.nope.j2", {})
