"""The local platform's state directory: the env file scripts source, the ready marker."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from modelfn.localstack.state import StateDir

if TYPE_CHECKING:
    from pathlib import Path


def test_env_file_is_sourceable_by_a_shell(tmp_path: Path) -> None:
    state = StateDir(tmp_path / "dev")
    state.prepare()
    env = {"KUBECONFIG": str(tmp_path / "dev" / "kube config"),
           "AWS_ENDPOINT_URL": "http://127.0.0.1:4566", "AWS_DEFAULT_REGION": "us-east-1",
           "MODELFN_STORE": "s3://modelfn-dev/models"}
    state.write_env(env)
    assert state.read_env() == env
    shell = subprocess.run(
        ["sh", "-c", f'set -a; . "{state.env_file}"; echo "$KUBECONFIG|$MODELFN_STORE"'],
        capture_output=True, text=True, check=True, env={"PATH": os.environ["PATH"]})
    assert shell.stdout.strip() == f"{env['KUBECONFIG']}|s3://modelfn-dev/models"


def test_only_the_documented_names(tmp_path: Path) -> None:
    state = StateDir(tmp_path)
    with pytest.raises(ValueError, match="not a local platform variable: HOME"):
        state.write_env({"HOME": "/"})


def test_ready_names_a_live_process_only(tmp_path: Path) -> None:
    state = StateDir(tmp_path)
    state.prepare()
    assert state.read_ready() is None
    state.mark_ready("http://127.0.0.1:9000/status")
    assert state.read_ready() == {"pid": os.getpid(), "status_url": "http://127.0.0.1:9000/status"}
    dead = subprocess.Popen(["true"])
    dead.wait()
    state.ready_file.write_text(f'{{"pid": {dead.pid}, "status_url": "x"}}')
    assert state.read_ready() is None
    state.prepare()
    assert not state.ready_file.exists()


def test_one_platform_per_directory(tmp_path: Path) -> None:
    """A second platform on the same directory would write its own ports over the first
    one's env and kubeconfig and remove its ready marker: it is refused, naming the one
    that runs, and the directory is free again once the first lets go."""
    from modelfn.localstack.state import PlatformRunning

    state = StateDir(tmp_path / "dev")
    held = state.claim()
    state.prepare()
    state.mark_ready("http://127.0.0.1:1/status")
    try:
        with pytest.raises(PlatformRunning, match=f"a local platform already runs on "
                                                  f"{state.path} \\(process {os.getpid()}\\)"):
            StateDir(tmp_path / "dev").claim()
        assert state.read_ready() is not None  # the refused one touched nothing
        other = subprocess.run(
            [sys.executable, "-c", "import sys; from modelfn.localstack.state import StateDir\n"
             "try:\n    StateDir(__import__('pathlib').Path(sys.argv[1])).claim()\n"
             "except Exception as exc:\n    print(type(exc).__name__)",
             str(state.path)], capture_output=True, text=True, check=True)
        assert other.stdout.strip() == "PlatformRunning"  # another process, too
    finally:
        held.close()
    StateDir(tmp_path / "dev").claim().close()


def test_the_state_files_are_the_owners_only(tmp_path: Path) -> None:
    """The ready file holds the status endpoint's secret URL; the directory the kubeconfig."""
    state = StateDir(tmp_path / "dev")
    state.prepare()
    state.write_env({"MODELFN_STORE": "s3://modelfn-dev/models"})
    state.mark_ready("http://127.0.0.1:9000/status/secret")
    assert stat.S_IMODE(state.path.stat().st_mode) & 0o077 == 0
    for path in (state.env_file, state.ready_file):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
