"""The target-neutral Deployment: traffic splits, batching-derived concurrency."""

from __future__ import annotations

import pytest

from modelfn.deploy.deployment import (
    MAX_CONCURRENCY,
    Batching,
    Deployment,
    Resources,
    Scaling,
    check_image,
    revision,
    split_traffic,
    version_of,
)
from modelfn.handlers.environment import FunctionEnvironment
from modelfn.runtime.config_file import parse_config
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


def test_batching_carries_the_config_the_gateway_batches_by() -> None:
    """The config in Triton's JSON form, which the routing table records and the gateway
    reads back; none for a config that lists no inputs or outputs (``plan`` completes such
    a config from the model first: test_workflow)."""
    from modelfn.runtime.config import config_from_json

    config = parse_config(
        'name: "m"\nmax_batch_size: 8\ndynamic_batching { max_queue_delay_microseconds: 50 }\n'
        'input [{ name: "x" data_type: TYPE_FP32 dims: [4] }]\n'
        'output [{ name: "y" data_type: TYPE_FP32 dims: [4] }]\n'
    )
    policy = Batching.of(config).policy
    assert policy is not None
    read = config_from_json(dict(policy))
    assert (read.max_batch_size, [t.name for t in read.inputs], read.dynamic_batching) == (
        8, ["x"], config.dynamic_batching)
    assert Batching.of(parse_config('name: "m"\nmax_batch_size: 8\n')).policy is None


def test_an_explicit_concurrency_caps_the_target() -> None:
    deployment = Deployment("m", 1, "img", STORE, batching=Batching(64, 1),
                            scaling=Scaling(concurrency=10))
    assert (deployment.container_concurrency, deployment.target) == (10, 10)


def test_concurrency_stops_at_knatives_and_cloud_runs_limit() -> None:
    """A model batching 512 rows would ask for 1024 in flight; Knative refuses a
    containerConcurrency above 1000 (and Cloud Run allows 1000 at most)."""
    assert MAX_CONCURRENCY == 1000
    batching = Batching(max_batch_size=512, instances=1)
    assert (batching.capacity, batching.container_concurrency) == (512, 1000)
    big = Deployment("m", 1, "img", STORE, batching=Batching(max_batch_size=512, instances=4))
    assert (big.container_concurrency, big.target) == (1000, 1000)
    assert Deployment("m", 1, "img", STORE, scaling=Scaling(concurrency=1000)
                      ).container_concurrency == 1000


@pytest.mark.parametrize("image", [
    "reg.example.com/modelfn/digits@sha256:" + "ab" * 32,
    "123456789012.dkr.ecr.us-east-1.amazonaws.com/digits@sha256:" + "ef" * 32,
    "localhost:5000/modelfn/digits:1-http", "Reg.Example.com/digits:LATEST", "ubuntu:22.04",
    "[::1]:5000/digits", "modelfn.local/my_model.v2:process",
])
def test_image_references(image: str) -> None:
    assert check_image(image) == image


@pytest.mark.parametrize(("image", "message"), [
    ("", "--image is empty"), ("  ", "--image is empty"),
    ("not an image", "not an OCI image reference"),
    ("Reg.example.com/Digits:LATEST", "must be lower case"),
    ("Digits/model", "must be lower case"),
    ("reg.example.com/digits@sha256:abc", "not an OCI image reference"),
    ("reg.example.com/digits:", "not an OCI image reference"),
    ("reg.example.com/" + "a" * 250, "not an OCI image reference"),
])
def test_image_references_that_are_refused(image: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        check_image(image)


@pytest.mark.parametrize(("name", "version"), [
    ("digits-v2-1a2b3c4", 2), ("digits-v2", 2), ("digits-v10", 10), ("digits-v3-0000000", 3),
    ("digits-v02", None), ("digits-v2-xyz", None), ("digits-v2-1a2b3c4d", None),
    ("digits-00001", None), ("other-v2-1a2b3c4", None), ("digits-v", None),
])
def test_version_of_reads_revision_names_with_and_without_a_template_hash(
        name: str, version: int | None) -> None:
    assert version_of("digits", name) == version


def test_revision_names() -> None:
    assert revision("digits", 2) == "digits-v2"
    assert revision("digits", 2, "1a2b3c4d5e") == "digits-v2-1a2b3c4"
    assert version_of("digits", revision("digits", 7, "abcdef0")) == 7


@pytest.mark.parametrize(("make", "message"), [
    (lambda: Resources(cpu="two"), "CPU 'two' is not a quantity"),
    (lambda: Resources(memory="2GB"), "memory '2GB' is not a quantity"),
    (lambda: Resources(gpu=-1), "--gpu must be 0 or more"),
    (lambda: Scaling(min_scale=3, max_scale=2), "--min-scale 3 is above --max-scale 2"),
    (lambda: Scaling(concurrency=0), "--concurrency must be between 1 and 1000, not 0"),
    (lambda: Scaling(concurrency=1001), "--concurrency must be between 1 and 1000"),
    (lambda: Deployment("m", 2, "", STORE), "--image is empty"),
    (lambda: Deployment("m", 2, "not an image", STORE), "not an OCI image reference"),
    (lambda: Scaling(timeout_s=0), "--timeout must be between 1 and 3600"),
    (lambda: Deployment("m", 2, "img", STORE, traffic={1: 90, 2: 20}), "add up to 100"),
    (lambda: Deployment("m", 2, "img", STORE, traffic={1: 100}), "leaves out version 2"),
])
def test_bad_options_are_clear_errors(make: object, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        make()  # type: ignore[operator]
