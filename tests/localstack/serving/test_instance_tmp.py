"""An instance's temporary files go with it: a Knative instance killed at the end of its
drain grace (SIGKILL: the function's own cleanup never runs) leaves no ``modelfn-repo-*``
checkout behind."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

from serving_support import spec

from modelfn.localstack.serving.instance import CpuSets, Instance
from modelfn.model_store import open_store

if TYPE_CHECKING:
    import pytest


def test_an_instance_killed_at_the_grace_leaves_no_temp_directory(
    repos: dict[int, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    machine_tmp = tmp_path / "machine-tmp"
    machine_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(machine_tmp))  # what the instance would inherit
    open_store(str(tmp_path / "store")).push(repos[1] / "digits")
    revision = spec("digits-00001", "", env={
        "MODELFN_REPOSITORY": "", "MODELFN_STORE": f"file://{tmp_path / 'store'}",
        "MODELFN_MODELS": "digits", "MODELFN_CACHE": str(tmp_path / "cache")})
    instance = Instance.create(revision, cpusets=CpuSets(), podman=None, log_dir=tmp_path,
                               base_env={})

    async def run() -> None:
        await instance.start(revision.readiness_path, 60)
        await instance.stop(grace=0)  # no time to drain: SIGKILL at once

    asyncio.run(run())
    assert not instance.process.running
    assert list(machine_tmp.iterdir()) == []


def test_the_plane_keeps_instances_temp_files_in_its_own_directory_cleared_at_start(
    repos: dict[int, Path], tmp_path: Path
) -> None:
    """A platform killed with SIGKILL cannot remove its instances' TMPDIRs; they are in a
    directory of its own, which the next start empties."""
    from serving_support import NS, wait_settled

    from modelfn.localstack.plane import RevisionState
    from modelfn.localstack.serving import LocalServingPlane

    tmp = tmp_path / "tmp"
    (tmp / "modelfn-digits-00001-1-left-by-a-killed-run").mkdir(parents=True)
    with LocalServingPlane(idle_s=30, log_dir=tmp_path / "logs", tmp_dir=tmp) as plane:
        assert list(tmp.iterdir()) == []
        plane.ensure_revision(spec("digits-00001", repos[1], min_scale=1))
        assert wait_settled(plane, "digits-00001") is RevisionState.READY
        (pid,) = plane.pids(NS, "digits-00001")
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert f"TMPDIR={tmp}/".encode() in b"\n".join(environ)
    assert list(tmp.iterdir()) == []
