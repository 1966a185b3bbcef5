"""What only the S3 backend does: endpoints, retries, error translation, request counts."""

from __future__ import annotations

import os
import socket
import uuid
from typing import TYPE_CHECKING, Any

import pytest

from modelfn.model_store import S3Store, make_client, open_store
from modelfn.model_store.errors import AccessDenied, BucketNotFound, StoreUnreachable

if TYPE_CHECKING:
    from pathlib import Path

    from modelfn.localstack.s3 import S3Emulator


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def bucket(s3_emulator: S3Emulator) -> str:
    name = f"models-{uuid.uuid4().hex[:12]}"
    s3_emulator.create_bucket(name)
    return name


def test_latest_cache_hit_reads_no_object(
    s3_emulator: S3Emulator, bucket: str, make_model: Any, tmp_path: Path
) -> None:
    store = S3Store(bucket, "m", client=s3_emulator.client(), cache_dir=tmp_path / "cache")
    store.push(make_model({"model.onnx": b"weights"}))
    first = store.fetch("digits", "latest")
    s3_emulator.clear_requests()
    assert store.fetch("digits", "latest") == first
    ops = s3_emulator.operations()
    assert ops["GetObject"] == 0 and ops["ListObjects"] >= 1


def test_unreachable_endpoint_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    endpoint = f"http://127.0.0.1:{closed_port()}"
    client = make_client(endpoint, max_attempts=2, connect_timeout=1.0)
    store = S3Store("models", client=client, cache_dir=tmp_path)
    with pytest.raises(StoreUnreachable) as info:
        store.fetch("digits", 1)
    assert endpoint in info.value.message and info.value.status_code == 500
    assert info.value.__cause__ is not None


def test_missing_bucket(s3_emulator: S3Emulator, tmp_path: Path) -> None:
    store = S3Store("no-such-bucket-here", client=s3_emulator.client(), cache_dir=tmp_path)
    with pytest.raises(BucketNotFound, match="bucket 'no-such-bucket-here' does not exist at"):
        store.list_models()


def test_access_denied(s3_emulator: S3Emulator, bucket: str, tmp_path: Path) -> None:
    """Real IAM evaluation by the emulator: a user without any policy is denied."""
    access_key, secret = s3_emulator.user_credentials(f"nobody-{uuid.uuid4().hex[:6]}")
    client = s3_emulator.client(access_key=access_key, secret_key=secret)
    store = S3Store(bucket, "models", client=client, cache_dir=tmp_path)
    with s3_emulator.enforce_auth(), pytest.raises(AccessDenied) as info:
        store.fetch("digits", 1)
    assert info.value.status_code == 403
    assert f"s3://{bucket}/models/digits/1/MANIFEST.json" in info.value.message


def test_open_store_reads_the_endpoint_from_the_environment(
    s3_emulator: S3Emulator, bucket: str, make_model: Any, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                        ("AWS_DEFAULT_REGION", "us-east-1"),
                        ("MODELFN_S3_ENDPOINT", s3_emulator.endpoint_url)):
        monkeypatch.setenv(name, value)
    store = open_store(f"s3://{bucket}/team/models", cache_dir=tmp_path / "cache")
    assert isinstance(store, S3Store) and store.prefix == "team/models/"
    store.push(make_model({"model.onnx": b"w"}))
    assert s3_emulator.client().head_object(Bucket=bucket, Key="team/models/digits/1/MANIFEST.json")


@pytest.mark.skipif(
    os.environ.get("MODELFN_TEST_LOCALSTACK") != "1"
    or not os.environ.get("MODELFN_LOCALSTACK_ENDPOINT"),
    reason="the LocalStack run is opt-in: start localstack/docker-compose.yml, set "
    "MODELFN_TEST_LOCALSTACK=1 and MODELFN_LOCALSTACK_ENDPOINT=http://127.0.0.1:4566 "
    "(the whole store suite then also runs against it)",
)
def test_localstack_bucket_from_init_script(make_model: Any, tmp_path: Path) -> None:
    """The compose file's init script created the `models` bucket; push and pull through it."""
    endpoint = os.environ["MODELFN_LOCALSTACK_ENDPOINT"]
    store = open_store(f"s3://models/ci-{uuid.uuid4().hex[:8]}", endpoint_url=endpoint,
                       cache_dir=tmp_path)
    store.push(make_model({"model.onnx": b"w"}))
    assert (store.fetch("digits", 1) / "digits/1/model.onnx").read_bytes() == b"w"
