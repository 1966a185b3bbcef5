"""MANIFEST.json: what a committed version is, byte for byte.

A manifest lists every file of a version (relative path, size, sha256), the
sha256 and text of the config.pbtxt the version was pushed with, when it was
created (UTC, ISO 8601) and by which modelfn. Its ``digest`` names the content:
sha256 over the canonical JSON of the sorted ``[path, sha256]`` pairs and the
config's sha256, so the same files and config always give the same digest,
whatever the version number or the time of the push.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from modelfn.model_store import names
from modelfn.model_store.errors import CorruptObject, InvalidName
from modelfn.runtime.errors import InvalidInput

if TYPE_CHECKING:
    from collections.abc import Iterable

MANIFEST_NAME = "MANIFEST.json"
FORMAT = 1
_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class FileEntry:
    path: str  # relative to the version directory, '/'-separated
    size: int
    sha256: str


@dataclass(frozen=True, slots=True)
class Manifest:
    model: str
    version: int
    files: tuple[FileEntry, ...]
    config_sha256: str
    config: str  # the config.pbtxt text this version was pushed with
    created: str
    modelfn_version: str
    digest: str

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    def to_bytes(self) -> bytes:
        doc = {
            "format": FORMAT,
            "model": self.model,
            "version": self.version,
            "digest": self.digest,
            "created": self.created,
            "modelfn_version": self.modelfn_version,
            "config": {"sha256": self.config_sha256, "text": self.config},
            "files": [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in self.files],
        }
        return (json.dumps(doc, indent=2) + "\n").encode()

    @classmethod
    def from_bytes(cls, data: bytes, location: str) -> Manifest:
        """Parse and check a manifest read back from a store or a cache."""
        try:
            doc = json.loads(data)
            files = tuple(
                FileEntry(names.relative_path(str(f["path"])), int(f["size"]), str(f["sha256"]))
                for f in doc["files"]
            )
            manifest = cls(
                model=names.model_name(str(doc["model"])),
                version=names.version_number(int(doc["version"])),
                files=files,
                config_sha256=str(doc["config"]["sha256"]),
                config=str(doc["config"]["text"]),
                created=str(doc["created"]),
                modelfn_version=str(doc["modelfn_version"]),
                digest=str(doc["digest"]),
            )
        except InvalidName as exc:
            raise CorruptObject(location, f"manifest lists an unsafe name: {exc}") from exc
        except (ValueError, KeyError, TypeError, InvalidInput) as exc:
            raise CorruptObject(location, f"not a valid modelfn manifest ({exc!r})") from exc
        if sha256_bytes(manifest.config.encode()) != manifest.config_sha256:
            raise CorruptObject(location, "the config text does not match its sha256")
        if compute_digest(files, manifest.config_sha256) != manifest.digest:
            raise CorruptObject(location, "the digest does not match the listed files")
        return manifest


def compute_digest(files: Iterable[FileEntry], config_sha256: str) -> str:
    pairs = sorted([f.path, f.sha256] for f in files)
    canonical = json.dumps({"config": config_sha256, "files": pairs}, separators=(",", ":"))
    return sha256_bytes(canonical.encode())


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> tuple[int, str]:
    """The size and sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def mismatch(path: Path, entry: FileEntry) -> str | None:
    """Why a local file is not the one the manifest lists, or None when it is."""
    if not path.is_file():
        return "missing after download"
    size, sha = sha256_file(path)
    if size != entry.size:
        return f"size {size} bytes, manifest says {entry.size} (truncated or replaced)"
    if sha != entry.sha256:
        return f"sha256 {sha[:12]}, manifest says {entry.sha256[:12]}"
    return None


def scan_dir(root: Path) -> tuple[FileEntry, ...]:
    """Every regular file under ``root`` with its size and sha256, sorted by path."""
    if not root.is_dir():
        raise InvalidInput(f"{root} is not a directory")
    entries: list[FileEntry] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        dirnames.sort()
        for filename in filenames:
            full = Path(dirpath, filename)
            rel = full.relative_to(root).as_posix()
            names.relative_path(rel)
            if not full.is_file():
                raise InvalidInput(f"{full} is not a regular file")
            size, sha = sha256_file(full)
            entries.append(FileEntry(rel, size, sha))
    entries.sort(key=lambda e: e.path)
    for entry in entries:
        top = entry.path.split("/", 1)[0]
        if top in names.RESERVED_IN_VERSION:
            raise InvalidInput(
                f"{root / entry.path}: '{top}' is reserved by the model store in a version "
                "directory; rename it"
            )
    if not entries:
        raise InvalidInput(f"version directory {root} has no files")
    return tuple(entries)


def modelfn_version() -> str:
    try:
        return metadata.version("modelfn")
    except metadata.PackageNotFoundError:
        return "unknown"


def build(model: str, version: int, files: tuple[FileEntry, ...], config: bytes) -> Manifest:
    try:
        text = config.decode()
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"config.pbtxt of model '{model}' is not UTF-8 text") from exc
    config_sha = sha256_bytes(config)
    return Manifest(
        model=model,
        version=version,
        files=files,
        config_sha256=config_sha,
        config=text,
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        modelfn_version=modelfn_version(),
        digest=compute_digest(files, config_sha),
    )


def load_dict(data: bytes) -> dict[str, Any]:
    """A small JSON document (claims, engine manifests); {} when unreadable."""
    try:
        doc = json.loads(data)
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}
