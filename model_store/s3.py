"""The S3 backend: any S3-compatible endpoint through an injected boto3 client.

Every botocore exception is translated here, at the boundary, into the store's
errors: connection failures (after botocore's own retries with backoff, see
``make_client``) into ``StoreUnreachable`` naming the endpoint, 403 into
``AccessDenied``, ``NoSuchBucket`` into ``BucketNotFound``. "Create only if
absent" is ``PutObject`` with ``If-None-Match: *`` (S3 answers 412, or 409 when
another conditional write to the key is in flight).
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING

import boto3
from boto3.exceptions import S3UploadFailedError
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    FlexibleChecksumError,
    NoCredentialsError,
    ReadTimeoutError,
)

from modelfn.model_store.base import ModelStore
from modelfn.model_store.errors import (
    AccessDenied,
    BucketNotFound,
    ConditionalWritesUnsupported,
    CorruptObject,
    StoreUnreachable,
    TransferCorrupted,
)
from modelfn.runtime.errors import InvalidInput, StoreError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from mypy_boto3_s3 import S3Client

_UNREACHABLE = (EndpointConnectionError, ConnectTimeoutError, ReadTimeoutError,
                ConnectionClosedError)
_DENIED = frozenset({"AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch",
                     "AllAccessDisabled", "InvalidToken", "ExpiredToken"})
_MISSING = frozenset({"NoSuchKey", "404", "NotFound"})
_EXISTS = frozenset({"PreconditionFailed", "412", "ConditionalRequestConflict"})
_TRANSFER = TransferConfig(max_concurrency=4)


def endpoint_from_env() -> str | None:
    """``MODELFN_S3_ENDPOINT``, then ``AWS_ENDPOINT_URL``; None means AWS itself."""
    return os.environ.get("MODELFN_S3_ENDPOINT") or os.environ.get("AWS_ENDPOINT_URL") or None


#: A cold start waits on the store, so its timeouts must fit one: an endpoint that accepts
#: connections and never answers fails after attempts x (connect or read timeout) plus
#: backoff, about 30 s with these defaults (botocore's own, 60 s x 5, took minutes:
#: bench/RESULTS.md).
#: The read timeout bounds the wait for each chunk, not a whole download, so a slow store
#: that keeps sending still succeeds. MODELFN_S3_* variables override them.
TIMEOUTS = {
    "MODELFN_S3_CONNECT_TIMEOUT": 3.0,
    "MODELFN_S3_READ_TIMEOUT": 8.0,
    "MODELFN_S3_MAX_ATTEMPTS": 3,
}


def _setting(name: str, given: float | None) -> float:
    if given is not None:
        return given
    raw = os.environ.get(name, "").strip()
    if not raw:
        return TIMEOUTS[name]
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value <= 0 or (name == "MODELFN_S3_MAX_ATTEMPTS" and not value.is_integer()):
        kind = "a whole number" if name == "MODELFN_S3_MAX_ATTEMPTS" else "a number of seconds"
        raise InvalidInput(f"{name} must be {kind} above 0, not '{raw}'")
    return value


def make_client(
    endpoint_url: str | None = None,
    *,
    max_attempts: int | None = None,
    connect_timeout: float | None = None,
    read_timeout: float | None = None,
) -> S3Client:
    """A boto3 S3 client with retries and backoff ("standard" mode) and timeouts that fit a
    cold start (``TIMEOUTS``)."""
    endpoint = endpoint_url or endpoint_from_env()
    config = Config(
        retries={"total_max_attempts": int(_setting("MODELFN_S3_MAX_ATTEMPTS", max_attempts)),
                 "mode": "standard"},
        connect_timeout=_setting("MODELFN_S3_CONNECT_TIMEOUT", connect_timeout),
        read_timeout=_setting("MODELFN_S3_READ_TIMEOUT", read_timeout),
        s3={"addressing_style": "path"} if endpoint else {},
    )
    return boto3.client("s3", endpoint_url=endpoint, config=config)


class S3Store(ModelStore):
    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        client: S3Client,
        cache_dir: Path | str | None = None,
        workers: int = 8,
    ) -> None:
        super().__init__(cache_dir=cache_dir, workers=workers)
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.client = client

    @property
    def endpoint(self) -> str:
        return str(self.client.meta.endpoint_url)

    def drop_connections(self) -> None:
        # botocore closes its connection pools; the client stays usable and reconnects
        self.client.close()

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    @property
    def identity(self) -> str:
        return f"{self.endpoint} {self.uri}"

    def _list_dirs(self, prefix: str) -> list[str]:
        full = self.prefix + prefix
        found: list[str] = []
        with self._translate(prefix):
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=full, Delimiter="/"
            )
            for page in pages:
                for common in page.get("CommonPrefixes", []):
                    found.append(common.get("Prefix", "")[len(full):].rstrip("/"))
        return sorted(name for name in found if name)

    def _exists(self, key: str) -> bool:
        with self._translate(key, missing_ok=True):
            self.client.head_object(Bucket=self.bucket, Key=self.prefix + key)
            return True
        return False

    def _get_bytes(self, key: str) -> bytes | None:
        with self._translate(key, missing_ok=True):
            return self.client.get_object(Bucket=self.bucket, Key=self.prefix + key)["Body"].read()
        return None

    def _get_file(self, key: str, dest: Path, progress: Callable[[int], None]) -> None:
        missing = True
        with self._translate(key, missing_ok=True):
            self.client.download_file(
                self.bucket, self.prefix + key, str(dest), Callback=progress, Config=_TRANSFER
            )
            missing = False
        if missing:
            raise CorruptObject(self._location(key), "listed in the manifest but missing")

    def _put_file(self, key: str, src: Path, progress: Callable[[int], None]) -> None:
        with self._translate(key):
            self.client.upload_file(
                str(src), self.bucket, self.prefix + key, Callback=progress, Config=_TRANSFER
            )

    def _put_bytes(self, key: str, data: bytes) -> None:
        with self._translate(key):
            self.client.put_object(Bucket=self.bucket, Key=self.prefix + key, Body=data)

    def _put_if_absent(self, key: str, data: bytes) -> bool:
        try:
            with self._translate(key):
                self.client.put_object(
                    Bucket=self.bucket, Key=self.prefix + key, Body=data, IfNoneMatch="*"
                )
        except StoreError as exc:
            code = _code(exc.__cause__)
            if code in _EXISTS:
                return False
            if code in ("NotImplemented", "501"):
                raise ConditionalWritesUnsupported(self.endpoint) from exc.__cause__
            raise
        return True

    def _list_files(self, prefix: str) -> list[str]:
        full = self.prefix + prefix
        found: list[str] = []
        with self._translate(prefix):
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=full, Delimiter="/"
            )
            for page in pages:
                found.extend(item["Key"][len(self.prefix):] for item in page.get("Contents", []))
        return sorted(found)

    def _delete(self, key: str) -> None:
        with self._translate(key, missing_ok=True):
            self.client.delete_object(Bucket=self.bucket, Key=self.prefix + key)

    def _location(self, key: str) -> str:
        return f"s3://{self.bucket}/{self.prefix}{key}"

    @contextlib.contextmanager
    def _translate(self, key: str, *, missing_ok: bool = False) -> Iterator[None]:
        """botocore exceptions -> store errors; with ``missing_ok`` a 404 key is swallowed."""
        try:
            yield
        except S3UploadFailedError as exc:
            cause = exc.__context__
            if isinstance(cause, ClientError):
                raise self._client_error(key, cause) from cause
            raise StoreError(f"upload to {self._location(key)} failed: {exc}") from exc
        except ClientError as exc:
            if missing_ok and _code(exc) in _MISSING:
                return
            raise self._client_error(key, exc) from exc
        except _UNREACHABLE as exc:
            raise StoreUnreachable(self.endpoint, str(exc)) from exc
        except FlexibleChecksumError as exc:  # the bytes changed in transit: retried like sha256
            raise TransferCorrupted(self._location(key), str(exc)) from exc
        except NoCredentialsError as exc:
            raise AccessDenied(
                self._location(key), "no AWS credentials found (environment, profile or role)"
            ) from exc
        except BotoCoreError as exc:
            raise StoreError(f"S3 request for {self._location(key)} failed: {exc}") from exc

    def _client_error(self, key: str, exc: ClientError) -> StoreError:
        code = _code(exc)
        message = exc.response.get("Error", {}).get("Message", "") or str(exc)
        if code == "NoSuchBucket":
            return BucketNotFound(self.bucket, self.endpoint)
        if code in _DENIED:
            return AccessDenied(self._location(key), f"{code}: {message}")
        error = StoreError(f"S3 request for {self._location(key)} failed: {code}: {message}")
        error.__cause__ = exc
        return error


def _code(exc: BaseException | None) -> str:
    if not isinstance(exc, ClientError):
        return ""
    error = exc.response.get("Error", {})
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    return str(error.get("Code") or status)
