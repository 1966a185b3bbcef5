"""The modelfn wheel that goes into images, built from the source tree and cached by content.

The source root is found from this package's location (an editable install maps
``modelfn.deploy`` to ``<root>/deploy``). The files that make up the distribution
(``pyproject.toml``, ``README.md`` and every package folder) are hashed; a wheel built from
the same content is reused from ``<cache>/wheels/<hash>/``. Building copies those files to a
temporary directory first, so the source tree gets no ``build/`` or ``egg-info`` litter.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING

from modelfn.deploy.builders import run_streaming
from modelfn.deploy.errors import BuildError

if TYPE_CHECKING:
    from collections.abc import Iterator

    from modelfn.deploy.builders import Progress

_TOP_FILES = ("pyproject.toml", "README.md")
_SKIP_DIRS = {"__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache"}


def cache_dir() -> Path:
    """``$MODELFN_CACHE_DIR``, else ``$XDG_CACHE_HOME/modelfn``, else ``~/.cache/modelfn``."""
    if explicit := os.environ.get("MODELFN_CACHE_DIR"):
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "modelfn"


def source_root() -> Path | None:
    """The modelfn source tree this package runs from, or None for an installed wheel."""
    root = Path(__file__).resolve().parents[1]
    pyproject = root / "pyproject.toml"
    if not pyproject.is_file():
        return None
    project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
    return root if project.get("name") == "modelfn" else None


def _source_files(root: Path) -> Iterator[Path]:
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    folders = sorted(set(config["tool"]["setuptools"]["package-dir"].values()))
    for name in _TOP_FILES:
        if (root / name).is_file():
            yield Path(name)
    for folder in folders:
        for dirpath, dirnames, filenames in os.walk(root / folder):
            dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
            for filename in sorted(filenames):
                if not filename.endswith((".pyc", ".pyo")):
                    yield (Path(dirpath) / filename).relative_to(root)


def source_digest(root: Path) -> str:
    """sha256 over the relative paths and contents of the files the wheel is built from."""
    digest = hashlib.sha256()
    for rel in _source_files(root):
        digest.update(rel.as_posix().encode() + b"\0")
        digest.update(hashlib.sha256((root / rel).read_bytes()).digest())
    return digest.hexdigest()


def modelfn_wheel(progress: Progress | None = None) -> Path:
    """The cached wheel for the current source tree, built with ``pip wheel`` on a miss."""
    root = source_root()
    if root is None:
        raise BuildError("modelfn is not running from a source tree; pass a built wheel "
                         "(--wheel or MODELFN_WHEEL)")
    slot = cache_dir() / "wheels" / source_digest(root)[:32]
    cached = sorted(slot.glob("modelfn-*.whl"))
    if cached:
        return cached[-1]
    with tempfile.TemporaryDirectory(prefix="modelfn-wheel-") as tmp:
        src, out = Path(tmp) / "src", Path(tmp) / "out"
        for rel in _source_files(root):
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / rel, src / rel)
        command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet",
                   "--disable-pip-version-check", "--wheel-dir", str(out), str(src)]
        run_streaming(command, "building the modelfn wheel", progress)
        built = sorted(out.glob("modelfn-*.whl"))
        if not built:
            raise BuildError(f"pip wheel produced no modelfn wheel in {out}", command=command)
        slot.mkdir(parents=True, exist_ok=True)
        staged = slot / f".{built[0].name}.tmp"
        shutil.copyfile(built[0], staged)
        return staged.replace(slot / built[0].name)
