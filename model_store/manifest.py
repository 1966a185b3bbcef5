"""MANIFEST.json: what a committed version is, byte for byte.

A manifest lists every file of a version (relative path, size, sha256), the
sha256 and text of the config.pbtxt the version was pushed with, the files of the
model directory that config names (``model_files``: label files, by file name), when
it was created (UTC, ISO 8601) and by which modelfn. Its ``digest`` names the
content: sha256 over the canonical JSON of the sorted ``[path, sha256]`` pairs, the
config's sha256 and, when there are any, the sorted model files' pairs, so the same
files and config always give the same digest, whatever the version number or the
time of the push (and a version without model files keeps the digest it always had).
An ensemble's manifest also lists the models its steps run, each at the version its push
resolved (``composing``; the module of that name says how), and they are part of its
digest: the same config pushed against other versions of its models is other content.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from modelfn.model_store import names
from modelfn.model_store.errors import CorruptObject, InvalidName, MissingModelFile
from modelfn.runtime.errors import InvalidInput

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

MANIFEST_NAME = "MANIFEST.json"
PYTHON = "python"  # Triton's Python backend, as a config names it
FORMAT = 1
_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class FileEntry:
    path: str  # relative to the version directory, '/'-separated
    size: int
    sha256: str


@dataclass(frozen=True, slots=True, order=True)
class ModelRef:
    """A model at one version: ``name:version``."""

    model: str
    version: int

    def __str__(self) -> str:
        return f"{self.model}:{self.version}"


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
    #: files of the model directory the config names (label files), beside config.pbtxt
    model_files: tuple[FileEntry, ...] = ()
    #: an ensemble's composing models at the versions its push resolved, sorted
    composing: tuple[ModelRef, ...] = ()

    @property
    def size(self) -> int:
        return sum(f.size for f in (*self.files, *self.model_files))

    def to_bytes(self) -> bytes:
        doc = {
            "format": FORMAT,
            "model": self.model,
            "version": self.version,
            "digest": self.digest,
            "created": self.created,
            "modelfn_version": self.modelfn_version,
            "config": {"sha256": self.config_sha256, "text": self.config},
            "files": _entries(self.files),
        }
        if self.model_files:  # left out when empty: older readers still read such manifests
            doc["model_files"] = _entries(self.model_files)
        if self.composing:
            doc["composing"] = [{"model": m.model, "version": m.version}
                                for m in self.composing]
        return (json.dumps(doc, indent=2) + "\n").encode()

    @classmethod
    def from_bytes(cls, data: bytes, location: str) -> Manifest:
        """Parse and check a manifest read back from a store or a cache."""
        try:
            doc = json.loads(data)
            files = _parse_entries(doc["files"], names.relative_path)
            model_files = _parse_entries(doc.get("model_files", []), names.model_file_name)
            composing = tuple(ModelRef(names.model_name(str(m["model"])),
                                       names.version_number(int(m["version"])))
                              for m in doc.get("composing", []))
            manifest = cls(
                model=names.model_name(str(doc["model"])),
                version=names.version_number(int(doc["version"])),
                files=files,
                config_sha256=str(doc["config"]["sha256"]),
                config=str(doc["config"]["text"]),
                created=str(doc["created"]),
                modelfn_version=str(doc["modelfn_version"]),
                digest=str(doc["digest"]),
                model_files=model_files,
                composing=composing,
            )
        except InvalidName as exc:
            raise CorruptObject(location, f"manifest lists an unsafe name: {exc}") from exc
        except (ValueError, KeyError, TypeError, InvalidInput) as exc:
            raise CorruptObject(location, f"not a valid modelfn manifest ({exc!r})") from exc
        if sha256_bytes(manifest.config.encode()) != manifest.config_sha256:
            raise CorruptObject(location, "the config text does not match its sha256")
        if compute_digest(files, manifest.config_sha256, model_files,
                          composing) != manifest.digest:
            raise CorruptObject(location, "the digest does not match the listed files")
        return manifest


def _entries(files: tuple[FileEntry, ...]) -> list[dict[str, Any]]:
    return [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in files]


def _parse_entries(items: Any, check: Callable[[str], str]) -> tuple[FileEntry, ...]:
    return tuple(FileEntry(check(str(f["path"])), int(f["size"]), str(f["sha256"]))
                 for f in items)


def compute_digest(files: Iterable[FileEntry], config_sha256: str,
                   model_files: Iterable[FileEntry] = (),
                   composing: Iterable[ModelRef] = ()) -> str:
    doc: dict[str, Any] = {"config": config_sha256,
                           "files": sorted([f.path, f.sha256] for f in files)}
    extra = sorted([f.path, f.sha256] for f in model_files)
    if extra:
        doc["model_files"] = extra
    runs = sorted([m.model, m.version] for m in composing)
    if runs:
        doc["composing"] = runs
    return sha256_bytes(json.dumps(doc, separators=(",", ":")).encode())


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


#: directories a version's files never come from: Python's bytecode caches (a Python model's
#: helper modules leave them beside ``model.py`` when it runs) are the interpreter's
SKIPPED_DIRS = frozenset({"__pycache__"})


def scan_dir(root: Path, *, empty_ok: bool = False) -> tuple[FileEntry, ...]:
    """Every regular file under ``root`` with its size and sha256, sorted by path; a
    directory without files is refused unless ``empty_ok`` (an ensemble's version)."""
    if not root.is_dir():
        raise InvalidInput(f"{root} is not a directory")
    entries: list[FileEntry] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_DIRS)
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
    if not entries and not empty_ok:
        raise InvalidInput(f"version directory {root} has no files")
    return tuple(entries)


def modelfn_version() -> str:
    try:
        return metadata.version("modelfn")
    except metadata.PackageNotFoundError:
        return "unknown"


#: a Python model's requirements, in its model directory (one beside ``model.py`` is one of
#: its version's files): the image build installs them
REQUIREMENTS = "requirements.txt"


def scan_model_files(model_dir: Path, config: bytes) -> tuple[FileEntry, ...]:
    """The files of ``model_dir`` that go with a version: those its config names (each
    output's ``label_filename``) and a Python model's ``requirements.txt``, with sizes and
    sha256; a named file that is not there is refused."""
    from modelfn.runtime.config_file import parse_config

    parsed = parse_config(_config_text(model_dir.name, config), str(model_dir / "config.pbtxt"))
    entries: dict[str, FileEntry] = {}
    requirements = model_dir / REQUIREMENTS
    if PYTHON in (parsed.backend, parsed.platform) and requirements.is_file():
        size, sha = sha256_file(requirements)
        entries[REQUIREMENTS] = FileEntry(REQUIREMENTS, size, sha)
    for output in parsed.outputs:
        name = output.label_filename
        if not name or name in entries:
            continue
        path = model_dir / names.model_file_name(name)
        if not path.is_file():
            raise MissingModelFile(path, f"output '{output.name}' label_filename")
        size, sha = sha256_file(path)
        entries[name] = FileEntry(name, size, sha)
    return tuple(sorted(entries.values(), key=lambda e: e.path))


#: a ``name`` field with its string value (group 1), as protobuf text format writes one
_NAME_FIELD = re.compile(r"""\bname\s*:?\s*("(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')""")


def config_named(model: str, config: bytes, path: str = "config.pbtxt") -> bytes:
    """``config`` as the store keeps it for ``model``: Triton needs a config's ``name`` to be
    its directory's, so a top-level ``name`` that says another is set to ``model``, the rest
    of the text (comments, layout) kept as it is. A config without a name stays without."""
    from modelfn.runtime.pbtxt import Field, Message, parse

    text = _config_text(model, config)
    tree = parse(text, path)
    named = [f for f in tree.fields if f.name == "name"]
    if len(named) != 1 or named[0].value == model:
        return config  # no name to change (a repeated one is the config parser's to refuse)
    wanted = Message([Field(f.name, model, f.line) if f is named[0] else f
                      for f in tree.fields], tree.line)
    literal = '"' + model.replace("\\", "\\\\").replace('"', '\\"') + '"'
    lines = text.split("\n")
    row = lines[named[0].line - 1]
    for match in _NAME_FIELD.finditer(row):  # the top-level one: the one whose change reads
        lines[named[0].line - 1] = row[:match.start(1)] + literal + row[match.end(1):]
        renamed = "\n".join(lines)
        if parse(renamed, path) == wanted:
            return renamed.encode()
    raise InvalidInput(f"{path}: cannot set the config's name to '{model}' as it is pushed; "
                       f'write name: "{model}" in it, or leave the name out')


def _config_text(model: str, config: bytes) -> str:
    try:
        return config.decode()
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"config.pbtxt of model '{model}' is not UTF-8 text") from exc


def build(model: str, version: int, files: tuple[FileEntry, ...], config: bytes,
          model_files: tuple[FileEntry, ...] = (), composing: tuple[ModelRef, ...] = ()
          ) -> Manifest:
    text = _config_text(model, config)
    config_sha = sha256_bytes(config)
    return Manifest(
        model=model,
        version=version,
        files=files,
        config_sha256=config_sha,
        config=text,
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        modelfn_version=modelfn_version(),
        digest=compute_digest(files, config_sha, model_files, composing),
        model_files=model_files,
        composing=composing,
    )


def load_dict(data: bytes) -> dict[str, Any]:
    """A small JSON document (claims, engine manifests); {} when unreadable."""
    try:
        doc = json.loads(data)
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}
