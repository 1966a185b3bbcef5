"""A store that hangs, crawls or corrupts in transit, through real loopback servers in front
of the S3 emulator: a clear, bounded failure, a slow success, and a retried corruption."""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any

import pytest
from faulty_http import FaultyProxy, SilentEndpoint

from modelfn.model_store import S3Store, make_client
from modelfn.model_store.errors import CorruptObject, StoreUnreachable
from modelfn.model_store.s3 import TIMEOUTS
from modelfn.runtime.errors import InvalidInput

if TYPE_CHECKING:
    from pathlib import Path

    from modelfn.localstack.s3 import S3Emulator

WEIGHTS = b"weights " * 4096


@pytest.fixture
def credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                        ("AWS_DEFAULT_REGION", "us-east-1")):
        monkeypatch.setenv(name, value)


@pytest.fixture
def pushed(s3_emulator: S3Emulator, make_model: Any, tmp_path: Path) -> str:
    bucket = f"models-{uuid.uuid4().hex[:12]}"
    s3_emulator.create_bucket(bucket)
    S3Store(bucket, "m", client=s3_emulator.client(), cache_dir=tmp_path / "pusher").push(
        make_model({"model.onnx": WEIGHTS}))
    return bucket


def test_the_defaults_fit_a_cold_start(credentials: None) -> None:
    config = make_client("http://127.0.0.1:9").meta.config
    assert (config.connect_timeout, config.read_timeout) == (3.0, 8.0)
    assert config.retries["total_max_attempts"] == 3  # first try included
    worst = TIMEOUTS["MODELFN_S3_MAX_ATTEMPTS"] * TIMEOUTS["MODELFN_S3_READ_TIMEOUT"]
    assert worst <= 30


def test_a_silent_endpoint_fails_within_the_budget_naming_it(
    credentials: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("MODELFN_S3_READ_TIMEOUT", "0.5")
    monkeypatch.setenv("MODELFN_S3_MAX_ATTEMPTS", "2")
    with SilentEndpoint() as silent:
        store = S3Store("models", client=make_client(silent.url), cache_dir=tmp_path)
        started = time.monotonic()
        with pytest.raises(StoreUnreachable) as info:
            store.fetch("digits", 1)
        took = time.monotonic() - started
    assert silent.url in info.value.message
    assert "Read timeout" in info.value.message
    print(f"silent endpoint: failed after {took:.1f} s with read timeout 0.5 s x 2 attempts")


@pytest.mark.parametrize(("name", "value"), [
    ("MODELFN_S3_READ_TIMEOUT", "soon"), ("MODELFN_S3_CONNECT_TIMEOUT", "0"),
    ("MODELFN_S3_MAX_ATTEMPTS", "2.5")])
def test_bad_timeout_settings(credentials: None, monkeypatch: pytest.MonkeyPatch, name: str,
                              value: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(InvalidInput, match=f"{name} must be"):
        make_client("http://127.0.0.1:9")


def test_a_slow_store_that_keeps_answering_still_serves(
    credentials: None, monkeypatch: pytest.MonkeyPatch, s3_emulator: S3Emulator, pushed: str,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("MODELFN_S3_READ_TIMEOUT", "2")
    with FaultyProxy(s3_emulator.endpoint_url, delay_s=1.0) as slow:
        store = S3Store(pushed, "m", client=make_client(slow.url), cache_dir=tmp_path / "c")
        path = store.fetch("digits", 1)
    assert (path / "digits" / "1" / "model.onnx").read_bytes() == WEIGHTS


def is_model_get(method: str, path: str) -> bool:
    return method == "GET" and path.split("?")[0].endswith("/model.onnx")


def test_a_corruption_caught_by_the_transfer_checksum_is_retried(
    credentials: None, s3_emulator: S3Emulator, pushed: str, tmp_path: Path
) -> None:
    seen = []

    def first_model_get(method: str, path: str) -> bool:
        if is_model_get(method, path):
            seen.append(path)
            return len(seen) == 1
        return False

    with FaultyProxy(s3_emulator.endpoint_url, corrupt=first_model_get) as proxy:
        store = S3Store(pushed, "m", client=make_client(proxy.url), cache_dir=tmp_path / "c")
        path = store.fetch("digits", 1)
    assert proxy.corrupted == 1
    assert len(seen) == 2  # fetched again after the corrupted answer
    assert (path / "digits" / "1" / "model.onnx").read_bytes() == WEIGHTS


def test_a_corruption_that_persists_is_a_corrupt_object(
    credentials: None, s3_emulator: S3Emulator, pushed: str, tmp_path: Path
) -> None:
    with FaultyProxy(s3_emulator.endpoint_url, corrupt=is_model_get) as proxy:
        store = S3Store(pushed, "m", client=make_client(proxy.url), cache_dir=tmp_path / "c")
        with pytest.raises(CorruptObject) as info:
            store.fetch("digits", 1)
    assert proxy.corrupted == 2
    assert "digits/1/model.onnx" in info.value.message
    assert "after one retry" in info.value.message
    assert not list((tmp_path / "c").glob("digits/*/1"))  # nothing corrupt was installed
