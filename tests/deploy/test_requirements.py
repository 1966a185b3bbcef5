"""The requirement groups: pinned from the metadata, and every name declared in pyproject."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from modelfn.deploy import requirements as reqs
from modelfn.deploy.build import FLAVORS
from modelfn.deploy.errors import BuildError

ROOT = Path(__file__).resolve().parents[2]

METADATA = """Metadata-Version: 2.1
Name: modelfn
Requires-Dist: uvicorn[standard]>=0.29
Requires-Dist: uvloop>=0.19; sys_platform != "win32"
Requires-Dist: grpcio>=1.66; extra == "grpc"
Requires-Dist: grpcio>=1.60; extra == "dev"
Requires-Dist: mangum>=0.17; python_version >= "3.11" and extra == "lambda"
"""


def test_pins_come_from_the_metadata_without_extras_or_extra_markers() -> None:
    groups = [reqs.Group(None, ("uvicorn", "uvloop")), reqs.Group("grpc", ("grpcio",)),
              reqs.Group("lambda", ("Mangum",))]
    assert reqs.pinned(METADATA, groups) == [
        "uvicorn>=0.29", 'uvloop>=0.19; sys_platform != "win32"', "grpcio>=1.66",
        'mangum>=0.17; python_version >= "3.11"']


def test_excluded_names_are_left_out() -> None:
    group = reqs.Group(None, ("uvicorn", "uvloop"))
    assert reqs.pinned(METADATA, [group], exclude={"UVLoop"}) == ["uvicorn>=0.29"]


def test_a_name_the_metadata_lacks_is_a_build_error() -> None:
    with pytest.raises(BuildError, match="no 'grpcio' in the dependencies"):
        reqs.pinned(METADATA, [reqs.Group(None, ("grpcio",))])


def pyproject_declared() -> dict[tuple[str | None, str], str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    lines = [f"Requires-Dist: {r}" for r in project["dependencies"]]
    for extra, specs in project["optional-dependencies"].items():
        lines += [f'Requires-Dist: {r}; extra == "{extra}"' for r in specs]
    return reqs.declared("\n".join(lines))


@pytest.mark.parametrize(("target", "gpu"), sorted(FLAVORS))
def test_every_flavor_resolves_against_pyproject(target: str, gpu: bool) -> None:
    """pyproject declares every name an image installs, in the extra the group names."""
    declared = pyproject_declared()
    for group in (*FLAVORS[(target, gpu)].groups, reqs.S3):
        for name in group.names:
            assert (group.extra, reqs.normalise(name)) in declared, (group, name)


def test_images_leave_out_what_only_the_cli_and_builds_use() -> None:
    for flavor in FLAVORS.values():
        names = {reqs.normalise(n) for g in flavor.groups for n in g.names}
        assert not names & {"onnx", "click", "jinja2", "rich", "boto3", "pyyaml", "httpx"}


def test_the_gpu_pins_match_the_cuda_of_the_gpu_base_image() -> None:
    """onnxruntime-gpu 1.27 and later link CUDA 13 (1.26 and earlier CUDA 12), and the
    TensorRT provider of each release checked links TensorRT 10: unpinned, a CUDA 12 image
    would install a CUDA 13 onnxruntime and TensorRT 11, whose providers cannot load there."""
    from modelfn.deploy.build import _CUDA_BASE

    cuda = int(_CUDA_BASE.split(":")[1].split(".")[0])
    declared = pyproject_declared()
    assert cuda == 12
    assert "<1.27" in declared[("gpu", "onnxruntime-gpu")]
    assert "<11" in declared[("gpu", "tensorrt-cu12")]
    assert "<13" in declared[("gpu", "cuda-python")]
