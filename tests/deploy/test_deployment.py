"""The target-neutral Deployment: traffic splits, batching-derived concurrency, quantities."""

from __future__ import annotations

import pytest

from modelfn.deploy.deployment import (
    Batching,
    Deployment,
    Resources,
    Scaling,
    cpu_cores,
    memory_bytes,
    split_traffic,
)
from modelfn.handlers.environment import FunctionEnvironment
from modelfn.runtime.config import parse_config
from modelfn.runtime.errors import InvalidInput

STORE = FunctionEnvironment(repository=None, models=["digits:2"], store="s3://b/models")


@pytest.mark.parametrize(("current", "version", "percent", "split"), [
    ({}, 1, 100, {1: 100}),
    ({1: 100}, 2, 10, {1: 90, 2: 10}),
    ({1: 100}, 2, 100, {1: 0, 2: 100}),
    ({1: 90, 2: 10}, 2, 100, {1: 0, 2: 100}),
    ({1: 0, 2: 100}, 1, 100, {1: 100, 2: 0}),
    ({1: 90, 2: 10}, 2, 50, {1: 50, 2: 50}),
    ({1: 50, 2: 50}, 3, 10, {1: 45, 2: 45, 3: 10}),
    ({1: 34, 2: 33, 3: 33}, 4, 1, {1: 33, 2: 33, 3: 33, 4: 1}),
    ({1: 100}, 1, 100, {1: 100}),
    ({1: 100, 2: 0}, 3, 20, {1: 80, 2: 0, 3: 20}),
])
def test_split_traffic(current: dict[int, int], version: int, percent: int,
                       split: dict[int, int]) -> None:
    assert split_traffic(current, version, percent) == split
    assert sum(split.values()) == 100


def test_a_canary_needs_a_version_serving_the_rest() -> None:
    with pytest.raises(InvalidInput, match="no other version is serving the rest"):
        split_traffic({}, 1, 10)
    with pytest.raises(InvalidInput, match="between 0 and 100"):
        split_traffic({1: 100}, 2, 101)


def test_batching_decides_concurrency() -> None:
    config = parse_config(
        'name: "m"\nmax_batch_size: 8\ninstance_group [{ count: 2 kind: KIND_CPU }]\n'
        'input [{ name: "x" data_type: TYPE_FP32 dims: [4] }]\n'
        'output [{ name: "y" data_type: TYPE_FP32 dims: [4] }]\n'
    )
    batching = Batching.of(config)
    assert (batching.capacity, batching.container_concurrency) == (16, 32)
    deployment = Deployment("m", 1, "img", STORE, batching=batching)
    assert (deployment.container_concurrency, deployment.target) == (32, 16)
    assert Batching(max_batch_size=0, instances=1).container_concurrency == 2


def test_an_explicit_concurrency_caps_the_target() -> None:
    deployment = Deployment("m", 1, "img", STORE, batching=Batching(64, 1),
                            scaling=Scaling(concurrency=10))
    assert (deployment.container_concurrency, deployment.target) == (10, 10)


@pytest.mark.parametrize(("quantity", "cores"), [("2", 2.0), ("500m", 0.5), ("1.5", 1.5)])
def test_cpu_quantities(quantity: str, cores: float) -> None:
    assert cpu_cores(quantity) == cores


@pytest.mark.parametrize(("quantity", "size"), [
    ("2Gi", 2 * 2**30), ("512Mi", 512 * 2**20), ("1G", 10**9), ("1000", 1000)])
def test_memory_quantities(quantity: str, size: int) -> None:
    assert memory_bytes(quantity) == size


@pytest.mark.parametrize(("make", "message"), [
    (lambda: Resources(cpu="two"), "CPU 'two' is not a quantity"),
    (lambda: Resources(memory="2GB"), "memory '2GB' is not a quantity"),
    (lambda: Resources(gpu=-1), "--gpu must be 0 or more"),
    (lambda: Scaling(min_scale=3, max_scale=2), "--min-scale 3 is above --max-scale 2"),
    (lambda: Scaling(concurrency=0), "--concurrency must be 1 or more"),
    (lambda: Scaling(timeout_s=0), "--timeout must be between 1 and 3600"),
    (lambda: Deployment("m", 2, "img", STORE, traffic={1: 90, 2: 20}), "add up to 100"),
    (lambda: Deployment("m", 2, "img", STORE, traffic={1: 100}), "leaves out version 2"),
])
def test_bad_options_are_clear_errors(make: object, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        make()  # type: ignore[operator]
