"""What the end-to-end deploy tests share: `modelfn` as a process, digits and a second
version of it, and `modelfn status` as JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from modelfn.localstack.state import StateDir
from modelfn.process.supervisor import Process

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
REQUEST = json.loads((EXAMPLES / "requests" / "digits.json").read_text())
EXPECTED = json.loads((EXAMPLES / "requests" / "digits_expected.json").read_text())["label"]


def retrained(where: Path) -> Path:
    """digits as a second version: the same weights, another file (a new doc string)."""
    import shutil

    import onnx

    model = where / "digits"
    shutil.copytree(EXAMPLES / "models" / "digits", model)
    proto = onnx.load(str(model / "1" / "model.onnx"))
    proto.doc_string = "digits, retrained"
    onnx.save(proto, str(model / "1" / "model.onnx"))
    return model


def start_dev(path: Path, *args: str, tail_lines: int = 200) -> tuple[Process, dict[str, str]]:
    """`modelfn dev --state-dir path *args` as a process, ready, and the environment a user
    has after `set -a; . DIR/env; set +a` (with a model cache of the platform's own). The
    caller stops the process."""
    state = StateDir(path)
    process = Process([sys.executable, "-m", "modelfn.cli.main", "dev", "--state-dir",
                       str(path), *args], name="modelfn dev", tail_lines=tail_lines).start()
    try:
        process.wait_ready(lambda: state.read_ready() is not None, timeout=120)
    except BaseException:
        process.stop(10)
        raise
    return process, {**os.environ, **state.read_env(), "MODELFN_DEV_DIR": str(path),
                     "MODELFN_CACHE": str(path / "cache")}


def modelfn(env: dict[str, str], *args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "modelfn.cli.main", *args], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == code, f"modelfn {' '.join(args)}: {done.returncode}\n" \
                                    f"{done.stdout}\n{done.stderr}"
    return done


def versions(env: dict[str, str]) -> list[int]:
    out = modelfn(env, "versions", "digits", "--store", env["MODELFN_STORE"]).stdout
    return [int(words[1]) for words in map(str.split, out.splitlines())
            if len(words) > 1 and words[0] == "digits" and words[1].isdigit()]


def status(env: dict[str, str], *target: str) -> dict[str, Any]:
    return json.loads(modelfn(env, "status", "digits", *target, "--output", "json").stdout)  # type: ignore[no-any-return]
