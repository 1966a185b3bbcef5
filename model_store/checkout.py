"""Check out model versions from a store into one local Triton repository.

A function serves a few pinned versions (``digits:3``, ``digits:4`` for a
canary, ``mnist:1``...). Each ``fetch`` lands in the digest-keyed cache; the
checkout is a directory of symlinks into those cache entries laid out as
``<repo>/<model>/config.pbtxt`` and ``<repo>/<model>/<version>/``, so the
runtime loads it like any local repository and nothing is copied twice.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from modelfn.model_store.base import CONFIG_NAME
from modelfn.model_store.manifest import MANIFEST_NAME, Manifest

if TYPE_CHECKING:
    from modelfn.model_store.base import ModelStore
    from modelfn.model_store.transfer import Progress


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
             into: Path | None = None, progress: Progress | None = None) -> Checkout:
    """Fetch every ``(name, version or None for latest)`` and link them into one repository."""
    started = time.perf_counter()
    root = into or Path(tempfile.mkdtemp(prefix="modelfn-repo-"))
    pinned: list[str] = []
    digests: dict[tuple[str, int], str] = {}
    newest: dict[str, int] = {}
    for name, version in refs:
        number = store.resolve(name, "latest" if version is None else version)
        entry = store.fetch(name, number, progress=progress)
        manifest = entry / MANIFEST_NAME  # the cache keeps each entry's manifest: no request
        digests[(name, number)] = Manifest.from_bytes(manifest.read_bytes(), str(manifest)).digest
        fetched = entry / name
        model_dir = root / name
        model_dir.mkdir(parents=True, exist_ok=True)
        link = model_dir / str(number)
        if not link.exists():
            link.symlink_to(fetched / str(number), target_is_directory=True)
        if number >= newest.get(name, 0):  # the config of the newest version wins
            newest[name] = number
            config = model_dir / CONFIG_NAME
            config.unlink(missing_ok=True)
            config.symlink_to(fetched / CONFIG_NAME)
        pinned.append(f"{name}:{number}")
    return Checkout(root, pinned, time.perf_counter() - started, digests)
