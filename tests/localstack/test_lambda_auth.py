"""SigV4 verification and resource-policy evaluation for function URLs, without a server:
requests signed by botocore exactly as a client signs them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from modelfn.localstack.function_url import HttpRequest
from modelfn.localstack.lambda_auth import public_access_allowed, verify_sigv4

ARN = "arn:aws:lambda:us-east-1:123456789012:function:digits"
SECRETS = {"AKIDEXAMPLE": "secret"}
URL = "http://127.0.0.1:4567/v2/models/digits/infer?b=2&a=1"


def sign(body: bytes = b"{}", key: str = "AKIDEXAMPLE", secret: str = "secret",
         service: str = "lambda", token: str | None = None) -> HttpRequest:
    request = AWSRequest(method="POST", url=URL, data=body,
                         headers={"content-type": "application/json"})
    SigV4Auth(Credentials(key, secret, token), service, "us-east-1").add_auth(request)
    headers = [(k.lower(), str(v)) for k, v in request.headers.items()]
    headers.append(("host", "127.0.0.1:4567"))
    return HttpRequest("POST", "/v2/models/digits/infer", "b=2&a=1", headers, body)


def test_a_botocore_signature_verifies() -> None:
    assert verify_sigv4(sign(), SECRETS.get, region="us-east-1")


def test_a_session_token_is_part_of_what_is_signed() -> None:
    assert verify_sigv4(sign(token="session"), SECRETS.get, region="us-east-1")


@pytest.mark.parametrize("change", [
    "body", "path", "query", "secret", "key", "service", "region", "no-auth", "stale",
])
def test_anything_wrong_is_refused(change: str) -> None:
    request = sign(secret="other") if change == "secret" else \
        sign(key="AKIDOTHER") if change == "key" else \
        sign(service="s3") if change == "service" else sign()
    fields: dict[str, Any] = {}
    if change == "body":
        fields["body"] = b'{"tampered": 1}'
    if change == "path":
        fields["raw_path"] = "/v2/models/other/infer"
    if change == "query":
        fields["raw_query"] = "a=1&b=3"
    if change == "no-auth":
        fields["headers"] = [(k, v) for k, v in request.headers if k != "authorization"]
    request = HttpRequest(**{**vars(request), **fields})
    region = "eu-west-1" if change == "region" else "us-east-1"
    now = datetime.now(UTC) + timedelta(minutes=20) if change == "stale" else None
    assert not verify_sigv4(request, SECRETS.get, region=region, now=now)


def statement(action: str, **extra: Any) -> dict[str, Any]:
    return {"Effect": "Allow", "Principal": "*", "Action": action, "Resource": ARN, **extra}


URL_RAW = statement("lambda:InvokeFunctionUrl", FunctionUrlAuthType="NONE")
INVOKE_RAW = statement("lambda:InvokeFunction", InvokedViaFunctionUrl=True)
# how Lambda itself stores the same two permissions
URL_AWS = statement("lambda:InvokeFunctionUrl", Condition={
    "StringEquals": {"lambda:FunctionUrlAuthType": "NONE"}})
INVOKE_AWS = statement("lambda:InvokeFunction", Condition={
    "Bool": {"lambda:InvokedViaFunctionUrl": "true"}})


@pytest.mark.parametrize(("statements", "allowed"), [
    ([], False),
    ([URL_RAW], False),
    ([INVOKE_RAW], False),
    ([URL_RAW, INVOKE_RAW], True),
    ([URL_AWS, INVOKE_AWS], True),
    ([URL_AWS, statement("lambda:InvokeFunction")], True),
    ([statement("lambda:InvokeFunctionUrl", FunctionUrlAuthType="AWS_IAM"), INVOKE_RAW], False),
    ([{**URL_RAW, "Principal": {"AWS": "arn:aws:iam::1:root"}}, INVOKE_RAW], False),
    ([{**URL_RAW, "Effect": "Deny"}, INVOKE_RAW], False),
])
def test_public_access_needs_both_statements(
    statements: list[dict[str, Any]], allowed: bool
) -> None:
    assert public_access_allowed(statements, ARN, None) is allowed


def test_statements_apply_to_their_qualifier_only() -> None:
    live = [{**s, "Resource": f"{ARN}:live"} for s in (URL_RAW, INVOKE_RAW)]
    assert public_access_allowed(live, ARN, "live")
    assert not public_access_allowed(live, ARN, None)
    assert not public_access_allowed([URL_RAW, INVOKE_RAW], ARN, "live")
