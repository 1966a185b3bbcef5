"""tune's working directory goes with tune, however tune ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING

import pytest

from modelfn.process.supervisor import alive, descendants
from modelfn.tune.workdir import PREFIX, workdir

if TYPE_CHECKING:
    from pathlib import Path


def test_removed_on_exit_and_on_an_exception(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    with workdir() as path:
        assert path.parent == tmp_path and path.name.startswith(PREFIX)
        (path / "candidate-1").mkdir()
        removers = descendants(os.getpid())
        assert removers
    assert not list(tmp_path.iterdir())
    assert not [pid for pid in removers if alive(pid)]  # waited for, not left running
    with pytest.raises(KeyboardInterrupt), workdir() as path:
        raise KeyboardInterrupt
    assert not list(tmp_path.iterdir())


def test_removed_when_its_process_is_sigkilled(tmp_path: Path) -> None:
    code = ("import sys, time\nfrom modelfn.tune.workdir import workdir\n"
            "with workdir() as path:\n    (path / 'candidate-1').mkdir()\n"
            "    print(path, flush=True)\n    time.sleep(60)\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "TMPDIR": str(tmp_path)})
    assert child.stdout is not None
    path = child.stdout.readline().strip()
    assert os.path.isdir(path)
    remover = descendants(child.pid)
    child.kill()  # no cleanup runs in it
    child.wait()
    child.stdout.close()
    deadline = time.monotonic() + 30
    while [pid for pid in remover if alive(pid)] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(path)
    assert child.returncode == -signal.SIGKILL
