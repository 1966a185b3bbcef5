"""Shared fixtures: tiny real ONNX models written into Triton-style repositories."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest
from onnx import TensorProto
from onnx_models import identity_graph, save, simple_graph

from modelfn.runtime.hardware import gpu_available

if TYPE_CHECKING:
    from pathlib import Path


@pytest.fixture
def simple_repo(tmp_path: Path) -> Path:
    """A repository with 'simple' (versions 1 and 2, no config) and 'identity_int32'."""
    repo = tmp_path / "models"
    save(repo / "simple", simple_graph(scale=1.0), version=1)
    save(repo / "simple", simple_graph(scale=2.0), version=2,
         config='version_policy { all {} }\n')
    save(repo / "identity_int32", identity_graph(TensorProto.INT32, ["N", 3]))
    return repo


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    import importlib.util

    gpu = gpu_available()
    reasons = {
        "gpu": None if gpu else "needs an NVIDIA GPU with CUDA (none on this machine)",
        "tensorrt": None if gpu and importlib.util.find_spec("tensorrt") is not None
        else "needs TensorRT beside a GPU (the tensorrt package is not installed here)",
    }
    for item in items:
        for mark, reason in reasons.items():
            if reason is not None and mark in item.keywords:
                item.add_marker(pytest.mark.skip(reason=reason))
                break
