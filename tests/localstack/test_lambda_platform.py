"""The local Lambda end to end: functions created with plain boto3 at moto's endpoint,
executed by real ``awslambdaric`` processes, called at their function URLs with
tritonclient, httpx and SigV4-signed requests. Only the AWS account is emulated."""

from __future__ import annotations

import os
import shutil
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np
import orjson
import pytest
import tritonclient.http as triton
from botocore.auth import SigV4Auth, SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

if TYPE_CHECKING:
    from modelfn.localstack.lambda_platform import LocalLambda

DIGITS = Path(__file__).parents[2] / "examples" / "models" / "digits"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/digits@sha256:" + "ab" * 32


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def digits_repo(root: Path, version: int = 1) -> Path:
    """A copy of examples/models/digits whose only version is ``version``."""
    repo = root / f"models-v{version}"
    (repo / "digits" / str(version)).mkdir(parents=True)
    shutil.copy(DIGITS / "config.pbtxt", repo / "digits" / "config.pbtxt")
    shutil.copy(DIGITS / "1" / "model.onnx", repo / "digits" / str(version) / "model.onnx")
    return repo


def create_digits(lam: Any, role: str, function: str, repo: Path) -> None:
    lam.create_function(
        FunctionName=function, Role=role, PackageType="Image", Code={"ImageUri": IMAGE},
        Timeout=60, MemorySize=2048,
        Environment={"Variables": {"MODELFN_REPOSITORY": str(repo)}},
    )
    lam.get_waiter("function_active_v2").wait(FunctionName=function)


def make_public(lam: Any, function: str, qualifier: str | None = None) -> None:
    """The two statements a NONE function URL needs since October 2025."""
    where = {} if qualifier is None else {"Qualifier": qualifier}
    lam.add_permission(FunctionName=function, StatementId="url", Principal="*",
                       Action="lambda:InvokeFunctionUrl", FunctionUrlAuthType="NONE", **where)
    lam.add_permission(FunctionName=function, StatementId="invoke", Principal="*",
                       Action="lambda:InvokeFunction", InvokedViaFunctionUrl=True, **where)


def public_url(lam: Any, function: str, qualifier: str | None = None) -> str:
    where = {} if qualifier is None else {"Qualifier": qualifier}
    url = lam.create_function_url_config(FunctionName=function, AuthType="NONE", **where)
    make_public(lam, function, qualifier)
    return str(url["FunctionUrl"])


def infer_body(rows: int = 1) -> bytes:
    data = np.random.default_rng(rows).random((rows, 64), dtype=np.float32)
    tensor = {"name": "input", "shape": [rows, 64], "datatype": "FP32",
              "data": data.ravel().tolist()}
    return orjson.dumps({"inputs": [tensor]})


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


# --- V2 at a function URL ----------------------------------------------------------------


@pytest.fixture(scope="module")
def digits_url(aws: LocalLambda, lam: Any, role: str, tmp_path_factory: pytest.TempPathFactory
               ) -> tuple[str, str]:
    function = name("digits")
    create_digits(lam, role, function, digits_repo(tmp_path_factory.mktemp("digits")))
    return function, public_url(lam, function)


def test_function_url_config_is_a_loopback_url(digits_url: tuple[str, str], lam: Any,
                                                aws: LocalLambda) -> None:
    function, url = digits_url
    config = lam.get_function_url_config(FunctionName=function)
    assert config["FunctionUrl"] == url == aws.function_url(function)
    assert config["AuthType"] == "NONE"
    assert url.startswith("http://127.0.0.1:")


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_v2_through_awslambdaric_with_tritonclient(
    digits_url: tuple[str, str], binary: bool
) -> None:
    client = triton.InferenceServerClient(digits_url[1].removeprefix("http://").rstrip("/"))
    try:
        assert client.is_server_ready() and client.is_model_ready("digits")
        batch = np.random.default_rng(3).random((3, 64), dtype=np.float32)
        tensor = triton.InferInput("input", [3, 64], "FP32")
        tensor.set_data_from_numpy(batch, binary_data=binary)
        result = client.infer("digits", [tensor], outputs=[
            triton.InferRequestedOutput("probabilities", binary_data=binary),
            triton.InferRequestedOutput("label", binary_data=binary)])
        probabilities = result.as_numpy("probabilities")
        assert probabilities.shape == (3, 10)
        np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-4)
        labels = result.as_numpy("label").ravel()
        np.testing.assert_array_equal(labels, probabilities.argmax(axis=1))
    finally:
        client.close()


def test_environments_are_counted_and_warm_ones_reused(
    digits_url: tuple[str, str], aws: LocalLambda
) -> None:
    function, url = digits_url
    before = aws.counts(function)
    for _ in range(3):
        assert httpx.post(f"{url}v2/models/digits/infer", content=infer_body(),
                          timeout=60).status_code == 200
    after = aws.counts(function)
    assert after.invocations == before.invocations + 3
    assert after.cold_starts - before.cold_starts <= 1  # at most one, if the last was reaped


def test_concurrent_requests_start_environments_up_to_reserved_concurrency(
    aws: LocalLambda, lam: Any, role: str, tmp_path: Path
) -> None:
    function = name("digits-burst")
    create_digits(lam, role, function, digits_repo(tmp_path))
    lam.put_function_concurrency(FunctionName=function, ReservedConcurrentExecutions=4)
    url = public_url(lam, function)

    def call(_: int) -> int:
        response = httpx.post(f"{url}v2/models/digits/infer", content=infer_body(2), timeout=120)
        return response.status_code

    with ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(call, range(8)))
    assert statuses == [200] * 8
    counts = aws.counts(function)
    assert counts.invocations == 8
    assert 2 <= counts.cold_starts <= 4  # several environments, never past the reservation
    assert aws.status()["functions"][function]["$LATEST"]["cold_starts"] == counts.cold_starts


def test_alias_weights_split_traffic_between_versions(
    aws: LocalLambda, lam: Any, role: str, tmp_path: Path
) -> None:
    function = name("digits-canary")
    create_digits(lam, role, function, digits_repo(tmp_path, 1))
    one = lam.publish_version(FunctionName=function)["Version"]
    variables = {"MODELFN_REPOSITORY": str(digits_repo(tmp_path, 2))}
    lam.update_function_configuration(FunctionName=function,
                                      Environment={"Variables": variables})
    lam.get_waiter("function_updated_v2").wait(FunctionName=function)
    two = lam.publish_version(FunctionName=function)["Version"]
    lam.create_alias(FunctionName=function, Name="live", FunctionVersion=one,
                     RoutingConfig={"AdditionalVersionWeights": {two: 0.5}})
    lam.create_alias(FunctionName=function, Name="v1", FunctionVersion=one)
    live, pinned = public_url(lam, function, "live"), public_url(lam, function, "v1")

    def answered_by(url: str) -> str:
        response = httpx.post(f"{url}v2/models/digits/infer", content=infer_body(), timeout=60)
        assert response.status_code == 200, response.text
        return str(response.json()["model_version"])

    n = 200
    answers = [answered_by(live) for _ in range(n)]
    assert set(answers) == {"1", "2"}
    # Binomial(200, 0.5): mean 100, sd ~7; 60..140 is more than five sd either way
    assert 60 <= answers.count("2") <= 140
    assert {answered_by(pinned) for _ in range(10)} == {"1"}
    assert aws.counts(function, "1").invocations + aws.counts(function, "2").invocations >= n


def test_idle_environments_are_reaped_and_their_processes_gone(
    digits_url: tuple[str, str], aws: LocalLambda
) -> None:
    function, url = digits_url
    assert httpx.get(f"{url}v2/health/ready", timeout=60).status_code == 200
    pids = aws.pids(function)
    assert pids and aws.counts(function).environments >= 1
    deadline = time.monotonic() + 60

    def temp_dirs() -> list[str]:  # each environment's TMPDIR, under the platform's state
        return [p.name for p in (aws.state_dir / "tmp").iterdir() if function in p.name]

    assert temp_dirs()

    def reaped() -> bool:  # counted out first, then killed: wait for both
        return aws.counts(function).environments == 0 and all(gone(pid) for pid in pids) \
            and not temp_dirs()

    while not reaped() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert aws.counts(function).environments == 0
    assert all(gone(pid) for pid in pids)
    assert temp_dirs() == []
    # the next request starts a fresh environment
    cold = aws.counts(function).cold_starts
    assert httpx.get(f"{url}v2/health/ready", timeout=60).status_code == 200
    assert aws.counts(function).cold_starts == cold + 1


# --- auth --------------------------------------------------------------------------------


@pytest.fixture
def echo(lam: Any, role: str, echo_zip: bytes) -> str:
    function = name("echo")
    lam.create_function(FunctionName=function, Role=role, Runtime="python3.12",
                        Handler="echo.mirror", Code={"ZipFile": echo_zip}, Timeout=30)
    return function


def test_none_url_needs_both_resource_policy_permissions(lam: Any, echo: str) -> None:
    url = lam.create_function_url_config(FunctionName=echo, AuthType="NONE")["FunctionUrl"]
    refused = httpx.post(url, content=b"hello")
    assert refused.status_code == 403 and refused.json() == {"Message": "Forbidden"}
    lam.add_permission(FunctionName=echo, StatementId="url", Principal="*",
                       Action="lambda:InvokeFunctionUrl", FunctionUrlAuthType="NONE")
    assert httpx.post(url, content=b"hello").status_code == 403  # since Oct 2025: both
    lam.add_permission(FunctionName=echo, StatementId="invoke", Principal="*",
                       Action="lambda:InvokeFunction", InvokedViaFunctionUrl=True)
    answered = httpx.post(url, content=b"hello", headers={"content-type": "text/plain"})
    assert answered.status_code == 201 and answered.text == "hello"
    lam.remove_permission(FunctionName=echo, StatementId="url")
    assert httpx.post(url, content=b"hello").status_code == 403


def signed(url: str, body: bytes, key: str, secret: str, region: str = "us-east-1"
           ) -> AWSRequest:
    request = AWSRequest(method="POST", url=url, data=body,
                         headers={"content-type": "application/octet-stream"})
    SigV4Auth(Credentials(key, secret), "lambda", region).add_auth(request)
    return request


def send(request: AWSRequest) -> httpx.Response:
    return httpx.request(request.method, request.url, headers=dict(request.headers.items()),
                         content=request.body)


def test_aws_iam_url_verifies_sigv4(aws: LocalLambda, lam: Any, echo: str) -> None:
    url = lam.create_function_url_config(FunctionName=echo, AuthType="AWS_IAM")["FunctionUrl"]
    target = f"{url}v2/models/digits/infer?x=1&a=b%20c"
    body = bytes(range(256))
    unsigned = httpx.post(target, content=body)
    assert unsigned.status_code == 403 and unsigned.json() == {"Message": "Forbidden"}
    assert send(signed(target, body, "testing", "wrong")).status_code == 403
    assert send(signed(target, body, "unknown", "testing")).status_code == 403
    assert send(signed(target, body, "testing", "testing", "eu-west-1")).status_code == 403
    tampered = signed(target, body, "testing", "testing")
    tampered.data = body[::-1]
    assert send(tampered).status_code == 403
    good = send(signed(target, body, "testing", "testing"))
    assert good.status_code == 201 and good.content == body
    # an IAM user's access key, created through the same endpoint, is known too
    iam = aws.client("iam")
    user = name("caller")
    iam.create_user(UserName=user)
    key = iam.create_access_key(UserName=user)["AccessKey"]
    answered = send(signed(target, body, key["AccessKeyId"], key["SecretAccessKey"]))
    assert answered.status_code == 201


def test_aws_iam_url_refuses_an_unsigned_payload(lam: Any, echo: str) -> None:
    """Signed S3-style with ``X-Amz-Content-SHA256: UNSIGNED-PAYLOAD`` (botocore signs the
    declaration instead of the body): Lambda refuses it, else any body would pass."""
    url = lam.create_function_url_config(FunctionName=echo, AuthType="AWS_IAM")["FunctionUrl"]
    body = b'{"inputs": []}'
    request = AWSRequest(method="POST", url=url, data=body,
                         headers={"X-Amz-Content-SHA256": "UNSIGNED-PAYLOAD"})
    SigV4Auth(Credentials("testing", "testing"), "lambda", "us-east-1").add_auth(request)
    for sent in (body, b"any other body"):
        refused = httpx.post(url, content=sent, headers=dict(request.headers.items()))
        assert refused.status_code == 403, refused.text
        assert refused.headers["x-amzn-errortype"] == "SignatureDoesNotMatch"
        assert refused.json()["Message"].startswith("The request signature we calculated")
    # presigned in the query string: refused too
    presigned = AWSRequest(method="POST", url=url, data=body)
    SigV4QueryAuth(Credentials("testing", "testing"), "lambda", "us-east-1",
                   expires=60).add_auth(presigned)
    assert httpx.post(presigned.url, content=body).status_code == 403
    # the same body signed over its hash (no X-Amz-Content-SHA256 header) passes
    answered = send(signed(url, body, "testing", "testing"))
    assert answered.status_code == 201 and answered.content == body


# --- the store on the same endpoint, and stopping ----------------------------------------


def test_a_function_checks_its_model_out_of_the_store_on_the_same_endpoint(
    aws: LocalLambda, lam: Any, role: str, tmp_path: Path
) -> None:
    from modelfn.model_store import open_store

    bucket = name("models")
    aws.emulator.create_bucket(bucket)
    store = f"s3://{bucket}/models"
    open_store(store, s3_client=aws.emulator.client()).push(digits_repo(tmp_path) / "digits")
    function = name("digits-store")
    lam.create_function(
        FunctionName=function, Role=role, PackageType="Image", Code={"ImageUri": IMAGE},
        Timeout=60, MemorySize=2048,
        Environment={"Variables": {
            "MODELFN_STORE": store, "MODELFN_MODELS": "digits",
            "MODELFN_CACHE": str(tmp_path / "cache"), "AWS_ENDPOINT_URL": aws.endpoint_url,
            "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
        }},
    )
    aws.emulator.clear_requests()
    url = public_url(lam, function)
    response = httpx.post(f"{url}v2/models/digits/infer", content=infer_body(), timeout=60)
    assert response.status_code == 200, response.text
    assert response.json()["model_version"] == "1"
    assert aws.emulator.count("GetObject", key_suffix="model.onnx") == 1


def test_stopping_the_platform_leaves_no_process(
    lam: Any, role: str, echo_zip: bytes, tmp_path: Path
) -> None:
    from modelfn.localstack.lambda_platform import LocalLambda

    function = name("echo-stop")
    with LocalLambda(tmp_path / "state", idle_s=60) as other:
        client = other.client("lambda")
        client.create_function(FunctionName=function, Role=role, Runtime="python3.12",
                               Handler="echo.handler", Code={"ZipFile": echo_zip})
        url = client.create_function_url_config(FunctionName=function, AuthType="NONE")[
            "FunctionUrl"]
        assert client.invoke(FunctionName=function, Payload=b"{}")["StatusCode"] == 200
        pids = other.pids(function)
        assert len(pids) == 1
    assert all(gone(pid) for pid in pids)
    with pytest.raises(httpx.ConnectError):
        httpx.get(url)
