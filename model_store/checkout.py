"""Check out model versions from a store into one local Triton repository.

A function serves a few pinned versions (``digits:3``, ``digits:4`` for a
canary, ``mnist:1``...). Each ``fetch`` lands in the digest-keyed cache; the
checkout is a directory of symlinks into those cache entries laid out as
``<repo>/<model>/config.pbtxt`` and ``<repo>/<model>/<version>/``, so the
runtime loads it like any local repository and nothing large is copied twice (label
files are copied: the runtime reads no link out of a model directory).

``copy_out`` is the other way a fetched version leaves the cache: copied into a
repository the user keeps (``modelfn pull``), through a temporary directory, never
over a local file that differs.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from modelfn.model_store.base import CONFIG_NAME
from modelfn.model_store.errors import CheckoutConflict, PullConflict
from modelfn.model_store.manifest import MANIFEST_NAME, Manifest
from modelfn.runtime.errors import InvalidInput

if TYPE_CHECKING:
    from collections.abc import Iterator

    from modelfn.model_store.base import ModelStore
    from modelfn.model_store.transfer import Progress


def _check_ours(model_dir: Path) -> None:
    """Refuse a model directory a checkout did not make: a checkout links its config and
    versions, where a local repository has files and directories (they would be replaced,
    or served unverified in the store's place)."""
    if not model_dir.exists():
        return
    if model_dir.is_symlink() or not model_dir.is_dir():
        raise CheckoutConflict(model_dir)
    for entry in model_dir.iterdir():
        if entry.name == CONFIG_NAME or entry.name.isdigit():
            if not entry.is_symlink():
                raise CheckoutConflict(entry)


@dataclass(frozen=True)
class Checkout:
    #: the local repository to serve
    path: Path
    #: ``name:version`` for every version checked out, with ``latest`` resolved
    refs: list[str]
    #: seconds the fetches took (the cold-start ``fetch`` phase)
    seconds: float
    #: the content digest of every version checked out, by (name, version)
    digests: dict[tuple[str, int], str]


def checkout(store: ModelStore, refs: list[tuple[str, int | None]], *,
             into: Path, progress: Progress | None = None) -> Checkout:
    """Fetch every ``(name, version or None for latest)`` and link them into one repository
    at ``into`` (the caller's directory: it removes it when done)."""
    for name in dict.fromkeys(name for name, _ in refs):  # before anything is linked
        _check_ours(into / name)
    started = time.perf_counter()
    pinned: list[str] = []
    digests: dict[tuple[str, int], str] = {}
    newest: dict[str, int] = {}
    for name, version in refs:
        number = store.resolve(name, "latest" if version is None else version)
        entry = store.fetch(name, number, progress=progress)
        manifest = entry / MANIFEST_NAME  # the cache keeps each entry's manifest: no request
        parsed = Manifest.from_bytes(manifest.read_bytes(), str(manifest))
        digests[(name, number)] = parsed.digest
        fetched = entry / name
        model_dir = into / name
        model_dir.mkdir(parents=True, exist_ok=True)
        link = model_dir / str(number)
        if not link.exists():
            link.symlink_to(fetched / str(number), target_is_directory=True)
        if number >= newest.get(name, 0):  # the newest version's config and label files win
            newest[name] = number
            config = model_dir / CONFIG_NAME
            config.unlink(missing_ok=True)
            config.symlink_to(fetched / CONFIG_NAME)
            for file in parsed.model_files:  # copied: the runtime reads no link out of a model
                label = model_dir / file.path
                label.unlink(missing_ok=True)
                shutil.copyfile(fetched / file.path, label)
        pinned.append(f"{name}:{number}")
    return Checkout(into, pinned, time.perf_counter() - started, digests)


def copy_out(fetched: Path, model_dir: Path, version: int, source: str) -> None:
    """Copy a fetched model directory (``<entry>/<model>``: its config, label files and
    one version) into ``model_dir`` of a local repository. A file there that differs from
    the fetched one is refused (``source`` names where it came from) before anything is
    written; the copy is made in a temporary directory beside it and renamed into place,
    so a failure leaves nothing half-written."""
    target = model_dir / str(version)
    if target.exists() or target.is_symlink():
        raise InvalidInput(f"{target} already exists")
    shared = sorted(p.name for p in fetched.iterdir() if p.is_file())  # config, label files
    missing = []
    for name in shared:
        local = model_dir / name
        if not (local.exists() or local.is_symlink()):
            missing.append(name)
        elif not local.is_file() or local.read_bytes() != (fetched / name).read_bytes():
            raise PullConflict(local, source)
    model_dir.parent.mkdir(parents=True, exist_ok=True)
    if not model_dir.exists():  # a new model: the whole directory at once
        with _staging(model_dir.parent) as staged:
            shutil.copytree(fetched, staged / model_dir.name)
            (staged / model_dir.name).rename(model_dir)
        return
    with _staging(model_dir) as staged:
        shutil.copytree(fetched / str(version), staged / str(version))
        for name in missing:
            shutil.copy2(fetched / name, staged / name)
        # the version first: a config with no version would name files that are not there
        (staged / str(version)).rename(target)
        for name in missing:
            os.replace(staged / name, model_dir / name)


@contextlib.contextmanager
def _staging(parent: Path) -> Iterator[Path]:
    staged = Path(tempfile.mkdtemp(prefix=".modelfn-pull-", dir=parent))
    try:
        yield staged
    finally:
        shutil.rmtree(staged, ignore_errors=True)
