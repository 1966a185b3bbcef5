"""TensorRT engine caches through the model store.

This machine has no GPU: the GPU name and TensorRT version that key the cache
are injected, and the "engines" are files the test writes where the TensorRT
provider would. The store, the keying, the download before session creation and
the upload after warmup are the real code; the GPU test at the end runs only with
a GPU.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from onnx_models import save, simple_graph

from modelfn.model_store import open_store
from modelfn.model_store.checkout import checkout
from modelfn.model_store.engine_cache import PATH, TIMING_PATH, EngineCache
from modelfn.runtime.config_file import parse_config

if TYPE_CHECKING:
    from pathlib import Path

    from modelfn.model_store.base import ModelStore

TRT_CONFIG = """
name: "simple"
instance_group [{ kind: KIND_GPU gpus: [0] }]
optimization { execution_accelerators { gpu_execution_accelerator: [{
  name: "tensorrt"
  parameters { key: "precision_mode" value: "FP16" }
  parameters { key: "trt_engine_cache_enable" value: "1" }
  parameters { key: "trt_timing_cache_enable" value: "1" }
}] } }
"""


@pytest.fixture
def pushed(tmp_path: Path) -> tuple[ModelStore, dict[tuple[str, int], str]]:
    save(tmp_path / "repo" / "simple", simple_graph(), config=TRT_CONFIG)
    store = open_store(str(tmp_path / "store"), cache_dir=tmp_path / "cache")
    store.push(tmp_path / "repo" / "simple")
    done = checkout(store, [("simple", 1)], into=tmp_path / "checkout")
    return store, done.digests


def _cache(store: ModelStore, digests: dict[tuple[str, int], str], root: Path,
           gpu: str | None = "NVIDIA A10G") -> EngineCache:
    return EngineCache(store, digests, root, gpu=lambda device: gpu,
                       trt_version=lambda: "10.3.0")


def test_engines_built_once_are_published_and_reused_by_the_next_cold_start(
    pushed: tuple[ModelStore, dict[tuple[str, int], str]], tmp_path: Path
) -> None:
    store, digests = pushed
    config = parse_config(TRT_CONFIG)
    first = _cache(store, digests, tmp_path / "node-a")
    prepared, publish = first.prepare(config, 1)
    assert publish is not None, "nothing in the store yet: engines must be built and published"
    params = prepared.optimization.gpu_execution_accelerator[0].parameters
    local = tmp_path / "node-a" / "simple"
    assert params[PATH].startswith(str(local)) and params[TIMING_PATH] == params[PATH]
    assert PATH not in config.optimization.gpu_execution_accelerator[0].parameters  # a copy
    engine = b"\x00serialized engine" * 100
    (tmp_path / params[PATH] / "TensorrtExecutionProvider_model_fp16.engine").write_bytes(engine)
    publish()
    assert [k.precision for k in first.published] == ["FP16"]

    second = _cache(store, digests, tmp_path / "node-b")
    prepared, publish = second.prepare(config, 1)
    assert publish is None, "the engine came from the store: nothing to build or publish"
    path = prepared.optimization.gpu_execution_accelerator[0].parameters[PATH]
    assert (tmp_path / path / "TensorrtExecutionProvider_model_fp16.engine").read_bytes() == engine


def test_another_gpu_gets_its_own_engines(
    pushed: tuple[ModelStore, dict[tuple[str, int], str]], tmp_path: Path
) -> None:
    store, digests = pushed
    config = parse_config(TRT_CONFIG)
    prepared, publish = _cache(store, digests, tmp_path / "a").prepare(config, 1)
    assert publish is not None
    path = prepared.optimization.gpu_execution_accelerator[0].parameters[PATH]
    (tmp_path / path / "model.engine").write_bytes(b"for an A10G")
    publish()
    _, publish = _cache(store, digests, tmp_path / "b", gpu="NVIDIA H100").prepare(config, 1)
    assert publish is not None, "an A10G engine must not be served to an H100"


def test_publishing_nothing_new_uploads_nothing(
    pushed: tuple[ModelStore, dict[tuple[str, int], str]], tmp_path: Path
) -> None:
    store, digests = pushed
    cache = _cache(store, digests, tmp_path / "a")
    _, publish = cache.prepare(parse_config(TRT_CONFIG), 1)
    assert publish is not None
    publish()
    assert cache.published == []


@pytest.mark.parametrize("config_text", [
    'name: "simple"',  # no TensorRT accelerator
    TRT_CONFIG.replace('value: "1" }\n  parameters { key: "trt_timing', 'value: "0" }\n'
                       '  parameters { key: "trt_timing'),  # engine cache off
])
def test_nothing_to_do_without_an_engine_cache(
    pushed: tuple[ModelStore, dict[tuple[str, int], str]], tmp_path: Path, config_text: str
) -> None:
    store, digests = pushed
    config = parse_config(config_text)
    prepared, publish = _cache(store, digests, tmp_path / "a").prepare(config, 1)
    assert prepared is config and publish is None


def test_without_a_gpu_name_engines_are_built_locally(
    pushed: tuple[ModelStore, dict[tuple[str, int], str]], tmp_path: Path
) -> None:
    store, digests = pushed
    config = parse_config(TRT_CONFIG)
    prepared, publish = _cache(store, digests, tmp_path / "a", gpu=None).prepare(config, 1)
    assert prepared is config and publish is None


@pytest.mark.gpu
@pytest.mark.tensorrt
def test_real_tensorrt_engines_round_trip_through_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from modelfn.handlers.boot import open_function_repository

    monkeypatch.setenv("MODELFN_CACHE", str(tmp_path / "cache"))
    save(tmp_path / "repo" / "simple", simple_graph(), config=TRT_CONFIG)
    store_uri = str(tmp_path / "store")
    open_store(store_uri, cache_dir=tmp_path / "cache").push(tmp_path / "repo" / "simple")
    first = open_function_repository(tmp_path / "first", ["simple:1"], store=store_uri)
    assert first.engines is not None and first.engines.published
    second = open_function_repository(tmp_path / "second", ["simple:1"], store=store_uri)
    assert second.engines is not None and not second.engines.published
