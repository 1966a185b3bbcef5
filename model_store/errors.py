"""Errors of the model store, on top of modelfn's one hierarchy (``runtime.errors``).

Each class takes domain arguments and builds its message; the status code is
what the V2 app would answer and what the CLI maps to an exit code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from modelfn.runtime.errors import (
    InvalidInput,
    ModelfnError,
    ModelNotFound,
    StoreError,
)

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path


def _numbers(versions: Sequence[int]) -> str:
    return ", ".join(map(str, versions))


class InvalidName(InvalidInput):
    """A model name or a file path that could escape its directory or is not portable."""

    def __init__(self, what: str, value: str, reason: str) -> None:
        super().__init__(f"invalid {what} {value!r}: {reason}")
        self.value = value


class MissingModelFile(InvalidInput):
    """The config names a file of the model directory (a label file) that is not there."""

    def __init__(self, path: Path, named_by: str) -> None:
        super().__init__(f"{path} does not exist, but config.pbtxt names it ({named_by}); "
                         "put it in the model directory beside config.pbtxt")
        self.path = path


class PullConflict(ModelfnError):
    """A pull would replace a local file that differs from the one in the store."""

    status_code = 409

    def __init__(self, path: Path, source: str) -> None:
        super().__init__(f"{path} already exists and differs from the one in {source}; "
                         "move it away or pull into another directory")
        self.path = path


class CheckoutConflict(ModelfnError):
    """A checkout would replace part of a local repository (a file or directory that is
    not one of the checkout's own links)."""

    status_code = 409

    def __init__(self, path: Path) -> None:
        super().__init__(f"{path} belongs to a local repository, not to a checkout: a model "
                         "store's versions are checked out into an empty directory of their "
                         "own, never over a repository's files")
        self.path = path


class BadStoreURI(InvalidInput):
    def __init__(self, uri: str, reason: str) -> None:
        super().__init__(f"bad model store URI {uri!r}: {reason}")
        self.uri = uri


class VersionExists(ModelfnError):
    """Versions are immutable: the version is already committed with other content."""

    status_code = 409

    def __init__(self, name: str, version: int, digest: str) -> None:
        super().__init__(
            f"version {version} of model '{name}' already exists with different content "
            f"(digest {digest[:12]}); versions are immutable, push a new version instead"
        )
        self.name = name
        self.version = version


class VersionClaimed(ModelfnError):
    """Another push holds the version: it is uploading, or it died before committing."""

    status_code = 409

    def __init__(self, name: str, version: int, claim_key: str, detail: str) -> None:
        super().__init__(
            f"version {version} of model '{name}' is being pushed by another client "
            f"({detail}); if that push died, delete {claim_key} or push another version"
        )
        self.name = name
        self.version = version


class ConfigConflict(ModelfnError):
    """Triton reads one config.pbtxt per model, so every version must agree on it."""

    status_code = 409

    def __init__(self, name: str, ours: str, theirs: str) -> None:
        super().__init__(
            f"config.pbtxt of model '{name}' differs from the one in the store "
            f"(sha256 {ours[:12]} here, {theirs[:12]} in the store); Triton has one config "
            "per model, so all versions must share it: pass --force-config to replace it"
        )
        self.name = name


class NotInStore(ModelNotFound):
    """The store holds no such model, or not that version of it: the message names the
    store, what it does hold (the model's versions, or the other models), and how to push."""

    #: the most model names a message lists
    MODELS_SHOWN = 10

    def __init__(self, store: str, name: str, version: int | str | None = None,
                 versions: Sequence[int] = (), *, models: Sequence[str] = ()) -> None:
        store = store.rstrip("/")
        if version is None:
            others = [m for m in models if m != name]
            shown = ", ".join(others[:self.MODELS_SHOWN]) + (
                ", ..." if len(others) > self.MODELS_SHOWN else "")
            there = f"models there: {shown}" if others else "it has no models"
            message = (f"model '{name}' has no version in the model store {store} ({there}): "
                       "push one first")
        else:
            there = f"versions there: {_numbers(versions)}" if versions else "it has none"
            message = (f"version {version} of model '{name}' is not in the model store {store} "
                       f"({there}): push it first")
        ModelfnError.__init__(self, f"{message}, modelfn push DIR --store {store}")
        self.name = name
        self.version = version
        self.versions = tuple(versions)


class NoLocalVersion(InvalidInput):
    """A push finds no local version folder: none at all, or not the one it was asked for."""

    def __init__(self, model_dir: Path, version: int | None, local: Sequence[int]) -> None:
        if version is not None and local:
            last = model_dir / str(max(local))
            message = (f"{model_dir} has no folder {version}/ (its versions: {_numbers(local)}): "
                       f"to make version {version}, copy one and change it, "
                       f"cp -r {last} {model_dir / str(version)}")
        else:
            what = "no version folder (1/, 2/, ...)" if version is None else \
                f"no folder {version}/, nor any other version folder"
            message = (f"{model_dir} has {what}: put the model in {model_dir / '1'}/ (as "
                       "model.onnx), or let modelfn init MODEL.onnx --name NAME make the folder")
        super().__init__(message)
        self.version = version


class IncompleteVersion(ModelNotFound):
    """A version directory exists but its MANIFEST.json does not: it was never committed."""

    def __init__(self, name: str, version: int) -> None:
        ModelfnError.__init__(
            self,
            f"version {version} of model '{name}' has no MANIFEST.json: "
            "incomplete push or not a modelfn store",
        )
        self.name = name
        self.version = version


class StoreUnreachable(StoreError):
    def __init__(self, endpoint: str, reason: str) -> None:
        super().__init__(f"model store at {endpoint} is unreachable: {reason}")
        self.endpoint = endpoint


class AccessDenied(StoreError):
    status_code = 403

    def __init__(self, location: str, reason: str = "") -> None:
        tail = f": {reason}" if reason else ""
        super().__init__(f"access denied to {location}{tail}")
        self.location = location


class BucketNotFound(StoreError):
    def __init__(self, bucket: str, endpoint: str) -> None:
        super().__init__(
            f"bucket '{bucket}' does not exist at {endpoint}; create it or fix the store URI"
        )
        self.bucket = bucket


class ConditionalWritesUnsupported(StoreError):
    def __init__(self, endpoint: str) -> None:
        super().__init__(
            f"the S3 endpoint {endpoint} does not support conditional writes "
            "(PutObject with If-None-Match: *), which immutable versions need"
        )


class CorruptObject(StoreError):
    """An object's bytes do not match the manifest (after one retry), or a manifest is bad."""

    def __init__(self, location: str, reason: str) -> None:
        super().__init__(f"corrupt object {location}: {reason}")
        self.location = location


class TransferCorrupted(StoreError):
    """The transport's own checksum caught bytes that changed in transit; worth a retry."""

    def __init__(self, location: str, reason: str) -> None:
        super().__init__(f"{location} arrived corrupted: {reason}")
        self.location = location
        self.reason = reason


class StoreNotFound(StoreError):
    status_code = 404

    def __init__(self, root: object) -> None:
        super().__init__(f"no model store at {root}: push a model there first "
                         "(modelfn push MODEL_DIR --store ...) or check the path")


class MissingComposingModels(ModelNotFound):
    """An ensemble's push names models, or versions, that the store does not hold."""

    def __init__(self, store: str, name: str, missing: Sequence[str]) -> None:
        store = store.rstrip("/")
        ModelfnError.__init__(self, f"ensemble '{name}' runs models the model store {store} "
                                    f"does not hold: {', '.join(missing)}; push them first, "
                                    f"modelfn push DIR --store {store}")
        self.name = name
        self.version = None
        self.missing = tuple(missing)
