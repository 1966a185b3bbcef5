"""Credentials for calls to V2 endpoints: SigV4 for ``AWS_IAM`` Lambda function URLs, and
the API key a modelfn gateway asks for. Used by the gateway's upstream calls and by
``modelfn invoke``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from modelfn.runtime.errors import ModelfnError

if TYPE_CHECKING:
    from botocore.credentials import Credentials

#: ``<url-id>.lambda-url.<region>.on.aws``: a function URL names its region
_LAMBDA_URL = re.compile(r"^[a-z0-9]+\.lambda-url\.([a-z0-9-]+)\.on\.aws$")


class MissingCredentials(ModelfnError):
    status_code = 401


def region_of(host: str) -> str | None:
    """The region a Lambda function URL's host names, or None for any other host."""
    found = _LAMBDA_URL.match(host.split(":")[0])
    return found.group(1) if found else None


def api_key_headers(key: str) -> dict[str, str]:
    """The header a modelfn gateway reads an API key from."""
    return {"authorization": f"Bearer {key}"}


class Signer:
    """SigV4 for Lambda function URLs, with credentials from botocore's standard chain
    (refreshed by botocore when they expire)."""

    def __init__(self, credentials: Credentials | None = None) -> None:
        if credentials is None:
            import botocore.session

            credentials = botocore.session.Session().get_credentials()
        self._credentials = credentials

    def sign(self, method: str, url: str, headers: dict[str, str], body: bytes,
             region: str | None) -> dict[str, str]:
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        if self._credentials is None:
            raise MissingCredentials("an AWS_IAM function URL needs AWS credentials, and none "
                                     "were found (environment, profile or instance role)")
        request = AWSRequest(method=method, url=url, data=body, headers=headers)
        SigV4Auth(self._credentials.get_frozen_credentials(), "lambda",
                  region or "us-east-1").add_auth(request)
        return dict(request.headers.items())
