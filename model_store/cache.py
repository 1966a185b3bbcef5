"""The local cache of fetched versions.

Layout, under ``MODELFN_CACHE`` or ``~/.cache/modelfn``::

    <cache>/<model>/<digest>/<version>/MANIFEST.json          local copy of the manifest
    <cache>/<model>/<digest>/<version>/<model>/config.pbtxt   a Triton repository ...
    <cache>/<model>/<digest>/<version>/<model>/<label file>   ... with the files its config names
    <cache>/<model>/<digest>/<version>/<model>/<version>/...  ... holding just this version
    <cache>/<model>/refs/<store-id>/<version>                 the digest of that version there

An entry is keyed by content digest, then by version number (the same content
pushed as two versions is laid out under two version numbers). Entries are
built in a temporary directory beside them and renamed into place, so an entry
that exists is complete and was verified when it was installed; one whose local
manifest can no longer be read (or describes something else) is discarded and
fetched again, like one whose files changed. A ref records
which digest a version of a given store has; versions are immutable, so a ref
never changes and a pinned fetch that finds one needs no request at all.

A cached file is trusted only while it is provably the one that was verified. At
install, each file's identity (size, mtime, ctime, inode) goes into ``FINGERPRINT.json``
beside the manifest; every cache hit compares them with a ``stat`` of each file (a few
microseconds, whatever the model's size) and re-hashes only a file whose identity
changed. Any write, truncation, replacement, ``chmod`` or ``touch`` changes the ctime,
which user space cannot set back, so a changed byte is always re-hashed; a file that no
longer matches its manifest discards the whole entry, which is then fetched again (and if
the store cannot be reached, the cold start fails rather than serve it). What this does
not catch is a write below the filesystem (raw disk access, a clock wound back to
forge a ctime): ``MODELFN_CACHE_VERIFY=full`` re-hashes every file at every cold start
for that threat model (costs measured in bench/RESULTS.md).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from modelfn.model_store.errors import CorruptObject
from modelfn.model_store.manifest import MANIFEST_NAME, Manifest, sha256_file

if TYPE_CHECKING:
    from collections.abc import Iterator

FINGERPRINT_NAME = "FINGERPRINT.json"
_DIGEST = re.compile(r"[0-9a-f]{64}")
VERIFY_MODES = ("stat", "full")
log = logging.getLogger("modelfn.store")


def verify_mode() -> str:
    mode = os.environ.get("MODELFN_CACHE_VERIFY", "stat").strip().lower() or "stat"
    if mode not in VERIFY_MODES:
        from modelfn.runtime.errors import InvalidInput

        raise InvalidInput(f"MODELFN_CACHE_VERIFY must be one of {', '.join(VERIFY_MODES)}, "
                           f"not '{mode}'")
    return mode


def _identity(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _expected(entry: Path, manifest: Manifest) -> dict[str, tuple[int | None, str]]:
    """Entry-relative path -> (size or None, sha256) of every file the entry must hold."""
    model, version = manifest.model, str(manifest.version)
    files: dict[str, tuple[int | None, str]] = {
        f"{model}/config.pbtxt": (None, manifest.config_sha256)}
    for item in manifest.files:
        files[f"{model}/{version}/{item.path}"] = (item.size, item.sha256)
    for item in manifest.model_files:
        files[f"{model}/{item.path}"] = (item.size, item.sha256)
    return files


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
        """The installed entry of a manifest, or None (also when it failed verification)."""
        path = self.entry(manifest.model, manifest.digest, manifest.version)
        if not path.is_dir():
            return None
        if self._local_manifest(path, manifest.model, manifest.digest, manifest.version) is None:
            return None
        return path if self.verify(path, manifest) else None

    def lookup_ref(self, store_id: str, model: str, version: int) -> tuple[Path, Manifest] | None:
        """The entry a ref points to, with its manifest, when both are present and sound."""
        ref = self._ref_path(store_id, model, version)
        try:
            digest = ref.read_text().strip()
        except (OSError, ValueError):
            return None
        if not _DIGEST.fullmatch(digest):  # a damaged ref: the store is asked again
            return None
        path = self.entry(model, digest, version)
        if not path.is_dir():
            return None
        manifest = self._local_manifest(path, model, digest, version)
        if manifest is None or not self.verify(path, manifest):
            return None
        return path, manifest

    def _local_manifest(self, path: Path, model: str, digest: str, version: int
                        ) -> Manifest | None:
        """The manifest an installed entry keeps, or None once an entry whose manifest is
        unreadable or describes another version has been discarded."""
        location = path / MANIFEST_NAME
        try:
            manifest = Manifest.from_bytes(location.read_bytes(), str(location))
        except (OSError, CorruptObject) as exc:
            self._discard(path, f"{model}:{version}", f"{MANIFEST_NAME}: {exc}")
            return None
        if (manifest.model, manifest.digest, manifest.version) != (model, digest, version):
            self._discard(path, f"{model}:{version}",
                          f"its {MANIFEST_NAME} describes another version")
            return None
        return manifest

    def verify(self, path: Path, manifest: Manifest) -> bool:
        """Whether the entry still holds exactly what its manifest lists; a file whose
        identity changed since install is re-hashed, and an entry that fails is discarded."""
        full = verify_mode() == "full"
        try:
            recorded = json.loads((path / FINGERPRINT_NAME).read_text())
        except (OSError, ValueError):
            recorded = {}  # installed before fingerprints: hash everything once
        fresh: dict[str, list[int]] = {}
        for rel, (size, sha) in _expected(path, manifest).items():
            file = path / rel
            try:
                identity = _identity(file)
            except OSError:
                self._discard(path, f"{manifest.model}:{manifest.version}", f"{rel} is missing")
                return False
            if not full and recorded.get(rel) == identity:
                fresh[rel] = identity
                continue
            actual_size, actual_sha = sha256_file(file)
            if actual_sha != sha or (size is not None and actual_size != size):
                self._discard(path, f"{manifest.model}:{manifest.version}",
                              f"{rel} no longer matches its sha256")
                return False
            fresh[rel] = _identity(file)
        if fresh != recorded:
            atomic_write(path / FINGERPRINT_NAME, json.dumps(fresh).encode())
        return True

    def _discard(self, path: Path, what: str, reason: str) -> None:
        log.warning("cached %s at %s is not what was installed (%s): discarded, fetching "
                    "it again", what, path, reason)
        trash = path.with_name(f".trash-{path.name}-{os.getpid()}")
        with contextlib.suppress(OSError):
            path.rename(trash)
        shutil.rmtree(trash, ignore_errors=True)

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
        fingerprint = {rel: _identity(target / rel) for rel in _expected(target, manifest)}
        atomic_write(target / FINGERPRINT_NAME, json.dumps(fingerprint).encode())
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
