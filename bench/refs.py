"""modelfn at another commit, as an importable tree: ``bench/run.py --compare-ref REF``."""

from __future__ import annotations

import shutil
import subprocess
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

PACKAGES = ("runtime", "protocol", "handlers", "model_store", "cli", "templates", "localstack",
            "deploy", "process", "platforms", "net", "gateway", "client")


def export_ref(root: Path, work: Path, ref: str) -> Path:
    """modelfn's packages as of ``ref``, as an importable tree (``PYTHONPATH`` goes first)."""
    commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--verify", f"{ref}^{{commit}}"],
                            capture_output=True, text=True, check=True).stdout.strip()
    dest = work / "refs" / commit
    if not dest.exists():
        tmp = dest.with_name(commit + ".part")
        shutil.rmtree(tmp, ignore_errors=True)
        (tmp / "modelfn").mkdir(parents=True)
        listed = subprocess.run(["git", "-C", str(root), "ls-tree", "--name-only", commit],
                                capture_output=True, text=True, check=True).stdout.split()
        archive = subprocess.run(["git", "-C", str(root), "archive", commit,
                                  *[p for p in PACKAGES if p in listed]],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tmp / "modelfn")], input=archive, check=True)
        tmp.rename(dest)
    return dest
