"""`modelfn deploy` and `modelfn status` from the CLI: to Lambda at the local platform's AWS
endpoint (moto's control plane, awslambdaric environments), and the rendered objects of
--dry-run. The AWS account is emulated; everything else is real."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

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


def push(store: str, name: str, version: int = 1, max_batch_size: int = 64) -> None:
    model = Path(os.environ["MODELFN_CACHE"]).parent / "src" / f"{name}-{version}" / name
    (model / str(version)).mkdir(parents=True)
    (model / "config.pbtxt").write_text(
        (EXAMPLES / "models" / "digits" / "config.pbtxt").read_text().replace(
            'name: "digits"', f'name: "{name}"').replace(
            "max_batch_size: 64", f"max_batch_size: {max_batch_size}"))
    (model / str(version) / "model.onnx").write_bytes(
        (EXAMPLES / "models" / "digits" / "1" / "model.onnx").read_bytes())
    run("push", str(model), "--store", store, "--version", str(version))


def file_store(name: str) -> str:
    """A filesystem store: what renders for Cloud Run, which refuses the emulated S3 at
    its loopback endpoint (it cannot reach it)."""
    return (Path(os.environ["MODELFN_CACHE"]).parent / "stores" / name).as_uri()


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
        "app.kubernetes.io/managed-by": "modelfn", "modelfn.dev/model": name},
        "annotations": {"modelfn.dev/model": name}}
    assert service["spec"]["template"]["spec"]["containerConcurrency"] == 128  # 2 x 64 rows
    container = service["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "MODELFN_BUSY_POLL_US", "value": "100"} in container["env"]


def test_cloudrun_renders_and_says_how_to_apply(env: dict[str, str], aws: LocalLambda) -> None:
    name = f"digits{uuid.uuid4().hex[:6]}"
    store = file_store(name)  # Cloud Run cannot reach the emulated S3
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


def deploy(*args: str) -> Any:
    return CliRunner().invoke(cli, ["deploy", *args])


def test_container_concurrency_stops_at_1000(env: dict[str, str], aws: LocalLambda) -> None:
    name = f"big{uuid.uuid4().hex[:6]}"
    store = file_store(name)  # Cloud Run cannot reach the emulated S3
    push(store, name, max_batch_size=512)  # 2 x 512 in flight would be 1024
    for target in (["--target", "knative"], ["--target", "cloudrun", "--region", "us-central1"]):
        result = deploy(name, *target, "--image", IMAGE, "--store", store, "--dry-run")
        assert result.exit_code == 0, result.output
        template = yaml.safe_load(result.stdout)["spec"]["template"]
        assert template["spec"]["containerConcurrency"] == 1000
    result = deploy(name, "--target", "knative", "--image", IMAGE, "--store", store,
                    "--dry-run")
    annotations = yaml.safe_load(result.stdout)["spec"]["template"]["metadata"]["annotations"]
    assert annotations["autoscaling.knative.dev/target"] == "512"
    for value in ("100000", "0", "1001"):
        refused = deploy(name, "--target", "knative", "--image", IMAGE, "--store", store,
                         "--concurrency", value, "--dry-run")
        assert refused.exit_code == 2 and refused.stdout == ""
        assert "'--concurrency'" in refused.stderr and "1<=x<=1000" in refused.stderr
    ok = deploy(name, "--target", "knative", "--image", IMAGE, "--store", store,
                "--concurrency", "1000", "--dry-run")
    assert yaml.safe_load(ok.stdout)["spec"]["template"]["spec"]["containerConcurrency"] == 1000


@pytest.mark.parametrize(("image", "message"), [
    ("", "--image is empty"),
    ("not an image", "'not an image' is not an OCI image reference"),
    ("Reg.example.com/Digits:LATEST", "the repository path must be lower case"),
])
@pytest.mark.parametrize("target", [["--target", "knative"], ["--target", "lambda", "--role",
                                                                 "r"]])
def test_an_image_that_is_no_reference_is_refused_before_anything(
        env: dict[str, str], aws: LocalLambda, image: str, message: str,
        target: list[str]) -> None:
    result = deploy("digits", *target, "--image", image, "--store", "s3://deploys/nothing",
                    "--dry-run")
    assert result.exit_code == 2, result.output
    assert message in result.stderr and result.stdout == ""


def test_a_model_name_too_long_for_knative_names_gets_a_shortened_service(
        env: dict[str, str], aws: LocalLambda) -> None:
    """62 characters: too long for a revision name; the Service is named by its first 32
    and a hash of the whole name, and the function serves the model by its own name."""
    name = "m" * 62
    store = file_store(f"long{uuid.uuid4().hex[:6]}")  # Cloud Run: not the emulated S3
    push(store, name)
    for target in (["--target", "knative"], ["--target", "cloudrun", "--region", "r"]):
        result = deploy(name, *target, "--image", IMAGE, "--store", store, "--dry-run")
        assert result.exit_code == 0, result.output
        service = yaml.safe_load(result.stdout)
        short = service["metadata"]["name"]
        assert short.startswith("m" * 32 + "-") and len(short) == 40
        template = service["spec"]["template"]
        assert template["metadata"]["name"].startswith(f"{short}-v1-")
        assert {"name": "MODELFN_MODELS", "value": f"{name}:1"} in template["spec"][
            "containers"][0]["env"]


def test_cloudrun_takes_its_own_timeout_project_and_gpu_minimums(
        env: dict[str, str], aws: LocalLambda) -> None:
    name = f"cr{uuid.uuid4().hex[:6]}"
    store = file_store(name)  # Cloud Run cannot reach the emulated S3
    push(store, name)
    cloudrun = ["--target", "cloudrun", "--region", "us-central1", "--image", IMAGE, "--store",
                store]
    long = deploy(name, *cloudrun, "--namespace", "my-proj", "--timeout", "900")
    assert long.exit_code == 0, long.output
    service = yaml.safe_load(long.stdout)
    assert service["spec"]["template"]["spec"]["timeoutSeconds"] == 900
    assert service["metadata"]["namespace"] == "my-proj"
    assert deploy(name, *cloudrun, "--timeout", "3601").exit_code == 2
    knative = deploy(name, "--target", "knative", "--image", IMAGE, "--store", store,
                     "--timeout", "900", "--dry-run")
    assert knative.exit_code != 0 and "timeoutSeconds" in knative.stderr

    unnamed = deploy(name, *cloudrun)
    assert "namespace" not in yaml.safe_load(unnamed.stdout)["metadata"]

    gpu = deploy(name, *cloudrun, "--gpu", "1")
    assert gpu.exit_code == 0, gpu.output
    template = yaml.safe_load(gpu.stdout)["spec"]["template"]
    assert template["spec"]["containers"][0]["resources"]["limits"] == {
        "cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}
    assert template["spec"]["nodeSelector"] == {"run.googleapis.com/accelerator": "nvidia-l4"}
    for args, message in ((["--gpu", "2"], "1 GPU (nvidia-l4) at most"),
                          (["--gpu", "1", "--cpu", "2"], "at least --cpu 4 and --memory 16Gi")):
        refused = deploy(name, *cloudrun, *args)
        assert refused.exit_code == 2 and message in refused.stderr and refused.stdout == ""


@pytest.mark.parametrize("name", ["My_Model.v2", "L" * 70])
def test_a_model_name_lambda_does_not_take_is_refused_before_any_call(
        env: dict[str, str], aws: LocalLambda, name: str) -> None:
    store = f"s3://deploys/fn{uuid.uuid4().hex[:6]}"
    push(store, name)
    for extra in ([], ["--dry-run"]):
        result = deploy(name, "--target", "lambda", "--image", IMAGE, "--store", store,
                        "--role", "arn:aws:iam::123456789012:role/r", "--endpoint-url",
                        aws.endpoint_url, *extra)
        assert result.exit_code == 2, result.output
        assert "cannot be a Lambda function name" in result.stderr
        assert "<html" not in result.stderr.lower() and result.stdout == ""


def test_a_lambda_split_over_three_versions_is_refused_before_any_call(
        env: dict[str, str], aws: LocalLambda) -> None:
    name = f"partial{uuid.uuid4().hex[:6]}"
    store = f"s3://deploys/{name}"
    for version in (1, 2, 3):
        push(store, name, version)
    role = aws.client("iam").create_role(RoleName=f"r-{name}", AssumeRolePolicyDocument="{}")[
        "Role"]["Arn"]
    lam = ["--target", "lambda", "--image", IMAGE, "--store", store, "--role", role,
           "--endpoint-url", aws.endpoint_url, "--auth", "none"]
    run("deploy", f"{name}:1", *lam)
    run("deploy", f"{name}:2", *lam, "--traffic", "30")
    client = aws.client("lambda")
    versions = client.list_versions_by_function(FunctionName=name)["Versions"]
    for extra in (["--dry-run"], []):
        result = deploy(f"{name}:3", *lam, "--traffic", "10", *extra)
        assert result.exit_code == 2, result.output
        assert "2 versions at most" in result.stderr and "1=63 2=27 3=10" in result.stderr
        assert result.stdout == ""
    assert client.list_versions_by_function(FunctionName=name)["Versions"] == versions
    assert sorted(a["Name"] for a in client.list_aliases(FunctionName=name)["Aliases"]) == [
        "live", "v1", "v2"]
    assert client.get_function_configuration(FunctionName=name)["Environment"]["Variables"][
        "MODELFN_MODELS"] == f"{name}:2"
