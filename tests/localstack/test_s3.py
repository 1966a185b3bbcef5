"""The embedded S3 emulator: real S3 wire protocol on loopback, counted, with atomic
conditional writes."""

from __future__ import annotations

import secrets
import threading
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import boto3
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from modelfn.localstack.s3 import S3Emulator

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


@pytest.fixture(scope="module")
def emulator() -> Iterator[S3Emulator]:
    with S3Emulator() as s3:
        yield s3


def test_serves_s3_on_loopback(emulator: S3Emulator) -> None:
    parts = urlsplit(emulator.endpoint_url)
    assert parts.hostname == "127.0.0.1" and parts.port
    emulator.create_bucket("emu-basics")
    client = emulator.client()
    client.put_object(Bucket="emu-basics", Key="a/b.txt", Body=b"hello")
    assert client.get_object(Bucket="emu-basics", Key="a/b.txt")["Body"].read() == b"hello"
    assert client.meta.region_name == "us-east-1"


def test_counts_requests_by_operation(emulator: S3Emulator) -> None:
    emulator.create_bucket("emu-counts")
    client = emulator.client()
    emulator.clear_requests()
    client.put_object(Bucket="emu-counts", Key="k", Body=b"1")
    client.get_object(Bucket="emu-counts", Key="k")
    client.get_object(Bucket="emu-counts", Key="k")
    client.head_object(Bucket="emu-counts", Key="k")
    client.list_objects_v2(Bucket="emu-counts")
    assert emulator.operations() == {
        "PutObject": 1, "GetObject": 2, "HeadObject": 1, "ListObjects": 1
    }
    assert emulator.count("GetObject", key_suffix="k") == 2
    assert emulator.count("GetObject", key_suffix="other") == 0


def test_conditional_writes_have_exactly_one_winner(emulator: S3Emulator) -> None:
    emulator.create_bucket("emu-race")
    racers = 16
    barrier = threading.Barrier(racers)
    results: list[str] = []

    def put(i: int) -> None:
        client = emulator.client()
        barrier.wait()
        try:
            client.put_object(Bucket="emu-race", Key="claim", Body=str(i).encode(),
                              IfNoneMatch="*")
            results.append(f"won {i}")
        except ClientError as exc:
            results.append(exc.response["Error"]["Code"])

    threads = [threading.Thread(target=put, args=(i,)) for i in range(racers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [r for r in results if r.startswith("won")]
    assert len(winners) == 1 and results.count("PreconditionFailed") == racers - 1
    body = emulator.client().get_object(Bucket="emu-race", Key="claim")["Body"].read()
    assert winners[0] == f"won {body.decode()}"


def test_enforce_auth_evaluates_iam(emulator: S3Emulator) -> None:
    emulator.create_bucket("emu-auth")
    reader = emulator.user_credentials("emu-reader", {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "s3:GetObject",
                       "Resource": "arn:aws:s3:::emu-auth/*"}],
    })
    emulator.client().put_object(Bucket="emu-auth", Key="k", Body=b"v")
    client = emulator.client(access_key=reader[0], secret_key=reader[1])
    with emulator.enforce_auth():
        assert client.get_object(Bucket="emu-auth", Key="k")["Body"].read() == b"v"
        with pytest.raises(ClientError, match="AccessDenied"):
            client.put_object(Bucket="emu-auth", Key="k", Body=b"w")
    emulator.client().head_object(Bucket="emu-auth", Key="k")  # auth is off again


def test_endpoint_needs_a_running_server() -> None:
    with pytest.raises(RuntimeError, match="not running"):
        _ = S3Emulator().endpoint_url


def test_with_credentials_every_request_must_be_signed_with_them(tmp_path: Path) -> None:
    """The local platform's endpoint: boto3 with its secret works for S3 (uploads included),
    IAM and Lambda; a wrong secret, an unknown key, an unsigned request and a browser's
    request are 403s, in the error shape of the service asked."""
    import httpx

    from modelfn.localstack.lambda_platform import LocalLambda

    secret = secrets.token_urlsafe(30)
    with S3Emulator(credentials={"modelfn-dev": secret}) as endpoint, \
            LocalLambda(tmp_path, emulator=endpoint) as aws:
        good = endpoint.client()
        good.create_bucket(Bucket="signed")
        (tmp_path / "big").write_bytes(b"x" * (9 << 20))  # a multipart upload
        good.upload_file(str(tmp_path / "big"), "signed", "big")
        assert good.head_object(Bucket="signed", Key="big")["ContentLength"] == 9 << 20
        user = endpoint.user_credentials("endpoint-user")
        endpoint.client(access_key=user[0], secret_key=user[1]).list_buckets()
        assert aws.client("lambda").list_functions()["Functions"] is not None
        for key, wrong in (("modelfn-dev", "testing"), ("testing", "testing")):
            with pytest.raises(ClientError) as refused:
                endpoint.client(access_key=key, secret_key=wrong, max_attempts=1
                                ).list_objects_v2(Bucket="signed")
            assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
        assert refused.value.response["Error"]["Code"] == "UnrecognizedClientException"
        with pytest.raises(ClientError) as lambda_refused:
            boto3.client("lambda", endpoint_url=endpoint.endpoint_url, region_name="us-east-1",
                         aws_access_key_id="modelfn-dev", aws_secret_access_key="nope",
                         config=Config(retries={"max_attempts": 1})).list_functions()
        assert lambda_refused.value.response["Error"]["Code"] == "SignatureDoesNotMatch"
        assert httpx.get(f"{endpoint.endpoint_url}/signed/big").status_code == 403
        assert httpx.post(f"{endpoint.endpoint_url}/moto-api/reset").status_code == 403
        browser = good.generate_presigned_url("get_object", Params={"Bucket": "signed",
                                                                    "Key": "big"})
        assert httpx.get(browser).status_code == 403  # query-string presigning: refused
        request = AWSRequest(method="GET", url=f"{endpoint.endpoint_url}/signed",
                             headers={"Origin": "https://example.com"})
        SigV4Auth(Credentials("modelfn-dev", secret), "s3", "us-east-1").add_auth(request)
        from_browser = httpx.get(request.url, headers=dict(request.headers.items()))
        assert from_browser.status_code == 403 and b"browser" in from_browser.content
        assert good.list_objects_v2(Bucket="signed")["KeyCount"] == 1  # still serving
