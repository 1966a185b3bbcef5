"""The versioned, immutable, digest-checked model store.

``open_store(uri)`` picks the backend from the URI's scheme: ``s3://bucket/prefix``
(endpoint from ``endpoint_url``, ``MODELFN_S3_ENDPOINT`` or ``AWS_ENDPOINT_URL``),
``file:///abs/path`` or a plain path. See ``base`` for the layout and guarantees.

The S3 backend (and boto3 with it) is imported only when an ``s3://`` store is opened or
``S3Store`` / ``make_client`` are asked for: a function reading a baked or ``file://``
repository never pays for boto3's import, and its image need not install it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from modelfn.model_store.base import ModelStore, VersionInfo
from modelfn.model_store.engines import EngineKey
from modelfn.model_store.errors import BadStoreURI
from modelfn.model_store.filesystem import FileSystemStore
from modelfn.model_store.manifest import FileEntry, Manifest
from modelfn.model_store.push import PushResult

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

    from modelfn.model_store.s3 import S3Store, make_client

__all__ = [
    "EngineKey",
    "FileEntry",
    "FileSystemStore",
    "Manifest",
    "ModelStore",
    "PushResult",
    "S3Store",
    "VersionInfo",
    "make_client",
    "open_store",
]


def __getattr__(name: str) -> object:
    if name in ("S3Store", "make_client"):
        from modelfn.model_store import s3

        return getattr(s3, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _open_s3(
    uri: str, s3_client: S3Client | None, endpoint_url: str | None, cache_dir: Path | str | None
) -> ModelStore:
    parts = urlsplit(uri)
    if not parts.netloc:
        raise BadStoreURI(uri, "expected s3://bucket/prefix")
    if parts.query or parts.fragment:
        raise BadStoreURI(uri, "query strings and fragments are not supported")
    from modelfn.model_store.s3 import S3Store, make_client

    client = s3_client or make_client(endpoint_url)
    return S3Store(parts.netloc, unquote(parts.path), client=client, cache_dir=cache_dir)


def _open_file(
    uri: str, s3_client: S3Client | None, endpoint_url: str | None, cache_dir: Path | str | None
) -> ModelStore:
    parts = urlsplit(uri)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise BadStoreURI(uri, "file URIs must be local: file:///absolute/path")
        return FileSystemStore(Path(unquote(parts.path)), cache_dir=cache_dir)
    return FileSystemStore(Path(uri).expanduser(), cache_dir=cache_dir)


_Opener = Callable[[str, "S3Client | None", "str | None", "Path | str | None"], ModelStore]

#: URI scheme -> backend opener; "" is a plain local path
BACKENDS: dict[str, _Opener] = {
    "s3": _open_s3,
    "file": _open_file,
    "": _open_file,
}


def open_store(
    uri: str,
    *,
    s3_client: S3Client | None = None,
    endpoint_url: str | None = None,
    cache_dir: Path | str | None = None,
) -> ModelStore:
    """The store at ``uri``: ``s3://bucket/prefix``, ``file:///abs/path`` or a plain path."""
    if not uri:
        raise BadStoreURI(uri, "empty; pass --store or set MODELFN_STORE")
    scheme = urlsplit(uri).scheme if "://" in uri else ""
    try:
        opener = BACKENDS[scheme]
    except KeyError:
        raise BadStoreURI(
            uri, f"unknown scheme '{scheme}://'; expected one of s3://, file:// or a path"
        ) from None
    return opener(uri, s3_client, endpoint_url, cache_dir)
