"""TensorRT engine caches in the store, with fake engine files (no GPU needed)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from modelfn.model_store import EngineKey, ModelStore
from modelfn.model_store.errors import CorruptObject
from modelfn.runtime.errors import InvalidInput, ModelNotFound

if TYPE_CHECKING:
    from pathlib import Path


def engine_files(root: Path, tag: bytes) -> Path:
    (root / "profiles").mkdir(parents=True)
    (root / "model_ctx.engine").write_bytes(b"ENGINE" + tag * 100)
    (root / "profiles" / "timing.cache").write_bytes(b"TIMING" + tag)
    return root


def test_slug_is_stable_and_safe() -> None:
    key = EngineKey("ab" * 32, "NVIDIA A10G / PCIe", "10.3.0", "FP16")
    assert key.slug == EngineKey("ab" * 32, "NVIDIA A10G / PCIe", "10.3.0", "FP16").slug
    assert key.slug.startswith("nvidia-a10g-pcie-trt10.3.0-fp16-abababababababab-")
    assert key.slug != EngineKey("ab" * 32, "NVIDIA A10G / PCIe", "10.3.0", "FP32").slug
    assert "/" not in key.slug and " " not in key.slug


def test_engine_cache_round_trip(harness: Any, make_model: Any, tmp_path: Path) -> None:
    store: ModelStore = harness.store
    digest = store.push(make_model({"model.onnx": b"weights"})).digest
    key = EngineKey(digest, "NVIDIA L4", "10.3.0", "fp16")
    assert store.get_engine_cache("digits", 1, key, tmp_path / "none") is False

    assert store.put_engine_cache("digits", 1, key, engine_files(tmp_path / "built", b"a"))
    # a second builder of the same engine loses the race for the manifest: nothing changes
    assert not store.put_engine_cache("digits", 1, key, engine_files(tmp_path / "again", b"b"))

    dest = tmp_path / "engines"
    assert store.get_engine_cache("digits", 1, key, dest)
    assert (dest / "model_ctx.engine").read_bytes() == b"ENGINE" + b"a" * 100
    assert (dest / "profiles" / "timing.cache").read_bytes() == b"TIMING" + b"a"

    other_gpu = EngineKey(digest, "NVIDIA A100", "10.3.0", "fp16")
    assert not store.get_engine_cache("digits", 1, other_gpu, tmp_path / "other")
    # the engine cache is no version content: the model's files and digest are unchanged
    assert [v.files for v in store.list_versions("digits")] == [1]


def test_engine_cache_is_verified(harness: Any, make_model: Any, tmp_path: Path) -> None:
    store: ModelStore = harness.store
    digest = store.push(make_model({"model.onnx": b"weights"})).digest
    key = EngineKey(digest, "NVIDIA L4", "10.3.0", "fp16")
    store.put_engine_cache("digits", 1, key, engine_files(tmp_path / "built", b"a"))
    manifest = harness.get_raw(f"digits/1/engines/{key.slug}/MANIFEST.json")
    upload = __import__("json").loads(manifest)["upload"]
    harness.put_raw(f"digits/1/engines/{key.slug}/{upload}/model_ctx.engine", b"garbage")
    with pytest.raises(CorruptObject, match="model_ctx.engine"):
        store.get_engine_cache("digits", 1, key, tmp_path / "dest")


def test_engine_key_must_match_the_version(store: ModelStore, make_model: Any,
                                           tmp_path: Path) -> None:
    store.push(make_model({"model.onnx": b"weights"}))
    key = EngineKey("0" * 64, "NVIDIA L4", "10.3.0", "fp16")
    with pytest.raises(InvalidInput, match="engine key is for model digest 000000000000"):
        store.put_engine_cache("digits", 1, key, engine_files(tmp_path / "e", b"x"))
    with pytest.raises(ModelNotFound):
        store.put_engine_cache("digits", 2, key, engine_files(tmp_path / "f", b"x"))
