"""The local side of a push: a model directory's version folders, what a push of one
sends, and what the push reports (``ModelStore.push`` does the sending)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from modelfn.model_store import manifest as mf
from modelfn.model_store import names
from modelfn.model_store.errors import NoLocalVersion

if TYPE_CHECKING:
    from pathlib import Path


@dataclass(frozen=True, slots=True)
class LocalVersion:
    """What a push sends: a local version directory and the model files its config names."""

    model_dir: Path
    version_dir: Path
    files: tuple[mf.FileEntry, ...]
    model_files: tuple[mf.FileEntry, ...]
    config: bytes
    #: an ensemble's composing models at the versions the push resolved (``composing``)
    composing: tuple[mf.ModelRef, ...] = ()

    def manifest(self, name: str, version: int) -> mf.Manifest:
        return mf.build(name, version, self.files, self.config, self.model_files,
                        self.composing)

    def uploads(self, name: str, version: int) -> list[tuple[str, Path, int]]:
        pairs = [(names.version_key(name, version, f.path), self.version_dir / f.path, f.size)
                 for f in self.files]
        return pairs + [
            (names.model_file_key(name, version, f.path), self.model_dir / f.path, f.size)
            for f in self.model_files
        ]


@dataclass(frozen=True, slots=True)
class PushResult:
    model: str
    version: int
    digest: str
    files: int
    size: int
    created: bool  # False: the identical version was already there
    store: str = ""  # where, for the message
    versions: tuple[int, ...] = ()  # the model's versions in the store after the push
    #: an ensemble's composing models, as its manifest records them
    composing: tuple[mf.ModelRef, ...] = ()

    @property
    def message(self) -> str:
        there = ", ".join(map(str, self.versions)) or str(self.version)
        runs = f"; it runs {', '.join(map(str, self.composing))}" if self.composing else ""
        if self.created:
            later = (" (a step's model_version -1 is the latest there at the push: push the "
                     "ensemble again to run versions pushed later)") if runs else ""
            return (f"pushed {self.model} version {self.version} (digest {self.digest[:12]}) to "
                    f"{self.store}; versions there now: {there}{runs}{later}")
        following = max(self.versions, default=self.version) + 1
        return (f"{self.model} version {self.version} is already in {self.store} with "
                f"identical content (digest {self.digest[:12]}): nothing to push; versions "
                f"there: {there}, the next free is {following} (copy the version folder to "
                f"{following}/ and change it to push a new version){runs}")


def local_versions(model_dir: Path) -> list[int]:
    """The version folders of a local model directory (``1/``, ``2/``...), in order."""
    found = (names.parse_version_dir(p.name) for p in model_dir.iterdir() if p.is_dir())
    return sorted(v for v in found if v is not None)


def local_version(model_dir: Path, version: int | None = None) -> int:
    """The local version folder a push sends: ``version``, or the highest one there is."""
    numbers = local_versions(model_dir)
    if version is None and numbers:
        return numbers[-1]
    if version is not None and names.version_number(version) in numbers:
        return names.version_number(version)
    raise NoLocalVersion(model_dir, version, numbers)
