"""Instances: resources the OS enforces on real processes, and ``podman run`` of an image.

The container test needs podman and an HTTP image of a model that serves digits (built
by ``modelfn build digits:1 --entrypoint http --bake``); it is skipped without them.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from serving_support import NS, spec, wait_settled

from modelfn.localstack.plane import ResourceLimits, RevisionState, RouteSpec, TrafficTarget
from modelfn.localstack.serving import LocalServingPlane
from modelfn.localstack.serving.instance import CpuSets, container_argv
from modelfn.platforms.podman import Podman, Storage

if TYPE_CHECKING:
    from collections.abc import Iterator

IMAGE_ENV = "MODELFN_TEST_HTTP_IMAGE"


def test_cpu_sets_are_handed_out_round_robin() -> None:
    sets = CpuSets([0, 1, 2])
    assert sets.take(None) is None
    assert sets.take(0.5) == [0]
    assert sets.take(2) == [1, 2]
    assert sets.take(8) == [0, 1, 2]  # never more than the usable CPUs


def test_podman_runs_the_image_with_the_sandbox_recipe(tmp_path: Path) -> None:
    podman = Podman(Storage(root=tmp_path, driver="vfs"))
    revision = spec("digits-00001", "/opt/modelfn/models",
                    image="127.0.0.1:5000/digits@sha256:abc", command=("python3", "-m", "x"),
                    resources=ResourceLimits(cpus=1, memory_bytes=1 << 30))
    argv = container_argv(podman, revision, "digits-00001-1", {"PORT": "8123", "A": "b"}, [1])
    assert argv[:5] == ["podman", "--root", str(tmp_path / "root"), "--runroot",
                        str(tmp_path / "run")]
    for flag in ("--runtime=runc", "--network=host", "--ulimit=nofile=1024:1024",
                 "--tls-verify=false", "--cpuset-cpus=1", f"--memory={1 << 30}",
                 "--env=PORT=8123", "--env=A=b", "--name=digits-00001-1", "--rm"):
        assert flag in argv
    assert argv[-4:] == ["127.0.0.1:5000/digits@sha256:abc", "python3", "-m", "x"]


def test_resources_pin_cpus_and_limit_memory(repos: dict[int, Path], tmp_path: Path) -> None:
    usable = os.sched_getaffinity(0)
    limit = 4 << 30
    with LocalServingPlane(log_dir=tmp_path) as plane:
        plane.ensure_revision(spec("digits-00001", repos[1], min_scale=1,
                                   resources=ResourceLimits(cpus=0.5, memory_bytes=limit)))
        assert wait_settled(plane, "digits-00001") is RevisionState.READY
        (pid,) = plane.pids(NS, "digits-00001")
        pinned = os.sched_getaffinity(pid)
        limits = Path(f"/proc/{pid}/limits").read_text()
    assert len(pinned) == 1 and pinned <= usable
    data = next(line for line in limits.splitlines() if line.startswith("Max data size"))
    assert data.split()[3:5] == [str(limit), str(limit)]


@pytest.fixture
def http_image() -> Iterator[str]:
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (scripts/ci-containers.sh installs it)")
    image = os.environ.get(IMAGE_ENV)
    if not image:
        pytest.skip(f"{IMAGE_ENV} names no HTTP image of digits to run")
    yield image


@pytest.mark.containers
def test_container_mode_serves_a_revision_from_its_image(
        http_image: str, digits_request: dict[str, Any], tmp_path: Path) -> None:
    storage = Storage.from_env()
    with LocalServingPlane(containers=True, storage=storage, idle_s=1.0,
                           log_dir=tmp_path) as plane:
        plane.ensure_revision(spec("digits-00001", "/opt/modelfn/models", image=http_image))
        urls = plane.set_route(RouteSpec(NS, "digits", (TrafficTarget("digits-00001", 100),)))
        assert wait_settled(plane, "digits-00001") is RevisionState.READY, \
            plane.revision_status(NS, "digits-00001").message
        response = httpx.post(urls.url + "/v2/models/digits/infer", json=digits_request,
                              timeout=60)
        assert response.status_code == 200, response.text
