from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from onnx_models import save, simple_graph

from modelfn.runtime.backends.onnxruntime import OnnxRuntimeBackend
from modelfn.runtime.config import InstanceGroup, ModelConfig, TensorConfig, Warmup, WarmupInput
from modelfn.runtime.datatypes import BY_V2
from modelfn.runtime.warmup import timing_batch, warm_up, warmup_plan

if TYPE_CHECKING:
    from pathlib import Path

    import numpy as np

FP32 = BY_V2["FP32"]


@pytest.mark.parametrize(("top", "covers", "plan"), [
    (64, True, [1, 64]),
    (64, False, [1, 2, 4, 8, 16, 32, 64]),
    (48, False, [1, 2, 4, 8, 16, 32, 48]),
    (2, True, [1, 2]),
    (1, True, [1]),
    (0, False, [1]),  # a model without batching runs its one shape
])
def test_over_budget_the_plan_depends_on_what_a_new_shape_costs(
        top: int, covers: bool, plan: list[int]) -> None:
    assert warmup_plan(top, 1.0, 0.0, largest_covers=covers) == plan


@pytest.mark.parametrize("covers", [True, False])
def test_a_sweep_that_fits_the_budget_warms_every_size(covers: bool) -> None:
    # 1 + 2 + 3 + 4 = 10 rows at 0.5 s a row: exactly the budget
    assert warmup_plan(4, 0.5, 5.0, largest_covers=covers) == [1, 2, 3, 4]
    assert warmup_plan(4, 0.5, 4.9, largest_covers=covers) == ([1, 4] if covers else [1, 2, 4])


class Recording(OnnxRuntimeBackend):
    """The real ONNX Runtime backend, noting the batch size of every run."""

    def __init__(self, config: ModelConfig, model_path: Path, covers: bool | None = None) -> None:
        super().__init__(config, model_path)
        self.runs: list[tuple[int, int]] = []  # (instance, rows)
        self.covers = covers

    def run(self, instance: int, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.runs.append((instance, len(next(iter(inputs.values())))))
        return super().run(instance, inputs)

    @property
    def warms_by_largest(self) -> bool:
        return super().warms_by_largest if self.covers is None else self.covers


def _backend(tmp_path: Path, covers: bool | None = None, instances: int = 1,
             **fields: object) -> Recording:
    path = save(tmp_path / "simple", simple_graph())
    config = ModelConfig(
        name="simple", platform="onnxruntime_onnx", backend="onnxruntime", max_batch_size=8,
        inputs=[TensorConfig("INPUT0", FP32, (16,)), TensorConfig("INPUT1", FP32, (16,))],
        outputs=[TensorConfig("OUTPUT0", FP32, (16,)), TensorConfig("OUTPUT1", FP32, (16,))],
        instance_group=[InstanceGroup(count=instances, kind="KIND_CPU")],
        **fields,  # type: ignore[arg-type]
    )
    backend = Recording(config, path, covers)
    backend.load()
    return backend


def test_the_cpu_provider_warms_the_smallest_and_largest_over_budget(tmp_path: Path) -> None:
    backend = _backend(tmp_path, parameters={"warmup_budget_s": "0"}, instances=2)
    assert backend.warms_by_largest
    report = warm_up(backend, backend.config, tmp_path / "simple" / "1")
    assert report.sizes == [1, 8]
    # each instance: a first run and a timed run of one row, then the largest batch
    assert sorted(set(backend.runs)) == [(0, 1), (0, 8), (1, 1), (1, 8)]
    assert report.largest_run_s > 0
    assert report.smallest_run[0] == 1 and report.smallest_run[1] > 0


def test_a_backend_that_tunes_per_shape_warms_the_powers_of_two(tmp_path: Path) -> None:
    backend = _backend(tmp_path, covers=False, parameters={"warmup_budget_s": "0"})
    report = warm_up(backend, backend.config, tmp_path / "simple" / "1")
    assert report.sizes == [1, 2, 4, 8]
    assert {rows for _, rows in backend.runs} == {1, 2, 4, 8}


def test_a_generous_budget_sweeps_every_size(tmp_path: Path) -> None:
    backend = _backend(tmp_path, parameters={"warmup_budget_s": "3600"})
    report = warm_up(backend, backend.config, tmp_path / "simple" / "1")
    assert report.sizes == list(range(1, 9))
    assert {rows for _, rows in backend.runs} == set(range(1, 9))


def test_model_warmup_replaces_the_plan(tmp_path: Path) -> None:
    warmups = [Warmup("small", batch_size=2, count=3,
                      inputs={n: WarmupInput(FP32, (16,)) for n in ("INPUT0", "INPUT1")}),
               Warmup("large", batch_size=5,
                      inputs={n: WarmupInput(FP32, (16,), data="random_data")
                              for n in ("INPUT0", "INPUT1")})]
    backend = _backend(tmp_path, model_warmup=warmups)
    report = warm_up(backend, backend.config, tmp_path / "simple" / "1")
    assert report.sizes == [2, 5]
    assert report.smallest_run[0] == 2 and report.smallest_run[1] > 0
    # each warmup `count` times in order; then only the largest and the smallest may run
    # again, to be timed
    rows = [rows for _, rows in backend.runs]
    assert rows[:4] == [2, 2, 2, 5] and set(rows[4:]) <= {2, 5}


def test_a_batch_is_timed_on_random_floats_and_zero_integers() -> None:
    """Some models run faster on zeros; an integer input may be an index, where only
    zeros are surely in range."""
    config = ModelConfig(
        name="m", platform="onnxruntime_onnx", backend="onnxruntime", max_batch_size=8,
        inputs=[TensorConfig("x", FP32, (16,)), TensorConfig("ids", BY_V2["INT64"], (4,))],
        outputs=[TensorConfig("y", FP32, (16,))],
    )
    batch = timing_batch(config, 3)
    assert batch["x"].shape == (3, 16) and batch["x"].dtype.name == "float32"
    assert batch["x"].min() >= 0 and batch["x"].std() > 0
    assert batch["ids"].shape == (3, 4) and not batch["ids"].any()
