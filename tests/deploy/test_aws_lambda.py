"""The Lambda deploy target against the local platform's Lambda (moto's control plane run by
real awslambdaric environments): the whole call sequence with plain boto3 underneath, then
V2 answers at the function URLs. Only the AWS account is emulated."""

from __future__ import annotations

import json
import shutil
import uuid
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from modelfn.deploy.aws_lambda import LambdaOptions, LambdaTarget
from modelfn.deploy.deployment import Deployment
from modelfn.deploy.errors import DeployError
from modelfn.handlers.environment import FunctionEnvironment
from modelfn.platforms.aws_lambda import check_function_name
from modelfn.runtime.errors import InvalidInput

if TYPE_CHECKING:
    from collections.abc import Iterator

    from modelfn.localstack.lambda_platform import LocalLambda

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/digits@sha256:" + "cd" * 32
REQUEST = json.loads((EXAMPLES / "requests" / "digits.json").read_text())


@pytest.fixture(scope="module")
def aws() -> Iterator[LocalLambda]:
    from modelfn.localstack.lambda_platform import LocalLambda

    with LocalLambda(idle_s=60) as platform:
        yield platform


@pytest.fixture(scope="module")
def role(aws: LocalLambda) -> str:
    iam = aws.client("iam")
    trust = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action":
             "sts:AssumeRole", "Principal": {"Service": "lambda.amazonaws.com"}}]}
    return str(iam.create_role(RoleName=f"fn-{uuid.uuid4().hex[:6]}",
                               AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"])


def repository(root: Path, version: int) -> Path:
    repo = root / f"v{version}"
    (repo / "digits" / str(version)).mkdir(parents=True)
    shutil.copy(EXAMPLES / "models" / "digits" / "config.pbtxt", repo / "digits")
    shutil.copy(EXAMPLES / "models" / "digits" / "1" / "model.onnx",
                repo / "digits" / str(version) / "model.onnx")
    return repo


def deployment(model: str, version: int, repo: Path, traffic: dict[int, int] | None = None
               ) -> Deployment:
    env = FunctionEnvironment(repository=repo, models=[f"digits:{version}"])
    return Deployment(model, version, IMAGE, env, traffic=traffic or {version: 100})


def answer_version(url: str) -> str:
    answer = httpx.post(f"{url.rstrip('/')}/v2/models/digits/infer", json=REQUEST, timeout=60)
    assert answer.status_code == 200, answer.text
    return str(answer.json()["model_version"])


def test_deploy_canary_and_idempotence(aws: LocalLambda, role: str, tmp_path: Path) -> None:
    lam = aws.client("lambda")
    target = LambdaTarget(lam)
    model = f"digits-{uuid.uuid4().hex[:6]}"
    options = LambdaOptions(role=role, auth="none")
    first = target.apply(deployment(model, 1, repository(tmp_path, 1)), options)
    assert first.changed
    assert set(first.urls) == {"v1", "live"}
    assert answer_version(first.urls["v1"]) == "1"
    assert answer_version(first.live_url) == "1"

    same = target.apply(deployment(model, 1, tmp_path / "v1"), options)
    assert not same.changed  # deploying what runs changes nothing
    assert same.lambda_versions == first.lambda_versions

    canary = target.apply(deployment(model, 2, repository(tmp_path, 2), {1: 90, 2: 10}),
                          options)
    live = lam.get_alias(FunctionName=model, Name="live")
    assert live["FunctionVersion"] == canary.lambda_versions[1]
    assert live["RoutingConfig"]["AdditionalVersionWeights"] == {
        canary.lambda_versions[2]: 0.1}
    assert answer_version(canary.urls["v2"]) == "2"
    seen = Counter(answer_version(canary.live_url) for _ in range(60))
    assert seen["1"] > seen["2"]

    promoted = target.apply(deployment(model, 2, tmp_path / "v2", {1: 0, 2: 100}), options)
    live = lam.get_alias(FunctionName=model, Name="live")
    assert live["FunctionVersion"] == promoted.lambda_versions[2]
    assert not live.get("RoutingConfig", {}).get("AdditionalVersionWeights")


def test_iam_urls_refuse_unsigned_requests(aws: LocalLambda, role: str, tmp_path: Path) -> None:
    model = f"digits-{uuid.uuid4().hex[:6]}"
    result = LambdaTarget(aws.client("lambda")).apply(
        deployment(model, 1, repository(tmp_path, 1)), LambdaOptions(role=role))
    unsigned = httpx.post(f"{result.live_url.rstrip('/')}/v2/models/digits/infer", json=REQUEST)
    assert unsigned.status_code == 403


@pytest.mark.parametrize(("make", "message"), [
    (lambda: LambdaOptions(role="r", memory_mb=64), "memory must be 128 to 10240 MB"),
    (lambda: LambdaOptions(role="r", auth="key"), "--auth must be iam or none"),
])
def test_bad_options(make: Any, message: str) -> None:
    with pytest.raises(DeployError, match=message):
        make()


def test_a_split_needs_the_other_version_deployed(aws: LocalLambda, role: str,
                                                  tmp_path: Path) -> None:
    model = f"digits-{uuid.uuid4().hex[:6]}"
    lam = aws.client("lambda")
    with pytest.raises(DeployError, match="version 1 of .* is not deployed to Lambda"):
        LambdaTarget(lam).apply(
            deployment(model, 2, repository(tmp_path, 2), {1: 90, 2: 10}),
            LambdaOptions(role=role))
    assert model not in [f["FunctionName"] for f in lam.list_functions()["Functions"]]


def test_a_split_over_three_versions_is_refused_before_anything_changes(
        aws: LocalLambda, role: str, tmp_path: Path) -> None:
    """A Lambda alias splits between two versions: deploying a third with traffic while
    two serve must leave the function, its versions and aliases as they were."""
    lam = aws.client("lambda")
    target = LambdaTarget(lam)
    model = f"partial-{uuid.uuid4().hex[:6]}"
    options = LambdaOptions(role=role, auth="none")
    target.apply(deployment(model, 1, repository(tmp_path, 1)), options)
    target.apply(deployment(model, 2, repository(tmp_path, 2), {1: 70, 2: 30}), options)

    def state() -> tuple[Any, ...]:
        return (sorted(a["Name"] for a in lam.list_aliases(FunctionName=model)["Aliases"]),
                [v["Version"] for v in lam.list_versions_by_function(FunctionName=model)[
                    "Versions"]],
                lam.get_function_configuration(FunctionName=model)["Environment"],
                lam.get_alias(FunctionName=model, Name="live")["RoutingConfig"])

    before = state()
    three = deployment(model, 3, repository(tmp_path, 3), {1: 63, 2: 27, 3: 10})
    with pytest.raises(InvalidInput, match="2 versions at most"):
        target.apply(three, options)
    with pytest.raises(InvalidInput, match="2 versions at most"):
        target.calls(three, options)
    with pytest.raises(InvalidInput, match="2 versions at most"):
        target.set_split(model, {1: 50, 2: 25, 3: 25})
    assert state() == before


@pytest.mark.parametrize(("name", "why"), [
    ("My_Model.v2", "has '.'"), ("L" * 70, "is 70 characters, over Lambda's 64")])
def test_a_name_lambda_does_not_take_is_refused_before_any_call(name: str, why: str,
                                                                tmp_path: Path) -> None:
    untouchable = LambdaTarget(client=None)  # any call would fail on None
    with pytest.raises(InvalidInput, match=f"cannot be a Lambda function name: it {why}"):
        untouchable.apply(deployment(name, 1, tmp_path), LambdaOptions(role="r"))
    assert check_function_name("A-valid_name" + "x" * 52) == "A-valid_name" + "x" * 52


def test_dry_run_records_the_changing_calls_and_changes_nothing(
    aws: LocalLambda, role: str, tmp_path: Path
) -> None:
    name = f"dry{uuid.uuid4().hex[:6]}"
    lam = aws.client("lambda")
    calls = LambdaTarget(lam).calls(deployment(name, 1, repository(tmp_path, 1)),
                                    LambdaOptions(role=role, auth="none"))
    assert [c["call"] for c in calls] == [
        "create_function", "publish_version", "create_alias", "create_alias",
        "create_function_url_config", "add_permission", "add_permission",
        "create_function_url_config", "add_permission", "add_permission"]
    assert calls[0]["params"]["Code"] == {"ImageUri": IMAGE}
    assert calls[3]["params"]["Name"] == "live"
    assert name not in [f["FunctionName"] for f in lam.list_functions()["Functions"]]


def test_a_role_lambda_cannot_assume_is_role_missing(aws: LocalLambda, tmp_path: Path) -> None:
    from modelfn.deploy.errors import RoleMissing

    missing = "arn:aws:iam::123456789012:role/no-such-role"
    with pytest.raises(RoleMissing, match="--role must name an existing role"):
        LambdaTarget(aws.client("lambda")).apply(
            deployment(f"r{uuid.uuid4().hex[:6]}", 1, repository(tmp_path, 1)),
            LambdaOptions(role=missing))


def test_warm_puts_provisioned_concurrency_on_live() -> None:
    """A recorded contract, not an emulation: moto does not implement provisioned
    concurrency, so botocore's Stubber stands in for Lambda. It checks every call's
    parameters against Lambda's own service model and answers with the documented shapes
    (a missing config is ProvisionedConcurrencyConfigNotFoundException)."""
    import boto3
    from botocore.stub import Stubber

    lam = boto3.client("lambda", region_name="us-east-1", aws_access_key_id="x",
                       aws_secret_access_key="x")
    target = LambdaTarget(lam)
    where = {"FunctionName": "digits", "Qualifier": "live"}
    with Stubber(lam) as stub:
        stub.add_client_error("get_provisioned_concurrency_config",
                              "ProvisionedConcurrencyConfigNotFoundException",
                              "No Provisioned Concurrency Config found for this function",
                              404, expected_params=where)
        stub.add_response("put_provisioned_concurrency_config", {
            "RequestedProvisionedConcurrentExecutions": 3, "Status": "IN_PROGRESS"},
            {**where, "ProvisionedConcurrentExecutions": 3})
        assert target.warm("digits", 3) is True
        stub.add_response("get_provisioned_concurrency_config", {
            "RequestedProvisionedConcurrentExecutions": 3,
            "AvailableProvisionedConcurrentExecutions": 3, "Status": "READY"}, where)
        assert target.warm("digits", 3) is False  # already so: no call
        stub.add_response("get_provisioned_concurrency_config", {
            "RequestedProvisionedConcurrentExecutions": 3, "Status": "READY"}, where)
        stub.add_response("delete_provisioned_concurrency_config", {}, where)
        assert target.warm("digits", 0) is True
        stub.assert_no_pending_responses()
