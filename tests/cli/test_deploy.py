"""`modelfn deploy` and `modelfn status` from the CLI: to Lambda at the local platform's AWS
endpoint (moto's control plane, awslambdaric environments), and the rendered objects of
--dry-run. The AWS account is emulated; everything else is real."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
import yaml
from click.testing import CliRunner

from modelfn.cli.main import cli

if TYPE_CHECKING:
    from collections.abc import Iterator

    from modelfn.localstack.lambda_platform import LocalLambda

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
REQUEST = json.loads((EXAMPLES / "requests" / "digits.json").read_text())
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/digits@sha256:" + "ef" * 32


@pytest.fixture(scope="module")
def aws() -> Iterator[LocalLambda]:
    from modelfn.localstack.lambda_platform import LocalLambda

    with LocalLambda(idle_s=60) as platform:
        platform.emulator.create_bucket("deploys")
        yield platform


@pytest.fixture
def env(aws: LocalLambda, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    values = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
              "AWS_DEFAULT_REGION": "us-east-1", "MODELFN_S3_ENDPOINT": aws.endpoint_url,
              "MODELFN_CACHE": str(tmp_path / "cache")}
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    return values


def run(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def push(store: str, name: str) -> None:
    model = Path(os.environ["MODELFN_CACHE"]).parent / "src" / name
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(
        (EXAMPLES / "models" / "digits" / "config.pbtxt").read_text().replace(
            'name: "digits"', f'name: "{name}"'))
    (model / "1" / "model.onnx").write_bytes(
        (EXAMPLES / "models" / "digits" / "1" / "model.onnx").read_bytes())
    run("push", str(model), "--store", store)


def test_deploy_to_lambda_answers_v2_and_writes_the_routing_table(
    aws: LocalLambda, env: dict[str, str]
) -> None:
    name = f"digits{uuid.uuid4().hex[:6]}"
    store = f"s3://deploys/{name}"
    push(store, name)
    role = aws.client("iam").create_role(RoleName=f"r-{name}", AssumeRolePolicyDocument="{}")[
        "Role"]["Arn"]
    out = run("deploy", f"{name}:1", "--target", "lambda", "--image", IMAGE, "--store", store,
              "--role", role, "--endpoint-url", aws.endpoint_url, "--auth", "none")
    url = out.strip().splitlines()[-1]
    answer = httpx.post(f"{url.rstrip('/')}/v2/models/{name}/infer", json=REQUEST, timeout=60)
    assert answer.status_code == 200, answer.text
    assert answer.json()["model_version"] == "1"
    status = json.loads(run("status", name, "--target", "lambda", "--store", store,
                            "--endpoint-url", aws.endpoint_url, "--output", "json"))
    assert status["target"] == "lambda"
    assert status["url"] == url
    assert status["split"] == {"1": 100}
    assert status["versions"]["1"]["concurrency"] == 1  # the gateway batches Lambda routes
    assert status["ready"] is True
    again = CliRunner().invoke(cli, ["deploy", f"{name}:1", "--target", "lambda", "--image",
                                     IMAGE, "--store", store, "--role", role, "--endpoint-url",
                                     aws.endpoint_url, "--auth", "none"])
    assert again.exit_code == 0, again.output
    assert "unchanged" in again.stderr


def test_dry_run_prints_only_the_knative_service(env: dict[str, str], aws: LocalLambda) -> None:
    name = f"digits{uuid.uuid4().hex[:6]}"
    store = f"s3://deploys/{name}"
    push(store, name)
    out = run("deploy", name, "--target", "knative", "--image", IMAGE, "--store", store,
              "--dry-run", "--namespace", "ml", "--min-scale", "1", "--busy-poll-us", "100")
    service = yaml.safe_load(out)
    assert service["kind"] == "Service"
    assert service["metadata"] == {"name": name, "namespace": "ml", "labels": {
        "app.kubernetes.io/managed-by": "modelfn", "modelfn.dev/model": name}}
    assert service["spec"]["template"]["spec"]["containerConcurrency"] == 128  # 2 x 64 rows
    container = service["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "MODELFN_BUSY_POLL_US", "value": "100"} in container["env"]


def test_cloudrun_renders_and_says_how_to_apply(env: dict[str, str], aws: LocalLambda) -> None:
    name = f"digits{uuid.uuid4().hex[:6]}"
    store = f"s3://deploys/{name}"
    push(store, name)
    result = CliRunner().invoke(cli, ["deploy", name, "--target", "cloudrun", "--image", IMAGE,
                                      "--store", store, "--region", "europe-west4"])
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(result.stdout)["metadata"]["labels"][
        "cloud.googleapis.com/location"] == "europe-west4"
    assert "gcloud run services replace" in result.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["--target", "lambda", "--image", IMAGE], "--target lambda needs --role"),
    (["--target", "knative"], "--target knative needs --image"),
])
def test_missing_options_are_clear(env: dict[str, str], aws: LocalLambda, args: list[str],
                                   message: str) -> None:
    name = f"digits{uuid.uuid4().hex[:6]}"
    store = f"s3://deploys/{name}"
    push(store, name)
    result = CliRunner().invoke(cli, ["deploy", name, "--store", store, *args])
    assert result.exit_code != 0
    assert message in result.stderr


def test_dry_run_with_a_registry_names_the_image_it_would_build(
    env: dict[str, str], aws: LocalLambda
) -> None:
    name = f"digits{uuid.uuid4().hex[:6]}"
    store = f"s3://deploys/{name}"
    push(store, name)
    result = CliRunner().invoke(cli, ["deploy", name, "--target", "knative", "--store", store,
                                      "--registry", "registry.example:5000", "--dry-run"])
    assert result.exit_code == 0, result.output
    service = yaml.safe_load(result.stdout)
    image = service["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == f"registry.example:5000/modelfn/{name}:1-http"
    assert "deployed by digest" in result.stderr


def test_image_and_registry_together_are_refused(env: dict[str, str], aws: LocalLambda) -> None:
    result = CliRunner().invoke(cli, ["deploy", "digits", "--target", "knative", "--store",
                                      "s3://deploys/x", "--image", IMAGE, "--registry", "r:5"])
    assert result.exit_code == 2
    assert "not both" in result.stderr


def test_grpc_is_refused_where_http2_cannot_reach_the_function(
    env: dict[str, str], aws: LocalLambda
) -> None:
    result = CliRunner().invoke(cli, ["deploy", "digits", "--store", "s3://deploys/x",
                                      "--protocol", "grpc", "--target", "lambda", "--image",
                                      IMAGE, "--role", "r"])
    assert result.exit_code == 2
    assert "--protocol grpc needs HTTP/2 end to end" in result.stderr


def test_busy_polling_under_a_cpu_limit_is_warned_about(env: dict[str, str],
                                                       aws: LocalLambda) -> None:
    name = f"digits{uuid.uuid4().hex[:6]}"
    store = f"s3://deploys/{name}"
    push(store, name)
    result = CliRunner().invoke(cli, ["deploy", name, "--target", "knative", "--image", IMAGE,
                                      "--store", store, "--dry-run", "--cpu", "1",
                                      "--busy-poll-us", "100"])
    assert result.exit_code == 0, result.output
    assert "note: --cpu 1 is enforced as a CPU quota" in result.stderr
    assert "polling 100 µs after each request spends that quota" in result.stderr
    container = yaml.safe_load(result.stdout)["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["cpu"] == "1"


def test_busy_polling_is_refused_on_lambda_and_for_grpc(env: dict[str, str],
                                                        aws: LocalLambda) -> None:
    result = CliRunner().invoke(cli, ["deploy", "digits", "--store", "s3://deploys/x",
                                      "--busy-poll-us", "100", "--target", "lambda", "--image",
                                      IMAGE, "--role", "r"])
    assert result.exit_code == 2, result.output
    assert "a Lambda function takes its invocations from the runtime API" in result.stderr
    grpc = CliRunner().invoke(cli, ["deploy", "digits", "--store", "s3://deploys/x",
                                    "--busy-poll-us", "100", "--protocol", "grpc", "--target",
                                    "knative", "--image", IMAGE, "--dry-run"])
    assert grpc.exit_code == 2, grpc.output
    assert "a function that serves gRPC alone takes its requests through" in grpc.stderr
