"""README's walk-throughs run as written: every ``sh`` block under "Quickstart" and "The
local platform" is run by bash, top to bottom, in the repository, in a home of its own (so
``~/.modelfn/dev`` is fresh), with ``set -e``: a line that fails fails the test, and the
answers it prints are checked.

A user pastes these blocks into a fresh terminal; they once stopped half-way (a Lambda line
that could not follow the Knative line above it). The blocks use ``.venv``, which is the
environment these tests run in under ``scripts/test``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SECTIONS = ("Quickstart", "The local platform")
EXPECTED = json.loads((ROOT / "examples" / "requests" / "digits_expected.json").read_text())


def blocks(section: str) -> list[str]:
    """The ``sh`` blocks of the README section whose heading starts with ``section``."""
    text = README.read_text()
    start = re.search(rf"^## {re.escape(section)}.*$", text, re.MULTILINE)
    assert start is not None, f"README has no section {section!r}"
    end = re.search(r"^## ", text[start.end():], re.MULTILINE)
    body = text[start.end(): start.end() + end.start() if end else len(text)]
    return re.findall(r"^```sh\n(.*?)^```", body, re.MULTILINE | re.DOTALL)


def test_the_walk_throughs_are_there() -> None:
    """The blocks this module runs exist: a README edit that drops the ``sh`` tag would
    otherwise skip them silently."""
    assert [len(blocks(section)) for section in SECTIONS] == [2, 1]


def _venv_is_this_environment() -> bool:
    venv = ROOT / ".venv"
    return venv.is_dir() and Path(sys.prefix).resolve() == venv.resolve()


def run_block(block: str, home: Path) -> str:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MODELFN_", "AWS_", "KUBECONFIG", "VIRTUAL_ENV"))}
    env.update(HOME=str(home), PYTHONUNBUFFERED="1")
    script = "set -euo pipefail\n" + block
    process = subprocess.Popen(["bash", "-c", script], cwd=ROOT, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               start_new_session=True)
    try:
        out, _ = process.communicate(timeout=600)
    finally:
        # a block that failed half-way leaves its background platform behind: stop it
        try:
            os.killpg(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    assert process.returncode == 0, f"block failed ({process.returncode}):\n{block}\n---\n{out}"
    return out


def answers(out: str) -> list[dict[str, object]]:
    """The V2 inference answers a block printed (curl prints each as one JSON line); a
    model's metadata also has ``outputs``, but without ``data``."""
    found = []
    for line in out.splitlines():
        if line.startswith("{") and '"outputs"' in line:
            answer = json.loads(line)
            if all("data" in output for output in answer["outputs"]):
                found.append(answer)
    return found


def labels(answer: dict[str, object]) -> list[int]:
    outputs = {o["name"]: o for o in answer["outputs"]}  # type: ignore[attr-defined]
    return list(outputs["label"]["data"])


@pytest.mark.skipif(not _venv_is_this_environment(),
                    reason="README's blocks run .venv, which is not this environment")
@pytest.mark.skipif(shutil.which("curl") is None, reason="README's blocks use curl")
@pytest.mark.parametrize("section", SECTIONS)
def test_readme_blocks_run_as_written(section: str, tmp_path: Path) -> None:
    if section == "The local platform" and shutil.which("kubectl") is None:
        pytest.skip("README's local-platform block uses kubectl (scripts/ci-containers.sh "
                    "installs it)")
    for number, block in enumerate(blocks(section)):
        home = tmp_path / f"home-{number}"
        home.mkdir()
        out = run_block(block, home)
        got = answers(out)
        assert got, f"no V2 answer printed by:\n{block}\n---\n{out}"
        for answer in got:
            assert labels(answer) == EXPECTED["label"], out
        assert "Error:" not in out, out
