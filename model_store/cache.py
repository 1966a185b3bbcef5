"""The local cache of fetched versions.

Layout, under ``MODELFN_CACHE`` or ``~/.cache/modelfn``::

    <cache>/<model>/<digest>/<version>/MANIFEST.json          local copy of the manifest
    <cache>/<model>/<digest>/<version>/<model>/config.pbtxt   a Triton repository ...
    <cache>/<model>/<digest>/<version>/<model>/<version>/...  ... holding just this version
    <cache>/<model>/refs/<store-id>/<version>                 the digest of that version there

An entry is keyed by content digest, then by version number (the same content
pushed as two versions is laid out under two version numbers). Entries are
built in a temporary directory beside them and renamed into place, so an entry
that exists is complete and was verified when it was installed. A ref records
which digest a version of a given store has; versions are immutable, so a ref
never changes and a pinned fetch that finds one needs no request at all.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from modelfn.model_store.manifest import MANIFEST_NAME, Manifest

if TYPE_CHECKING:
    from collections.abc import Iterator


def default_cache_dir() -> Path:
    configured = os.environ.get("MODELFN_CACHE")
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "modelfn"


class Cache:
    def __init__(self, root: Path | str | None = None) -> None:
        self.root = Path(root) if root is not None else default_cache_dir()

    def entry(self, model: str, digest: str, version: int) -> Path:
        return self.root / model / digest / str(version)

    def lookup(self, manifest: Manifest) -> Path | None:
        """The installed entry of a manifest, or None."""
        path = self.entry(manifest.model, manifest.digest, manifest.version)
        return path if (path / MANIFEST_NAME).is_file() else None

    def lookup_ref(self, store_id: str, model: str, version: int) -> tuple[Path, Manifest] | None:
        """The entry a ref points to, with its manifest, when both are present and sound."""
        ref = self._ref_path(store_id, model, version)
        try:
            digest = ref.read_text().strip()
            path = self.entry(model, digest, version)
            data = (path / MANIFEST_NAME).read_bytes()
        except (OSError, ValueError):
            return None
        manifest = Manifest.from_bytes(data, str(path / MANIFEST_NAME))
        if manifest.digest != digest or manifest.model != model or manifest.version != version:
            return None
        return path, manifest

    def write_ref(self, store_id: str, manifest: Manifest) -> None:
        ref = self._ref_path(store_id, manifest.model, manifest.version)
        ref.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(ref, manifest.digest.encode())

    @contextlib.contextmanager
    def staging(self, model: str) -> Iterator[Path]:
        """A fresh temporary directory on the cache's filesystem, removed afterwards."""
        parent = self.root / model
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=parent))
        try:
            yield tmp
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def install(self, staged: Path, manifest: Manifest) -> Path:
        """Move a complete staged entry into place; the first of racing installs wins."""
        (staged / MANIFEST_NAME).write_bytes(manifest.to_bytes())
        target = self.entry(manifest.model, manifest.digest, manifest.version)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            staged.rename(target)
        except OSError:
            if self.lookup(manifest) is None:
                raise
        return target

    @staticmethod
    def store_id(identity: str) -> str:
        return hashlib.sha256(identity.encode()).hexdigest()[:16]

    def _ref_path(self, store_id: str, model: str, version: int) -> Path:
        return self.root / model / "refs" / store_id / str(version)


def atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
