"""gRPC end to end on the local platform, as a user types it: `modelfn dev` as a process
(with its gateway), `modelfn deploy --protocol grpc --target local`, then the real
`tritonclient.grpc` at the route URL (h2c through the local ingress) and at the gateway's
gRPC port. Calls are routed one by one (a split shows on one channel), a revision at
zero holds a call until it is ready, errors pass through unchanged, and the gateway says
which protocol a model speaks when asked the other one. Nothing is mocked."""

from __future__ import annotations

import time
from collections import Counter
from typing import TYPE_CHECKING

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from dev_support import EXAMPLES, EXPECTED, REQUEST, modelfn, retrained, start_dev, status
from serving_support import wait_for
from tritonclient.utils import InferenceServerException

if TYPE_CHECKING:
    from collections.abc import Iterator

ROWS = np.asarray(REQUEST["inputs"][0]["data"], dtype=np.float32).reshape(4, 64)
SPLIT_CALLS = 40  # at 50/50, one version answering all of them has odds 2 ** -39


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """`modelfn dev` (gateway included) with digits 1 and 2 pushed; the user's env."""
    path = tmp_path_factory.mktemp("dev")
    process, env = start_dev(path, "--idle", "3s")
    try:
        assert "MODELFN_GATEWAY_GRPC" in env, "modelfn dev started its gateway without gRPC"
        modelfn(env, "push", str(EXAMPLES / "models" / "digits"))
        modelfn(env, "push", str(retrained(path / "v2")))
        yield env
    finally:
        assert process.stop(60) == 0, process.tail()


def host_port(url: str) -> str:
    return url.split("://", 1)[1].rstrip("/")


def infer(client: grpcclient.InferenceServerClient, version: str = "") -> str:
    """One digits call with raw contents; checks the labels, returns the answering version."""
    tensor = grpcclient.InferInput("input", list(ROWS.shape), "FP32")
    tensor.set_data_from_numpy(ROWS)
    result = client.infer("digits", [tensor], model_version=version,
                          outputs=[grpcclient.InferRequestedOutput("label")])
    assert result.as_numpy("label").ravel().tolist() == EXPECTED
    return str(result.get_response().model_version)


def test_grpc_through_the_local_ingress_and_the_gateway(dev: dict[str, str]) -> None:
    first = modelfn(dev, "deploy", "digits:1", "--target", "local", "--protocol", "grpc")
    url = first.stdout.strip().splitlines()[-1]
    ingress = grpcclient.InferenceServerClient(host_port(url))
    assert ingress.is_model_ready("digits")
    metadata = ingress.get_model_metadata("digits")
    assert [i.name for i in metadata.inputs] == ["input"]
    assert infer(ingress) == "1"

    # a 50% canary: one channel, calls routed one by one, both versions answer
    modelfn(dev, "deploy", "digits:2", "--target", "local", "--protocol", "grpc",
            "--traffic", "50")
    seen = Counter(infer(ingress) for _ in range(SPLIT_CALLS))
    assert set(seen) == {"1", "2"}, seen
    facts = status(dev)  # the target is the routing table's
    assert {v: r["protocol"] for v, r in facts["versions"].items()} == {"1": "grpc", "2": "grpc"}
    assert f"{facts['versions']['2']['url']}  (grpc, auth none" in modelfn(
        dev, "status", "digits").stdout
    pinned = facts["versions"]["2"]["url"]
    assert {infer(grpcclient.InferenceServerClient(host_port(pinned))) for _ in range(3)} \
        == {"2"}

    # the gateway: pinned and unpinned calls, its own RPCs, errors passed through
    gateway = grpcclient.InferenceServerClient(dev["MODELFN_GATEWAY_GRPC"])
    assert gateway.is_server_live() and gateway.is_server_ready()
    assert gateway.get_server_metadata().name == "modelfn-gateway"
    # the gateway re-reads the routing table every second: version 2 shows within that
    wait_for(lambda: {(m.name, m.version) for m in gateway.get_model_repository_index().models}
             == {("digits", "1"), ("digits", "2")},
             "the gateway's repository index to list digits 1 and 2", timeout=5)
    assert infer(gateway, "2") == "2"
    assert {infer(gateway) for _ in range(20)} <= {"1", "2"}
    assert gateway.get_model_config("digits", "1").config.max_batch_size == 64
    with pytest.raises(InferenceServerException) as unknown:
        gateway.get_model_metadata("nope")
    assert unknown.value.status() == "StatusCode.NOT_FOUND"
    wrong = grpcclient.InferInput("input", [4, 3], "FP32")
    wrong.set_data_from_numpy(np.zeros((4, 3), np.float32))
    with pytest.raises(InferenceServerException) as bad:
        gateway.infer("digits", [wrong], model_version="1")
    assert bad.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "input" in str(bad.value.message())  # the function's own message, unchanged
    assert infer(gateway, "1") == "1"  # and it keeps serving

    # REST to a gRPC-only function: the gateway says where to go instead
    rest = httpx.post(f"{dev['MODELFN_GATEWAY']}/v2/models/digits/versions/1/infer",
                      json=REQUEST, timeout=30)
    assert rest.status_code == 501 and "gRPC" in rest.json()["error"]

    # scale to zero, then a call held until an instance is ready, and answered
    deadline = time.monotonic() + 60
    while status(dev, "--target", "local")["versions"]["1"].get("instances", 0) \
            and time.monotonic() < deadline:
        time.sleep(0.5)
    assert status(dev, "--target", "local")["versions"]["1"].get("instances", 0) == 0
    assert infer(gateway, "1") == "1"

    modelfn(dev, "undeploy", "digits", "--target", "local")
