"""A cache entry is served only while it is what was verified: a changed byte is caught
and the file fetched again; an unreachable store then fails instead of serving it."""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from typing import TYPE_CHECKING, Any

import pytest
from faulty_http import FaultyProxy

from modelfn.model_store import S3Store, make_client
from modelfn.model_store.cache import FINGERPRINT_NAME, Cache
from modelfn.model_store.errors import StoreUnreachable
from modelfn.model_store.manifest import MANIFEST_NAME
from modelfn.runtime.errors import InvalidInput

if TYPE_CHECKING:
    from pathlib import Path

    from modelfn.localstack.s3 import S3Emulator

WEIGHTS = bytes(range(256)) * 64


@pytest.fixture
def store(s3_emulator: S3Emulator, make_model: Any, tmp_path: Path) -> S3Store:
    bucket = f"models-{uuid.uuid4().hex[:12]}"
    s3_emulator.create_bucket(bucket)
    store = S3Store(bucket, "m", client=s3_emulator.client(), cache_dir=tmp_path / "cache")
    store.push(make_model({"model.onnx": WEIGHTS, "extra/vocab.txt": b"a b c"}))
    return store


def flip(path: Path, keep_times: bool) -> None:
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[100] ^= 0x01
    path.write_bytes(bytes(data))
    if keep_times:  # size unchanged, mtime put back: only the ctime tells
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.mark.parametrize("keep_times", [False, True])
def test_a_flipped_byte_is_fetched_again(store: S3Store, s3_emulator: S3Emulator,
                                         keep_times: bool, caplog: pytest.LogCaptureFixture
                                         ) -> None:
    path = store.fetch("digits", 1)
    weights = path / "digits" / "1" / "model.onnx"
    assert (path / FINGERPRINT_NAME).is_file()
    flip(weights, keep_times)
    s3_emulator.clear_requests()
    with caplog.at_level(logging.WARNING, "modelfn.store"):
        again = store.fetch("digits", 1)
    assert (again / "digits" / "1" / "model.onnx").read_bytes() == WEIGHTS
    assert s3_emulator.count("GetObject", key_suffix="model.onnx") == 1
    assert "(digits/1/model.onnx no longer matches its sha256): discarded, fetching it again" \
        in caplog.text


def test_an_intact_hit_reads_nothing_and_rehashes_nothing(store: S3Store,
                                                          s3_emulator: S3Emulator) -> None:
    store.fetch("digits", 1)
    s3_emulator.clear_requests()
    store.fetch("digits", 1)
    assert sum(s3_emulator.operations().values()) == 0


def test_a_deleted_file_is_fetched_again(store: S3Store) -> None:
    path = store.fetch("digits", 1)
    (path / "digits" / "1" / "extra" / "vocab.txt").unlink()
    again = store.fetch("digits", 1)
    assert (again / "digits" / "1" / "extra" / "vocab.txt").read_bytes() == b"a b c"


def test_a_tampered_config_is_caught_too(store: S3Store) -> None:
    path = store.fetch("digits", 1)
    config = path / "digits" / "config.pbtxt"
    original = config.read_bytes()
    config.write_bytes(original.replace(b"8", b"9"))
    again = store.fetch("digits", 1)
    assert (again / "digits" / "config.pbtxt").read_bytes() == original


def test_tampered_and_store_unreachable_fails_rather_than_serve_it(
    store: S3Store, s3_emulator: S3Emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                        ("AWS_DEFAULT_REGION", "us-east-1"), ("MODELFN_S3_MAX_ATTEMPTS", "1")):
        monkeypatch.setenv(name, value)
    with FaultyProxy(s3_emulator.endpoint_url) as proxy:
        through = S3Store(store.bucket, "m", client=make_client(proxy.url),
                          cache_dir=tmp_path / "proxied")
        path = through.fetch("digits", 1)
    flip(path / "digits" / "1" / "model.onnx", keep_times=False)
    with pytest.raises(StoreUnreachable, match=proxy.url):  # the proxy is gone now
        through.fetch("digits", 1)


def test_full_verification_and_a_bad_mode(store: S3Store, monkeypatch: pytest.MonkeyPatch
                                          ) -> None:
    store.fetch("digits", 1)
    monkeypatch.setenv("MODELFN_CACHE_VERIFY", "full")
    assert store.fetch("digits", 1).is_dir()
    monkeypatch.setenv("MODELFN_CACHE_VERIFY", "sometimes")
    with pytest.raises(InvalidInput, match="MODELFN_CACHE_VERIFY must be one of stat, full"):
        store.fetch("digits", 1)


@pytest.mark.parametrize("damage", ["truncated", "another version", "deleted"])
@pytest.mark.parametrize("ref", ["kept", "lost"])
def test_a_damaged_cached_manifest_is_discarded_and_fetched_again(
        store: S3Store, s3_emulator: S3Emulator, damage: str, ref: str,
        caplog: pytest.LogCaptureFixture) -> None:
    """With its ref the pinned lookup finds the entry; without, the lookup by the store's
    manifest does: either way a local MANIFEST.json that cannot be trusted discards it."""
    path = store.fetch("digits", 1)
    manifest = path / MANIFEST_NAME
    if damage == "truncated":
        manifest.write_bytes(manifest.read_bytes()[:10])
    elif damage == "another version":
        manifest.write_bytes(manifest.read_bytes().replace(b'"version": 1', b'"version": 2'))
    else:
        manifest.unlink()
    if ref == "lost":
        shutil.rmtree(store.cache.root / "digits" / "refs")
    s3_emulator.clear_requests()
    with caplog.at_level(logging.WARNING, "modelfn.store"):
        for version in (1, "latest"):
            again = store.fetch("digits", version)
            assert again == path
            assert (again / "digits" / "1" / "model.onnx").read_bytes() == WEIGHTS
            assert store.cache.lookup_ref(Cache.store_id(store.identity), "digits", 1)
    assert s3_emulator.count("GetObject", key_suffix="model.onnx") == 1
    assert "discarded, fetching it again" in caplog.text
