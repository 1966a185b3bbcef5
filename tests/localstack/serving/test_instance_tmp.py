"""An instance's temporary files go with it: a Knative instance killed at the end of its
drain grace (SIGKILL: the function's own cleanup never runs) leaves no ``modelfn-repo-*``
checkout behind."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from serving_support import spec

from modelfn.localstack.serving.instance import CpuSets, Instance
from modelfn.model_store import open_store

if TYPE_CHECKING:
    from pathlib import Path

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
