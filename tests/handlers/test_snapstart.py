"""The SnapStart after-restore hook, run by awslambdaric's own hook runner.

No AWS account is involved: SnapStart itself (snapshot, restore) happens only in Lambda.
These tests register the hook as the Lambda handler does, run the registered hooks with
``awslambdaric.lambda_runtime_hooks_runner.run_after_restore`` (what awslambdaric calls
after a restore) and check its effects: random state that differs from the snapshot's,
and a store client whose pooled connections are gone and which still works after.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import uuid
from typing import TYPE_CHECKING

import numpy as np
import pytest
import snapshot_restore_py
from awslambdaric import lambda_runtime_hooks_runner
from onnx_models import save, simple_graph

from modelfn.handlers import snapstart
from modelfn.localstack.s3 import S3Emulator
from modelfn.model_store import S3Store
from modelfn.model_store.engine_cache import EngineCache
from modelfn.runtime.repository import Repository

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


@pytest.fixture(autouse=True)
def hooks(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[object]]:
    """An empty after-restore registry for each test (it is a module-level list)."""
    registry: list[object] = []
    monkeypatch.setattr(snapshot_restore_py, "_after_restore_registry", registry)
    yield registry


def test_restore_draws_new_random_numbers(tmp_path: Path) -> None:
    assert snapstart.install(Repository(tmp_path))
    # the snapshot: every restored copy starts from this same state
    random.seed(1234)
    np.random.seed(1234)
    snapshot = (random.getstate(), np.random.get_state())
    expected = (random.random(), np.random.random())
    drawn = set()
    for _ in range(2):  # two environments restored from the one snapshot
        random.setstate(snapshot[0])
        np.random.set_state(snapshot[1])
        lambda_runtime_hooks_runner.run_after_restore()
        drawn.add((random.random(), np.random.random()))
    assert expected not in drawn
    assert len(drawn) == 2


def test_restore_drops_the_store_connections(tmp_path: Path) -> None:
    with S3Emulator() as emulator:
        client = emulator.client()
        bucket = f"models-{uuid.uuid4().hex[:8]}"
        client.create_bucket(Bucket=bucket)
        store = S3Store(bucket, "repo", client=client, cache_dir=tmp_path / "cache")
        repository = Repository(tmp_path, engines=EngineCache(store, {}, tmp_path / "engines"))
        assert store.list_models() == []  # init talked to the store: a pooled connection
        pools = client._endpoint.http_session._manager.pools  # botocore's urllib3 pools
        assert len(pools) == 1
        snapstart.install(repository)
        lambda_runtime_hooks_runner.run_after_restore()
        assert len(pools) == 0
        assert store.list_models() == []  # and the client reconnects


def test_without_the_hook_module_nothing_is_registered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hooks: list[object]
) -> None:
    monkeypatch.setitem(sys.modules, "snapshot_restore_py", None)  # import fails
    assert not snapstart.install(Repository(tmp_path))
    assert hooks == []


def test_the_lambda_handler_registers_the_hook_at_init(tmp_path: Path) -> None:
    save(tmp_path / "simple", simple_graph(), version=1)
    script = ("import json, snapshot_restore_py, modelfn.handlers.aws_lambda; "
              "print(json.dumps([f.__module__ + '.' + f.__name__ "
              "for f, _, _ in snapshot_restore_py.get_after_restore()]))")
    env = {"MODELFN_REPOSITORY": str(tmp_path), "PATH": "/usr/bin:/bin",
           "AWS_LAMBDA_FUNCTION_NAME": "simple"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == ["modelfn.handlers.snapstart.restore"]
