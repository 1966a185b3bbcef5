"""TensorRT engines kept in the model store, so a cold start never rebuilds one.

When a model asks ONNX Runtime's TensorRT provider for an engine cache
(``trt_engine_cache_enable``) and comes from a model store, each version gets a
local engine directory. Before its sessions are created, the engines built
earlier for the same model digest, GPU, TensorRT version and precision are
downloaded into it; after warmup (when the provider has built any missing
engine), a directory that started empty is uploaded for the next cold start.
Keying on the content digest, not a path, is what keeps a cache valid across
machines (Triton's ORT backend keyed on a temporary path and rebuilt every time).
"""

from __future__ import annotations

import copy
import logging
import os
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING

from modelfn.runtime.errors import ModelfnError

if TYPE_CHECKING:
    from collections.abc import Callable

    from modelfn.model_store.base import ModelStore
    from modelfn.model_store.engines import EngineKey
    from modelfn.runtime.config import Accelerator, ModelConfig

log = logging.getLogger("modelfn.engine_cache")

ENABLE = "trt_engine_cache_enable"
PATH = "trt_engine_cache_path"
TIMING_ENABLE = "trt_timing_cache_enable"
TIMING_PATH = "trt_timing_cache_path"


def _on(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes")


def gpu_name(device: int = 0) -> str | None:
    """The GPU's product name as nvidia-smi reports it, or None without one."""
    import shutil
    import subprocess

    if shutil.which("nvidia-smi") is None:
        return None
    found = subprocess.run(
        ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", str(device)],
        capture_output=True, text=True, check=False, timeout=10,
    )
    name = found.stdout.strip()
    return name if found.returncode == 0 and name else None


def tensorrt_version() -> str | None:
    for package in ("tensorrt", "tensorrt-cu12", "tensorrt-libs"):
        try:
            return version(package)
        except PackageNotFoundError:
            continue
    return None


def _tensorrt(config: ModelConfig) -> Accelerator | None:
    return next((a for a in config.optimization.gpu_execution_accelerator
                 if a.name == "tensorrt"), None)


@dataclass
class EngineCache:
    """Engine caches of the versions checked out of ``store`` (digest per name and version)."""

    store: ModelStore
    digests: dict[tuple[str, int], str]
    root: Path
    gpu: Callable[[int], str | None] = gpu_name
    trt_version: Callable[[], str | None] = tensorrt_version
    published: list[EngineKey] = field(default_factory=list)

    def key(self, config: ModelConfig, version: int) -> EngineKey | None:
        from modelfn.model_store.engines import EngineKey

        accelerator = _tensorrt(config)
        digest = self.digests.get((config.name, version))
        if accelerator is None or digest is None or not _on(accelerator.parameters.get(ENABLE)):
            return None
        gpus = next((g.gpus for g in config.instance_group if g.kind == "KIND_GPU"), ())
        gpu, trt = self.gpu(gpus[0] if gpus else 0), self.trt_version()
        if gpu is None or trt is None:
            log.warning("%s:%d: no GPU name or TensorRT version to key the engine cache on; "
                        "engines will be built locally", config.name, version)
            return None
        precision = accelerator.parameters.get("precision_mode", "FP32")
        return EngineKey(digest, gpu, trt, precision)

    def prepare(self, config: ModelConfig, version: int
                ) -> tuple[ModelConfig, Callable[[], None] | None]:
        """The config to create sessions with (engine paths pointed at a local directory
        filled from the store) and the step that publishes new engines after warmup."""
        key = self.key(config, version)
        if key is None:
            return config, None
        config = copy.deepcopy(config)
        accelerator = _tensorrt(config)
        assert accelerator is not None
        local = Path(accelerator.parameters.get(PATH) or self.root / config.name / key.slug)
        accelerator.parameters[PATH] = str(local)
        if _on(accelerator.parameters.get(TIMING_ENABLE)):
            accelerator.parameters.setdefault(TIMING_PATH, str(local))
        local.mkdir(parents=True, exist_ok=True)
        try:
            if self.store.get_engine_cache(config.name, version, key, local):
                log.info("%s:%d: TensorRT engines from the store (%s)",
                         config.name, version, key.slug)
                return config, None
        except ModelfnError as exc:  # a broken cache costs a rebuild, never the model
            log.warning("%s:%d: engine cache not usable, building locally: %s",
                        config.name, version, exc.message)
        before = set(os.listdir(local))

        def publish() -> None:
            if set(os.listdir(local)) == before:
                return
            try:
                if self.store.put_engine_cache(config.name, version, key, local):
                    self.published.append(key)
                    log.info("%s:%d: TensorRT engines published to the store (%s)",
                             config.name, version, key.slug)
            except ModelfnError as exc:
                log.warning("%s:%d: could not publish engines: %s",
                            config.name, version, exc.message)

        return config, publish
