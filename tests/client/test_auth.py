"""Auth for V2 calls: the region a SigV4 signature names, and the API-key header."""

from __future__ import annotations

from typing import TYPE_CHECKING

from modelfn.client.auth import api_key_headers, region_of
from modelfn.client.v2 import V2Client

if TYPE_CHECKING:
    import pytest


def test_a_function_url_names_its_region() -> None:
    assert region_of("abc123xyz.lambda-url.eu-west-1.on.aws") == "eu-west-1"
    assert region_of("abc123xyz.lambda-url.us-gov-west-1.on.aws:443") == "us-gov-west-1"
    assert region_of("127.0.0.1:8080") is None
    assert region_of("example.com") is None


def test_the_urls_region_beats_the_environments(monkeypatch: pytest.MonkeyPatch) -> None:
    """AWS checks a function URL's signature against the URL's own region."""
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    url = "https://abc123xyz.lambda-url.ap-south-1.on.aws"
    assert V2Client(url, auth="iam").region == "ap-south-1"
    assert V2Client(url, auth="iam", region="eu-north-1").region == "eu-north-1"
    assert V2Client("http://127.0.0.1:9", auth="iam").region is None  # then the environment's


def test_api_key_header() -> None:
    assert api_key_headers("s3cret") == {"authorization": "Bearer s3cret"}
