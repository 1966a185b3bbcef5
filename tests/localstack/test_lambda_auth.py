"""SigV4 verification and resource-policy evaluation for function URLs, without a server:
requests signed by botocore exactly as a client signs them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.auth import SigV4Auth, SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from modelfn.localstack.lambda_auth import public_access_allowed, verify_sigv4
from modelfn.localstack.sigv4 import MISMATCH, HttpRequest, SignatureRefused

ARN = "arn:aws:lambda:us-east-1:123456789012:function:digits"
SECRETS = {"AKIDEXAMPLE": "secret"}
URL = "http://127.0.0.1:4567/v2/models/digits/infer?b=2&a=1"


class _HostUnsigned(SigV4Auth):
    def headers_to_sign(self, request: AWSRequest) -> Any:
        headers = super().headers_to_sign(request)
        del headers["host"]
        return headers


def sign(body: bytes = b"{}", key: str = "AKIDEXAMPLE", secret: str = "secret",
         service: str = "lambda", token: str | None = None,
         content_sha256: str | None = None, signer: type[SigV4Auth] = SigV4Auth
         ) -> HttpRequest:
    headers = {"content-type": "application/json"}
    if content_sha256 is not None:  # S3-style: the declared payload hash is signed too
        headers["X-Amz-Content-SHA256"] = content_sha256
    request = AWSRequest(method="POST", url=URL, data=body, headers=headers)
    signer(Credentials(key, secret, token), service, "us-east-1").add_auth(request)
    sent = [(k.lower(), str(v)) for k, v in request.headers.items()]
    sent.append(("host", "127.0.0.1:4567"))
    return HttpRequest("POST", "/v2/models/digits/infer", "b=2&a=1", sent, body)


def refusal(request: HttpRequest, **kwargs: Any) -> str:
    with pytest.raises(SignatureRefused) as refused:
        verify_sigv4(request, SECRETS.get, region=kwargs.pop("region", "us-east-1"), **kwargs)
    assert refused.value.status_code == 403
    return refused.value.message


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
    with pytest.raises(SignatureRefused):
        verify_sigv4(request, SECRETS.get, region=region, now=now)


def test_an_unsigned_payload_is_refused_whatever_the_body() -> None:
    """``UNSIGNED-PAYLOAD`` would leave the body out of the signature: any body would pass
    under the same headers. Lambda computes the canonical request over the body's own hash,
    so the signature does not match."""
    request = sign(b'{"a": 1}', content_sha256="UNSIGNED-PAYLOAD")
    assert refusal(request) == MISMATCH
    assert refusal(HttpRequest(**{**vars(request), "body": b"anything"})) == MISMATCH


def test_a_declared_payload_hash_must_be_the_bodys() -> None:
    from hashlib import sha256

    body = b'{"a": 1}'
    assert verify_sigv4(sign(body, content_sha256=sha256(body).hexdigest()), SECRETS.get,
                        region="us-east-1")
    wrong = sign(body, content_sha256=sha256(b"other").hexdigest())
    assert refusal(wrong) == MISMATCH
    # a hash header added but not signed: still the body's hash is what counts
    unsigned_header = sign(body)
    unsigned_header.headers.append(("x-amz-content-sha256", "UNSIGNED-PAYLOAD"))
    assert refusal(unsigned_header) == MISMATCH
    tampered = HttpRequest(**{**vars(sign(body)), "body": b"other"})
    assert refusal(tampered) == MISMATCH


def test_the_host_must_be_signed() -> None:
    assert "'Host'" in refusal(sign(signer=_HostUnsigned))


@pytest.mark.parametrize(("minutes", "message"), [
    (6, "Signature expired"), (-6, "Signature not yet current")])
def test_a_timestamp_over_five_minutes_off_is_refused(minutes: int, message: str) -> None:
    request = sign()
    assert verify_sigv4(request, SECRETS.get, region="us-east-1",
                        now=datetime.now(UTC) + timedelta(minutes=4))
    now = datetime.now(UTC) + timedelta(minutes=minutes)
    assert refusal(request, now=now).startswith(message)


def test_a_presigned_query_string_is_refused() -> None:
    request = AWSRequest(method="POST", url=URL, data=b"{}")
    SigV4QueryAuth(Credentials("AKIDEXAMPLE", "secret"), "lambda", "us-east-1",
                   expires=60).add_auth(request)
    query = request.url.split("?", 1)[1]
    presigned = HttpRequest("POST", "/v2/models/digits/infer", query,
                            [("host", "127.0.0.1:4567")], b"{}")
    assert refusal(presigned) == "Forbidden"


def test_an_unknown_key_and_a_wrong_scope_say_so() -> None:
    assert refusal(sign(key="AKIDOTHER")) == "The security token included in the request " \
        "is invalid."
    assert refusal(sign(service="s3")) == "Credential should be scoped to correct service: " \
        "'lambda'."
    assert refusal(sign(), region="eu-west-1") == "Credential should be scoped to a valid " \
        "region."


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
