"""Fixtures for the model store suite: every test runs against each backend.

``store`` is parametrized over the local filesystem, the embedded S3 emulator
(moto on 127.0.0.1) and, when ``MODELFN_TEST_LOCALSTACK=1`` and
``MODELFN_LOCALSTACK_ENDPOINT`` are set, a real LocalStack.
"""

from __future__ import annotations

import os
import shutil
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

import boto3
import pytest
from botocore.config import Config

from modelfn.localstack.s3 import S3Emulator
from modelfn.model_store import FileSystemStore, ModelStore, S3Store

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from mypy_boto3_s3 import S3Client

CONFIG = b'name: "digits"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'


@dataclass
class Harness:
    """A store plus a way around it, to change objects behind the store's back."""

    kind: str
    store: ModelStore
    uri: str
    root: Path | None = None  # filesystem
    client: S3Client | None = None  # S3
    bucket: str = ""
    prefix: str = ""
    emulator: S3Emulator | None = None

    def put_raw(self, key: str, data: bytes) -> None:
        if self.client is not None:
            self.client.put_object(Bucket=self.bucket, Key=self.prefix + key, Body=data)
        else:
            assert self.root is not None
            path = self.root / key
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)

    def delete_raw(self, key: str) -> None:
        if self.client is not None:
            self.client.delete_object(Bucket=self.bucket, Key=self.prefix + key)
        else:
            assert self.root is not None
            (self.root / key).unlink()

    def get_raw(self, key: str) -> bytes:
        if self.client is not None:
            body = self.client.get_object(Bucket=self.bucket, Key=self.prefix + key)["Body"]
            return body.read()
        assert self.root is not None
        return (self.root / key).read_bytes()

    def open_again(self, cache_dir: Path) -> ModelStore:
        """Another client of the same store, with its own cache."""
        if self.client is not None:
            return S3Store(self.bucket, self.prefix, client=self.client, cache_dir=cache_dir)
        assert self.root is not None
        return FileSystemStore(self.root, cache_dir=cache_dir)

    def make_unreadable(self) -> None:
        """Take the store away; only possible for the filesystem (see the S3 request log)."""
        assert self.root is not None
        shutil.rmtree(self.root)


@pytest.fixture(scope="session")
def s3_emulator() -> Iterator[S3Emulator]:
    with S3Emulator() as emulator:
        yield emulator


LOCALSTACK_ENDPOINT = os.environ.get("MODELFN_LOCALSTACK_ENDPOINT", "")
LOCALSTACK = os.environ.get("MODELFN_TEST_LOCALSTACK") == "1" and bool(LOCALSTACK_ENDPOINT)


def _localstack_client() -> S3Client:
    endpoint = LOCALSTACK_ENDPOINT
    return boto3.client(
        "s3", endpoint_url=endpoint, region_name="us-east-1",
        aws_access_key_id="test", aws_secret_access_key="test",
        config=Config(retries={"max_attempts": 2, "mode": "standard"},
                      s3={"addressing_style": "path"}),
    )


@pytest.fixture(params=["filesystem", "s3", *(["localstack"] if LOCALSTACK else [])])
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Harness:
    cache = tmp_path / "cache"
    if request.param == "filesystem":
        root = tmp_path / "store"
        return Harness("filesystem", FileSystemStore(root, cache_dir=cache), str(root), root=root)
    bucket = f"models-{uuid.uuid4().hex[:12]}"
    emulator = None
    if request.param == "s3":
        emulator = request.getfixturevalue("s3_emulator")
        client = emulator.client()
    else:
        client = _localstack_client()
    client.create_bucket(Bucket=bucket)
    store = S3Store(bucket, "repo", client=client, cache_dir=cache)
    return Harness(request.param, store, f"s3://{bucket}/repo", client=client, bucket=bucket,
                   prefix="repo/", emulator=emulator)


@pytest.fixture
def store(harness: Harness) -> ModelStore:
    return harness.store


class ModelFactory:
    """Builds local Triton model directories, each in its own folder."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.made = 0

    def __call__(
        self,
        files: dict[str, bytes],
        *,
        name: str = "digits",
        version: int = 1,
        config: bytes = CONFIG,
    ) -> Path:
        self.made += 1
        model = self.root / f"src{self.made}" / name
        for rel, data in files.items():
            path = model / str(version) / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        (model / "config.pbtxt").write_bytes(config)
        return model


@pytest.fixture
def make_model(tmp_path: Path) -> ModelFactory:
    return ModelFactory(tmp_path / "local")
