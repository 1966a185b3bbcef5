"""bench/gpu.py: every setting is a config modelfn accepts and means what its name says;
the table is built from given numbers (the measurements themselves need a GPU)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from modelfn.runtime.backends.onnxruntime import CUDA, TENSORRT, session_settings
from modelfn.runtime.config_file import parse_config

if TYPE_CHECKING:
    from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def gpu() -> ModuleType:
    sys.path.insert(0, str(BENCH))  # gpu.py imports make_cnn beside it
    try:
        spec = importlib.util.spec_from_file_location("bench_gpu", BENCH / "gpu.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH))


@pytest.mark.parametrize(("setting", "first", "padded", "instances"), [
    ("cuda", CUDA, (1, 32), 1),
    ("cuda-unpadded", CUDA, (), 1),
    ("cuda-buckets", CUDA, (1, 8, 16, 32), 1),
    ("cuda-x2", CUDA, (1, 32), 2),
    ("trt-fp16", TENSORRT, (), 1),
])
def test_each_setting_is_a_valid_config_with_its_providers_and_padding(
    gpu: ModuleType, setting: str, first: str, padded: tuple[int, ...], instances: int
) -> None:
    config = parse_config(gpu.config_text(setting))
    settings = session_settings(config, cpus=16)
    assert settings.providers[0][0] == first
    assert settings.padded_batch_sizes == padded
    assert config.instance_count == instances


def test_the_table_sets_modelfn_beside_raw(gpu: ModuleType) -> None:
    raw = {"providers": ["CUDAExecutionProvider", "CPUExecutionProvider"],
           "batches": {b: {"rows_per_s": 1000.0 * b} for b in gpu.BATCHES}}
    served = {"ready_s": 1.4, "phases": {"import": 0.4, "session": 0.3, "warmup": 0.7},
              "providers": ["CUDAExecutionProvider", "CPUExecutionProvider"],
              "load": [{"concurrency": 1, "rows_per_s": 500.0, "p50_ms": 1.8},
                       {"concurrency": 32, "rows_per_s": 16000.0, "p50_ms": 2.0,
                        "avg_batch_size": 16.0}]}
    table = gpu.report({"gpu": "NVIDIA H200", "settings": {
        "cuda": {"raw": raw, "modelfn": served}, "trt-fp16": {"error": "RuntimeError: no"}}})
    assert "| cuda | CUDA+CPU / CUDA+CPU | 1000 / 8000 / 16000 / 32000 | 500, 1.80 |" in table
    assert "| 16000, 2.00, 16.0 | 0.50× |" in table
    assert "| 1.40 s (import 0.40, session 0.30, warmup 0.70) |" in table
    assert "| trt-fp16 | failed: RuntimeError: no |" in table
