"""The model store: immutable, digest-checked versions in a Triton-readable layout.

Layout under the store's root (an S3 prefix or a directory)::

    <model>/config.pbtxt                  the one config Triton reads for the model
    <model>/<version>/<files>             the version's files, as pushed
    <model>/<version>/.model/<file>       files of the model directory its config names
                                          (label files), laid out beside config.pbtxt
    <model>/<version>/.claim.json         who claimed the version (written first)
    <model>/<version>/MANIFEST.json       written last: the version exists once this does
    <model>/<version>/engines/<slug>/...  TensorRT engine caches (see ``engines``)

``ModelStore`` is a template method: the public methods here resolve versions,
verify digests, cache, and turn "absent" into precise errors; a backend
(``s3.S3Store``, ``filesystem.FileSystemStore``) implements only the small
primitives at the bottom and translates its own exceptions.
What a push reads from a local model directory, and the ``PushResult`` it gives, are in
``push``.

Immutability and races. A push (1) hashes the local files and builds the
manifest, (2) refuses if the version is committed with another digest (an
identical one makes the push a no-op), (3) claims the version by creating
``.claim.json`` only if absent (S3 ``PutObject`` with ``If-None-Match: *``,
``os.link`` on a filesystem), (4) uploads the files, then (5) creates the
manifest, again only if absent. The loser of a race for a version fails at (3),
before it has written a byte under the version, so it cannot corrupt the
winner; it gets ``VersionClaimed`` (or ``VersionExists`` once the winner has
committed). A push carrying the same digest as the claim may take over the
claim: it writes the same bytes, so it cannot corrupt anything, and it lets a
push that died be rerun. Without ``--version`` a push takes the next free
version and moves on to the next one if it loses a race. On an S3-compatible
endpoint that ignores ``If-None-Match`` the claim is read back and the push
refused if another client overwrote it, which catches most but not all races;
``fetch`` verifies every sha256 against the manifest, so a version corrupted
that way is reported, never served. Endpoints that reject conditional writes
fail with ``ConditionalWritesUnsupported``.

Configs. Triton has one config.pbtxt per model, so a push whose config differs
from the model-level one is refused with ``ConfigConflict`` unless
``force_config`` replaces it. Each manifest records the sha256 and the text of
the config its version was pushed with, and ``fetch`` lays that config out next
to the version, so every version is reproduced exactly as pushed even after a
forced config change. The files of the model directory that a config names
(``label_filename``) belong to the version the same way: they are listed in its
manifest (``model_files``), kept under the version, and laid out beside its config.
"""

from __future__ import annotations

import abc
import dataclasses
import json
import os
import socket
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from modelfn.model_store import engines, names
from modelfn.model_store import manifest as mf
from modelfn.model_store.cache import Cache
from modelfn.model_store.composing import resolve as resolve_composing
from modelfn.model_store.errors import (
    ConfigConflict,
    CorruptObject,
    IncompleteVersion,
    NotInStore,
    VersionClaimed,
    VersionExists,
)
from modelfn.model_store.push import LocalVersion, PushResult, local_version
from modelfn.model_store.transfer import Progress, download_verified, upload
from modelfn.runtime.errors import InvalidInput, ModelfnError

if TYPE_CHECKING:
    from collections.abc import Callable

    from modelfn.model_store.engines import EngineKey

CLAIM_NAME = ".claim.json"
CONFIG_NAME = "config.pbtxt"
_AUTO_VERSION_ATTEMPTS = 20


@dataclass(frozen=True, slots=True)
class VersionInfo:
    model: str
    version: int
    complete: bool  # False: a version directory without a readable MANIFEST.json
    size: int = 0
    files: int = 0
    created: str = ""
    digest: str = ""
    corrupt: str = ""  # why the MANIFEST.json there cannot be read, when it cannot


class ModelStore(abc.ABC):
    def __init__(self, *, cache_dir: Path | str | None = None, workers: int = 8) -> None:
        self.cache = Cache(cache_dir)
        self.workers = workers

    # ---- what backends implement -------------------------------------------------------------

    @property
    @abc.abstractmethod
    def uri(self) -> str:
        """Where the store is, for messages; also identifies it in the local cache."""

    @property
    def identity(self) -> str:
        """What tells this store apart from another one with the same URI, for the cache."""
        return self.uri

    def drop_connections(self) -> None:
        """Close pooled connections; the next request opens new ones. A Lambda environment
        restored from a SnapStart snapshot calls it: sockets from the init phase are dead
        there (``handlers/snapstart.py``). Stores without connections have nothing to do."""
        return None

    @abc.abstractmethod
    def _list_dirs(self, prefix: str) -> list[str]:
        """Names of the immediate 'subdirectories' under ``prefix`` ('' or ending in '/')."""

    @abc.abstractmethod
    def _exists(self, key: str) -> bool: ...

    @abc.abstractmethod
    def _get_bytes(self, key: str) -> bytes | None:
        """The object's bytes, or None when it does not exist."""

    @abc.abstractmethod
    def _get_file(self, key: str, dest: Path, progress: Callable[[int], None]) -> None: ...

    @abc.abstractmethod
    def _put_file(self, key: str, src: Path, progress: Callable[[int], None]) -> None: ...

    @abc.abstractmethod
    def _put_bytes(self, key: str, data: bytes) -> None: ...

    @abc.abstractmethod
    def _put_if_absent(self, key: str, data: bytes) -> bool:
        """Create the object atomically unless it exists; False when it already did."""

    @abc.abstractmethod
    def _list_files(self, prefix: str) -> list[str]:
        """Keys of the objects directly under ``prefix`` (ending in '/'), not deeper."""

    @abc.abstractmethod
    def _delete(self, key: str) -> None:
        """Remove the object; nothing happens when it does not exist."""

    # ---- reading ------------------------------------------------------------------------------

    def list_models(self) -> list[str]:
        found = []
        for name in self._list_dirs(""):
            try:  # also skips what the store keeps beside the models (the routing tables)
                found.append(names.model_name(name))
            except InvalidInput:
                continue
        return sorted(found)

    def list_versions(self, name: str) -> list[VersionInfo]:
        name = names.model_name(name)
        versions = self._version_dirs(name)
        if not versions and not self._exists(f"{name}/{CONFIG_NAME}"):
            raise self._not_in_store(name)

        def info(version: int) -> VersionInfo:
            data = self._get_bytes(self._manifest_key(name, version))
            if data is None:
                return VersionInfo(name, version, complete=False)
            try:
                m = self._parse_manifest(name, version, data)
            except CorruptObject as exc:  # one bad version must not hide the others
                return VersionInfo(name, version, complete=False, corrupt=exc.message)
            files = len(m.files) + len(m.model_files)
            return VersionInfo(name, version, True, m.size, files, m.created, m.digest)

        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            return list(pool.map(info, versions))

    def resolve(self, name: str, version: int | str = "latest") -> int:
        """A version number: ``latest`` is the highest committed version."""
        name = names.model_name(name)
        if version != "latest":
            return names.version_number(version)
        versions = self._version_dirs(name)
        for candidate in reversed(versions):
            if self._exists(self._manifest_key(name, candidate)):
                return candidate
        if versions:
            raise IncompleteVersion(name, versions[-1])
        raise self._not_in_store(name)

    def manifest(self, name: str, version: int | str = "latest") -> mf.Manifest:
        name = names.model_name(name)
        number = self.resolve(name, version)
        data = self._get_bytes(self._manifest_key(name, number))
        if data is None:
            self._raise_missing(name, number)
        return self._parse_manifest(name, number, data)

    def fetch(
        self,
        name: str,
        version: int | str = "latest",
        *,
        progress: Progress | None = None,
    ) -> Path:
        """A local Triton repository holding this one version: ``<dir>/<name>/...``.

        A pinned version already in the cache costs no request at all; ``latest``
        costs a listing. Anything else is downloaded in parallel, every file's
        size and sha256 checked (a mismatch is retried once, then ``CorruptObject``),
        and installed in the cache atomically.
        """
        name = names.model_name(name)
        store_id = Cache.store_id(self.identity)
        number = self.resolve(name, version)
        hit = self.cache.lookup_ref(store_id, name, number)
        if hit is not None:
            return hit[0]
        manifest = self.manifest(name, number)
        path = self.cache.lookup(manifest)
        if path is None:
            with self.cache.staging(name) as staged:
                repo = staged / name
                repo.mkdir()
                (repo / CONFIG_NAME).write_bytes(manifest.config.encode())
                pairs = [(names.version_key(name, number, f.path),
                          mf.FileEntry(f"{number}/{f.path}", f.size, f.sha256))
                         for f in manifest.files]
                pairs += [(names.model_file_key(name, number, f.path), f)
                          for f in manifest.model_files]
                (repo / str(number)).mkdir()  # an ensemble's has no file to make it
                self._download(pairs, repo, progress)
                path = self.cache.install(staged, manifest)
        self.cache.write_ref(store_id, manifest)
        return path

    # ---- writing ------------------------------------------------------------------------------

    def push(
        self,
        model_dir: Path | str,
        *,
        version: int | None = None,
        name: str | None = None,
        force_config: bool = False,
        progress: Progress | None = None,
    ) -> PushResult:
        """Push a local model directory (``config.pbtxt`` + version directories).

        With ``version``, the local version directory of that number becomes that
        version in the store. Without, the highest local version directory N does: as
        version N when the store has no version at or above N (a folder copied to a new
        number keeps its number), else as the next free version. Content the store
        already holds as version N, or as its latest version, is not pushed again: the
        result says which version holds it (``created`` False). The config goes in
        naming the model as it is pushed (``name``): Triton reads a config only from the
        directory its name matches.
        """
        from modelfn.runtime.config_file import parse_config

        model_dir = Path(model_dir)
        name = names.model_name(name or model_dir.name)
        config_path = model_dir / CONFIG_NAME
        if not config_path.is_file():
            raise InvalidInput(f"{model_dir} has no {CONFIG_NAME}: modelfn init {model_dir} "
                               "completes one from the model")
        source = local_version(model_dir, version)
        config = mf.config_named(name, config_path.read_bytes(), str(config_path))
        parsed = parse_config(config.decode(errors="replace"), str(config_path))
        version_dir = model_dir / str(source)
        # an ensemble's version directory is empty, as Triton has it; its steps' models
        # are recorded at the versions they resolve to now (``composing``)
        composing = resolve_composing(self, name, parsed) if parsed.is_ensemble else ()
        local = LocalVersion(model_dir, version_dir,
                             mf.scan_dir(version_dir, empty_ok=parsed.is_ensemble),
                             mf.scan_model_files(model_dir, config), config, composing)
        self._check_config(name, config, force_config)
        if version is not None:
            result = self._push_version(name, source, local, force_config, progress)
        else:
            result = self._push_next(name, source, local, force_config, progress)
        return dataclasses.replace(result, store=self.uri.rstrip("/"),
                                   versions=tuple(self._version_dirs(name)),
                                   composing=composing)

    def put_engine_cache(self, name: str, version: int, key: EngineKey, files_dir: Path) -> bool:
        """Store a TensorRT engine cache for a committed version; False if one was there."""
        return engines.put(self, name, version, key, files_dir)

    def get_engine_cache(self, name: str, version: int, key: EngineKey, dest: Path) -> bool:
        """Download the engine cache for ``key`` into ``dest``; False when there is none."""
        return engines.get(self, name, version, key, dest)

    # ---- the template's own steps -------------------------------------------------------------

    def _push_version(
        self,
        name: str,
        version: int,
        local: LocalVersion,
        force_config: bool,
        progress: Progress | None,
        *,
        identical_ok: bool = True,
    ) -> PushResult:
        manifest = local.manifest(name, version)
        count = len(local.files) + len(local.model_files)
        result = PushResult(name, version, manifest.digest, count, manifest.size, True)
        existing = self._get_bytes(self._manifest_key(name, version))
        if existing is not None:
            return self._compare_committed(name, version, existing, result, identical_ok)
        self._claim(name, version, manifest.digest)
        self._upload(local.uploads(name, version), progress)
        config = local.config
        if force_config:
            self._put_bytes(f"{name}/{CONFIG_NAME}", config)
        elif not self._put_if_absent(f"{name}/{CONFIG_NAME}", config):
            self._check_config(name, config, force_config)
        if not self._put_if_absent(self._manifest_key(name, version), manifest.to_bytes()):
            existing = self._get_bytes(self._manifest_key(name, version)) or b""
            return self._compare_committed(name, version, existing, result, identical_ok)
        return result

    def _push_next(
        self, name: str, source: int, local: LocalVersion, force_config: bool,
        progress: Progress | None,
    ) -> PushResult:
        """``push`` without a version: see there."""
        existing = self._version_dirs(name)
        digest = local.manifest(name, source).digest
        same = self._committed(name, source) if source in existing else None
        if same is None or same.digest != digest:
            latest = self._latest_manifest(name, existing)
            same = latest if latest is not None and latest.version >= source else None
        if same is not None and same.digest == digest:
            count = len(same.files) + len(same.model_files)
            return PushResult(name, same.version, same.digest, count, same.size, False)
        target = max(source, (existing or [0])[-1] + 1)
        for attempt in range(_AUTO_VERSION_ATTEMPTS):
            try:
                return self._push_version(name, target + attempt, local, force_config, progress,
                                          identical_ok=False)
            except (VersionClaimed, VersionExists):
                continue
        raise VersionClaimed(name, target, self._claim_key(name, target), "every try lost a race")

    def _compare_committed(
        self, name: str, version: int, data: bytes, ours: PushResult, identical_ok: bool
    ) -> PushResult:
        theirs = self._parse_manifest(name, version, data)
        if theirs.digest == ours.digest and identical_ok:
            return PushResult(name, version, ours.digest, ours.files, ours.size, created=False)
        raise VersionExists(name, version, theirs.digest)

    def _claim(self, name: str, version: int, digest: str) -> None:
        key = self._claim_key(name, version)
        token = uuid.uuid4().hex
        claim = {
            "digest": digest,
            "token": token,
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
            "host": socket.gethostname(),
            "pid": os.getpid(),
        }
        if self._put_if_absent(key, json.dumps(claim).encode()):
            held = mf.load_dict(self._get_bytes(key) or b"")
            if held.get("token") == token:
                return
        else:
            held = mf.load_dict(self._get_bytes(key) or b"")
            if held.get("digest") == digest:
                return  # same content: taking over writes the very same bytes
        committed = self._get_bytes(self._manifest_key(name, version))
        if committed is not None:
            digest = self._parse_manifest(name, version, committed).digest
            raise VersionExists(name, version, digest)
        detail = f"digest {str(held.get('digest', '?'))[:12]}, claimed {held.get('created', '?')}"
        detail += f" by {held.get('host', '?')} pid {held.get('pid', '?')}"
        raise VersionClaimed(name, version, f"{self.uri.rstrip('/')}/{key}", detail)

    def _check_config(self, name: str, config: bytes, force_config: bool) -> None:
        current = self._get_bytes(f"{name}/{CONFIG_NAME}")
        if current is not None and current != config and not force_config:
            raise ConfigConflict(name, mf.sha256_bytes(config), mf.sha256_bytes(current))

    def _download(
        self, pairs: list[tuple[str, mf.FileEntry]], dest_root: Path, progress: Progress | None
    ) -> None:
        """Download files in parallel, each checked against its entry and retried once."""
        download_verified(self._get_file, pairs, dest_root, progress, self.workers,
                          self.uri.rstrip("/"))

    def _upload(self, pairs: list[tuple[str, Path, int]], progress: Progress | None) -> None:
        upload(self._put_file, pairs, progress, self.workers)

    def _latest_manifest(self, name: str, versions: list[int]) -> mf.Manifest | None:
        for candidate in reversed(versions):
            found = self._committed(name, candidate)
            if found is not None:
                return found
        return None

    def _committed(self, name: str, version: int) -> mf.Manifest | None:
        data = self._get_bytes(self._manifest_key(name, version))
        return None if data is None else self._parse_manifest(name, version, data)

    def _version_dirs(self, name: str) -> list[int]:
        found = (names.parse_version_dir(d) for d in self._list_dirs(f"{name}/"))
        return sorted(v for v in found if v is not None)

    def _raise_missing(self, name: str, version: int) -> NoReturn:
        versions = self._version_dirs(name)
        if version in versions:
            raise IncompleteVersion(name, version)
        if versions or self._exists(f"{name}/{CONFIG_NAME}"):
            raise self._not_in_store(name, version, versions)
        raise self._not_in_store(name)

    def _not_in_store(self, name: str, version: int | None = None,
                      versions: list[int] | None = None) -> NotInStore:
        """What a command says of a model or version the store does not hold: the versions
        it does hold (or, for a model it has none of, the models it has)."""
        if version is not None:
            return NotInStore(self.uri, name, version, versions or ())
        try:
            models = self.list_models()
        except ModelfnError:  # the message goes without them
            models = []
        return NotInStore(self.uri, name, models=models)

    def _parse_manifest(self, name: str, version: int, data: bytes) -> mf.Manifest:
        location = f"{self.uri.rstrip('/')}/{self._manifest_key(name, version)}"
        manifest = mf.Manifest.from_bytes(data, location)
        if (manifest.model, manifest.version) != (name, version):
            raise CorruptObject(location, f"it describes {manifest.model} {manifest.version}")
        return manifest

    @staticmethod
    def _manifest_key(name: str, version: int) -> str:
        return f"{name}/{version}/{mf.MANIFEST_NAME}"

    @staticmethod
    def _claim_key(name: str, version: int) -> str:
        return f"{name}/{version}/{CLAIM_NAME}"

