"""The gateway `modelfn dev` starts, in front of the local platform: digits deployed by
`modelfn deploy` (a process) to local Knative and to a local Lambda function URL with
AWS_IAM auth, then tritonclient (JSON and binary) through the gateway to both, SigV4 that
the platform verifies, and a function at zero answered 200 within the cold budget.
Every function is a real process; nothing is mocked."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import numpy as np
import pytest
import tritonclient.http as triton

if TYPE_CHECKING:
    from collections.abc import Iterator

    from modelfn.localstack.platform import LocalPlatform

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
REQUEST = json.loads((EXAMPLES / "requests" / "digits.json").read_text())
EXPECTED = json.loads((EXAMPLES / "requests" / "digits_expected.json").read_text())["label"]
MODELS = {"digits": ("--target", "local"), "digits-fn": ("--target", "local", "--lambda")}


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalPlatform]:
    from modelfn.localstack.platform import LocalPlatform

    root = tmp_path_factory.mktemp("gw-platform")
    with LocalPlatform(root / "dev", idle_s=1.5) as running:
        env = {**os.environ, **running.env(), "MODELFN_DEV_DIR": str(running.state.path),
               "MODELFN_CACHE": str(root / "cache")}
        for name, target in MODELS.items():
            model = root / name
            shutil.copytree(EXAMPLES / "models" / "digits", model)
            config = model / "config.pbtxt"
            config.write_text(config.read_text().replace('name: "digits"', f'name: "{name}"'))
            for args in (("push", str(model)), ("deploy", f"{name}:1", *target)):
                done = subprocess.run([sys.executable, "-m", "modelfn.cli.main", *args],
                                      env=env, capture_output=True, text=True, timeout=300)
                assert done.returncode == 0, done.stderr
        yield running


def labels(gateway: str, model: str, binary: bool) -> list[int]:
    """tritonclient's infer through the gateway, tensors as JSON or binary."""
    client = triton.InferenceServerClient(gateway.removeprefix("http://"))
    rows = np.array(REQUEST["inputs"][0]["data"], dtype=np.float32).reshape(4, 64)
    tensor = triton.InferInput("input", [4, 64], "FP32")
    tensor.set_data_from_numpy(rows, binary_data=binary)
    result = client.infer(model, [tensor],
                          outputs=[triton.InferRequestedOutput("label", binary_data=binary)])
    return list(result.as_numpy("label").ravel().tolist())


@pytest.mark.parametrize("model", sorted(MODELS))
def test_tritonclient_through_the_gateway_to_knative_and_lambda(
    platform: LocalPlatform, model: str
) -> None:
    assert platform.gateway_url is not None
    assert labels(platform.gateway_url, model, binary=False) == EXPECTED
    assert labels(platform.gateway_url, model, binary=True) == EXPECTED
    pinned = httpx.post(f"{platform.gateway_url}/v2/models/{model}/versions/1/infer",
                        json=REQUEST, timeout=60)
    assert pinned.status_code == 200 and pinned.json()["model_version"] == "1"


def test_the_gateway_signs_for_an_aws_iam_url_the_platform_verifies(
    platform: LocalPlatform,
) -> None:
    from modelfn.model_store import open_store
    from modelfn.model_store.routes import RouteSource

    assert platform.s3 is not None
    source = RouteSource(store=open_store(platform.store, s3_client=platform.s3.client()))
    table = source.read("digits-fn")
    assert table is not None and table.auth == "iam" and table.url is not None
    unsigned = httpx.post(f"{table.url.rstrip('/')}/v2/models/digits-fn/infer", json=REQUEST,
                          timeout=60)
    assert unsigned.status_code == 403  # the platform checks SigV4 ...
    assert platform.gateway_url is not None
    signed = httpx.post(f"{platform.gateway_url}/v2/models/digits-fn/infer", json=REQUEST,
                        timeout=60)
    assert signed.status_code == 200, signed.text  # ... and accepts the gateway's signature


@pytest.mark.parametrize("model", sorted(MODELS))
def test_a_function_at_zero_is_answered_within_the_budget(
    platform: LocalPlatform, model: str
) -> None:
    assert platform.gateway_url is not None
    deadline = time.monotonic() + 60
    while any(count for count in instances(platform, model).values()):
        assert time.monotonic() < deadline, f"{model} never scaled to zero"
        time.sleep(0.2)
    started = time.monotonic()
    answer = httpx.post(f"{platform.gateway_url}/v2/models/{model}/infer", json=REQUEST,
                        timeout=60)
    assert answer.status_code == 200, answer.text
    assert answer.json()["outputs"][0]["data"] == EXPECTED
    assert time.monotonic() - started < 30  # the gateway's default cold budget
    assert any(count for count in instances(platform, model).values())


def instances(platform: LocalPlatform, model: str) -> dict[str, int]:
    status = platform.status()
    counts = {r["name"]: int(r["instances"]) for r in status["knative"].get("revisions", [])
              if r["service"] == model}
    for version, c in status["lambda"].get("functions", {}).get(model, {}).items():
        counts[f"lambda:{version}"] = int(c["environments"])
    return counts
