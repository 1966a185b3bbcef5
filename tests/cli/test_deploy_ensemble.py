"""An ensemble with a Python step deployed as a user types it, against `modelfn dev` running
as a process: push its models and the ensemble, deploy the ensemble alone, and call it
through the gateway by its name: local Knative over REST (tritonclient HTTP) and gRPC
(tritonclient gRPC at the gateway's gRPC port), and a local Lambda function. Nothing is
mocked; every command is a `modelfn` process."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import httpx
import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from dev_support import modelfn, start_dev
from ensemble_repos import save_ensemble
from pipeline_models import PIPELINE, pipeline_repository

if TYPE_CHECKING:
    from collections.abc import Iterator

A = np.arange(8, dtype=np.float32).reshape(2, 4)
B = np.full((2, 4), 0.5, dtype=np.float32)


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """`modelfn dev` with the pipeline's models and three ensembles over them pushed."""
    path = tmp_path_factory.mktemp("dev")
    repo = pipeline_repository(path / "repo")
    for name in ("pipeline-grpc", "pipeline-lambda"):
        save_ensemble(repo / name, PIPELINE)
    process, env = start_dev(path / "state", "--idle", "60s")
    try:
        for model in ("add", "tenfold"):
            modelfn(env, "push", str(repo / model))
        pushed = modelfn(env, "push", str(repo / "pipeline")).stdout
        assert "it runs add:1, tenfold:1" in pushed
        for name in ("pipeline-grpc", "pipeline-lambda"):
            modelfn(env, "push", str(repo / name))
        yield env
    finally:
        assert process.stop(60) == 0, process.tail()


def test_an_ensemble_deploys_as_one_function_and_the_gateway_routes_its_name(
        dev: dict[str, str]) -> None:
    deployed = modelfn(dev, "deploy", "pipeline", "--target", "local")
    assert deployed.stdout.strip().splitlines()[-1].startswith("http://")
    gateway = dev["MODELFN_GATEWAY"].rstrip("/").removeprefix("http://")
    client = triton_http.InferenceServerClient(gateway)
    inputs = [triton_http.InferInput("A", [2, 4], "FP32"),
              triton_http.InferInput("B", [2, 4], "FP32")]
    inputs[0].set_data_from_numpy(A, binary_data=True)
    inputs[1].set_data_from_numpy(B)
    answer = client.infer("pipeline", inputs)
    np.testing.assert_allclose(answer.as_numpy("OUT"), (A + B) * 10)
    assert answer.get_response()["model_version"] == "1"

    status = json.loads(modelfn(dev, "status", "pipeline", "--output", "json").stdout)
    assert status["ready"] is True and set(status["versions"]) == {"1"}
    # the function serves the ensemble's models too: its own URL answers for them
    pinned = status["versions"]["1"]["url"]
    ready = httpx.get(f"{pinned}/v2/models/tenfold/ready", timeout=30)
    assert ready.status_code == 200

    wrong = httpx.post(f"http://{gateway}/v2/models/pipeline/infer", timeout=30, json={
        "inputs": [{"name": "A", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]},
                   {"name": "C", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]})
    assert wrong.status_code == 400 and "B" in wrong.json()["error"]
    again = client.infer("pipeline", inputs)  # the function still serves
    np.testing.assert_allclose(again.as_numpy("OUT"), (A + B) * 10)


def test_an_ensemble_deploys_over_grpc(dev: dict[str, str]) -> None:
    modelfn(dev, "deploy", "pipeline-grpc", "--target", "local", "--protocol", "grpc")
    client = triton_grpc.InferenceServerClient(dev["MODELFN_GATEWAY_GRPC"])
    try:
        inputs = [triton_grpc.InferInput("A", [2, 4], "FP32"),
                  triton_grpc.InferInput("B", [2, 4], "FP32")]
        inputs[0].set_data_from_numpy(A)
        inputs[1].set_data_from_numpy(B)
        answer = client.infer("pipeline-grpc", inputs)
    finally:
        client.close()
    np.testing.assert_allclose(answer.as_numpy("OUT"), (A + B) * 10)


def test_an_ensemble_deploys_to_lambda(dev: dict[str, str]) -> None:
    modelfn(dev, "deploy", "pipeline-lambda", "--target", "local", "--lambda")
    gateway = dev["MODELFN_GATEWAY"].rstrip("/")
    body = {"inputs": [
        {"name": "A", "shape": [2, 4], "datatype": "FP32", "data": A.ravel().tolist()},
        {"name": "B", "shape": [2, 4], "datatype": "FP32", "data": B.ravel().tolist()}]}
    answer = httpx.post(f"{gateway}/v2/models/pipeline-lambda/infer", json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    (out,) = answer.json()["outputs"]
    np.testing.assert_allclose(np.asarray(out["data"]).reshape(2, 4), (A + B) * 10)
