"""The Lambda API paths the local platform answers itself (function URL configs per
qualifier, Invoke), called with plain boto3 at moto's endpoint; real processes behind."""

from __future__ import annotations

import io
import json
import os
import uuid
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from botocore.exceptions import ClientError

from modelfn.localstack.lambda_api import split_name

if TYPE_CHECKING:
    from modelfn.localstack.lambda_platform import LocalLambda

HANDLERS = Path(__file__).parent / "handlers"


@pytest.fixture
def function(lam: Any, role: str) -> str:
    """A Zip function holding tests/localstack/handlers/{echo,raises}.py."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for module in ("echo.py", "raises.py"):
            archive.write(HANDLERS / module, module)
    name = f"api-{uuid.uuid4().hex[:8]}"
    lam.create_function(FunctionName=name, Role=role, Runtime="python3.12",
                        Handler="echo.handler", Code={"ZipFile": buffer.getvalue()},
                        Environment={"Variables": {"MODELFN_TEST_VALUE": "v"}}, MemorySize=256)
    return name


def error_code(exc: pytest.ExceptionInfo[ClientError]) -> str:
    return str(exc.value.response["Error"]["Code"])


@pytest.mark.parametrize(("given", "expected"), [
    ("f", ("f", None)),
    ("f:live", ("f", "live")),
    ("123456789012:function:f:3", ("f", "3")),
    ("arn:aws:lambda:us-east-1:123456789012:function:f", ("f", None)),
    ("arn:aws:lambda:us-east-1:123456789012:function:f:live", ("f", "live")),
])
def test_function_names_and_arns(given: str, expected: tuple[str, str | None]) -> None:
    assert split_name(given) == expected


def test_url_configs_per_qualifier_lifecycle(lam: Any, function: str) -> None:
    version = lam.publish_version(FunctionName=function)["Version"]
    lam.create_alias(FunctionName=function, Name="live", FunctionVersion=version)
    latest = lam.create_function_url_config(FunctionName=function, AuthType="AWS_IAM")
    live = lam.create_function_url_config(FunctionName=function, Qualifier="live",
                                          AuthType="NONE", Cors={"AllowOrigins": ["*"]})
    assert latest["FunctionUrl"] != live["FunctionUrl"]
    assert live["FunctionArn"].endswith(f":function:{function}:live")
    assert latest["FunctionArn"].endswith(f":function:{function}")
    assert live["Cors"] == {"AllowOrigins": ["*"]}
    listed = lam.list_function_url_configs(FunctionName=function)["FunctionUrlConfigs"]
    assert sorted(c["FunctionUrl"] for c in listed) == sorted(
        [latest["FunctionUrl"], live["FunctionUrl"]])
    with pytest.raises(ClientError) as conflict:
        lam.create_function_url_config(FunctionName=function, AuthType="NONE")
    assert error_code(conflict) == "ResourceConflictException"
    with pytest.raises(ClientError) as pinned:
        lam.create_function_url_config(FunctionName=function, Qualifier=version,
                                       AuthType="NONE")
    assert error_code(pinned) == "InvalidParameterValueException"
    updated = lam.update_function_url_config(FunctionName=function, Qualifier="live",
                                             AuthType="AWS_IAM")
    assert updated["AuthType"] == "AWS_IAM"
    assert lam.get_function_url_config(FunctionName=function, Qualifier="live")[
        "AuthType"] == "AWS_IAM"
    lam.delete_function_url_config(FunctionName=function, Qualifier="live")
    with pytest.raises(ClientError) as missing:
        lam.get_function_url_config(FunctionName=function, Qualifier="live")
    assert error_code(missing) == "ResourceNotFoundException"
    with pytest.raises(httpx.ConnectError):
        httpx.get(live["FunctionUrl"])
    assert httpx.get(latest["FunctionUrl"]).status_code == 403  # still served, unsigned


def test_url_config_for_an_unknown_function_or_alias_is_404(lam: Any, function: str) -> None:
    with pytest.raises(ClientError) as unknown:
        lam.create_function_url_config(FunctionName="no-such-function", AuthType="NONE")
    assert error_code(unknown) == "ResourceNotFoundException"
    with pytest.raises(ClientError) as alias:
        lam.create_function_url_config(FunctionName=function, Qualifier="nope",
                                       AuthType="NONE")
    assert error_code(alias) == "ResourceNotFoundException"


def test_invoke_runs_on_the_platforms_environments(
    aws: LocalLambda, lam: Any, function: str
) -> None:
    answer = lam.invoke(FunctionName=function, Payload=b'{"x": 1}')
    assert answer["StatusCode"] == 200 and answer["ExecutedVersion"] == "$LATEST"
    body = json.loads(answer["Payload"].read())
    assert body["event"] == {"x": 1}
    assert body["env"]["AWS_LAMBDA_FUNCTION_NAME"] == function
    assert body["env"]["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"] == "256"
    assert body["env"]["MODELFN_TEST_VALUE"] == "v"
    assert body["function_arn"].endswith(f":function:{function}")
    version = lam.publish_version(FunctionName=function)["Version"]
    pinned = lam.invoke(FunctionName=f"{function}:{version}", Payload=b"{}")
    assert pinned["ExecutedVersion"] == version
    assert json.loads(pinned["Payload"].read())["env"]["AWS_LAMBDA_FUNCTION_VERSION"] == version
    assert lam.invoke(FunctionName=function, InvocationType="DryRun")["StatusCode"] == 204
    assert lam.invoke(FunctionName=function, InvocationType="Event")["StatusCode"] == 202
    assert aws.counts(function, "$LATEST").cold_starts >= 1
    assert aws.counts(function, version).invocations == 1


def test_invoke_reports_function_errors_and_unknown_functions(lam: Any, function: str) -> None:
    lam.update_function_configuration(FunctionName=function, Handler="raises.handler")
    failed = lam.invoke(FunctionName=function, Payload=b'{"value": 7}')
    assert failed["FunctionError"] == "Unhandled"
    assert json.loads(failed["Payload"].read())["errorMessage"] == "bad input: 7"
    with pytest.raises(ClientError) as unknown:
        lam.invoke(FunctionName="no-such-function", Payload=b"{}")
    assert error_code(unknown) == "ResourceNotFoundException"


def test_deleting_a_function_stops_its_urls_and_environments(
    aws: LocalLambda, lam: Any, function: str
) -> None:
    url = lam.create_function_url_config(FunctionName=function, AuthType="AWS_IAM")[
        "FunctionUrl"]
    lam.invoke(FunctionName=function, Payload=b"{}")
    pids = aws.pids(function)
    assert pids
    lam.delete_function(FunctionName=function)
    with pytest.raises(httpx.ConnectError):
        httpx.get(url)
    assert aws.pids(function) == []
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_no_reserved_concurrency_throttles_url_and_invoke(lam: Any, function: str) -> None:
    url = lam.create_function_url_config(FunctionName=function, AuthType="NONE")["FunctionUrl"]
    lam.add_permission(FunctionName=function, StatementId="url", Principal="*",
                       Action="lambda:InvokeFunctionUrl", FunctionUrlAuthType="NONE")
    lam.add_permission(FunctionName=function, StatementId="invoke", Principal="*",
                       Action="lambda:InvokeFunction", InvokedViaFunctionUrl=True)
    lam.put_function_concurrency(FunctionName=function, ReservedConcurrentExecutions=0)
    throttled = httpx.get(url)
    assert throttled.status_code == 429 and throttled.json() == {"Message": "Rate Exceeded."}
    with pytest.raises(ClientError) as refused:
        lam.invoke(FunctionName=function, Payload=b"{}")
    assert error_code(refused) == "TooManyRequestsException"
    assert refused.value.response["Reason"] == (
        "ReservedFunctionConcurrentInvocationLimitExceeded")
    lam.delete_function_concurrency(FunctionName=function)
    assert httpx.get(url).status_code == 200


def test_a_function_that_cannot_start_reports_its_own_error(
    lam: Any, role: str, tmp_path: Path
) -> None:
    name = f"broken-{uuid.uuid4().hex[:8]}"
    missing = tmp_path / "no-models-here"
    lam.create_function(FunctionName=name, Role=role, PackageType="Image",
                        Code={"ImageUri": "123456789012.dkr.ecr.us-east-1.amazonaws.com/x:1"},
                        Timeout=60, Environment={"Variables": {"MODELFN_REPOSITORY": str(missing)}})
    failed = lam.invoke(FunctionName=name, Payload=b"{}")
    assert failed["FunctionError"] == "Unhandled"
    error = json.loads(failed["Payload"].read())
    assert str(missing) in error["errorMessage"], error


def test_reserved_concurrency_spans_every_version_of_a_function(
    aws: LocalLambda, lam: Any, role: str, tmp_path: Path
) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.write(HANDLERS / "concurrency.py", "concurrency.py")
    name = f"reserved-{uuid.uuid4().hex[:8]}"
    busy = tmp_path / "busy"
    busy.mkdir()
    lam.create_function(FunctionName=name, Role=role, Runtime="python3.12",
                        Handler="concurrency.handler", Code={"ZipFile": buffer.getvalue()},
                        Environment={"Variables": {"BUSY_DIR": str(busy)}})
    one = lam.publish_version(FunctionName=name)["Version"]
    lam.update_function_configuration(FunctionName=name, Description="second",
                                      Environment={"Variables": {"BUSY_DIR": str(busy),
                                                                 "SECOND": "1"}})
    two = lam.publish_version(FunctionName=name)["Version"]
    lam.create_alias(FunctionName=name, Name="live", FunctionVersion=one,
                     RoutingConfig={"AdditionalVersionWeights": {two: 0.5}})
    lam.put_function_concurrency(FunctionName=name, ReservedConcurrentExecutions=2)

    def call(_: int) -> dict[str, Any]:
        answer = lam.invoke(FunctionName=name, Qualifier="live", Payload=b"{}")
        result: dict[str, Any] = json.loads(answer["Payload"].read())
        assert result["version"] == answer["ExecutedVersion"]
        return result

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(call, range(16)))
    assert max(r["running"] for r in results) <= 2
    assert {r["version"] for r in results} == {one, two}
    assert aws.counts(name).invocations == 16


@pytest.mark.parametrize(("name", "constraint"), [
    ("My_Model.v2", "regular expression pattern"),
    ("L" * 65, "length less than or equal to 64"),
    ("has space", "regular expression pattern"),
])
def test_function_names_lambda_does_not_take_are_a_validation_exception(
        lam: Any, role: str, name: str, constraint: str) -> None:
    """As AWS answers: a 400 ValidationException naming the constraint, for CreateFunction
    and for any call on such a function (moto would store a long name, and answer a dotted
    one with an HTML 404)."""
    with pytest.raises(ClientError) as create:
        lam.create_function(FunctionName=name, Role=role, Runtime="python3.12",
                            Handler="echo.handler", Code={"ZipFile": b"PK"})
    assert error_code(create) == "ValidationException"
    assert create.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert constraint in create.value.response["Error"]["Message"]
    for call in (lambda: lam.get_function(FunctionName=name),
                 lambda: lam.list_aliases(FunctionName=name),
                 lambda: lam.get_function_url_config(FunctionName=name, Qualifier="live")):
        with pytest.raises(ClientError) as read:
            call()
        assert error_code(read) == "ValidationException", read.value.response
    assert name not in [f["FunctionName"] for f in lam.list_functions()["Functions"]]


def test_a_64_character_name_and_arns_are_taken(lam: Any, role: str) -> None:
    name = "n" * 56 + uuid.uuid4().hex[:8]
    lam.create_function(FunctionName=name, Role=role, Runtime="python3.12",
                        Handler="echo.handler", Code={"ZipFile": _zip()})
    arn = lam.get_function(FunctionName=name)["Configuration"]["FunctionArn"]
    assert lam.get_function(FunctionName=arn)["Configuration"]["FunctionName"] == name
    lam.delete_function(FunctionName=name)


def _zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.write(HANDLERS / "echo.py", "echo.py")
    return buffer.getvalue()
