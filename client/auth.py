"""Credentials for calls to V2 endpoints: SigV4 for ``AWS_IAM`` Lambda function URLs, and
the API key a modelfn gateway asks for. Used by the gateway's upstream calls and by
``modelfn invoke`` and ``modelfn bench`` (``RequestAuth``).
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit

from modelfn.runtime.errors import InvalidInput, ModelfnError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from botocore.credentials import Credentials

Auth = Literal["none", "iam", "key"]
AUTHS: dict[str, Auth] = {"none": "none", "iam": "iam", "key": "key"}

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


def env_region() -> str:
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"


def choose_auth(auth: str | None, api_key: str | None) -> Auth:
    """``--auth`` as given, else key auth when a key is given, else none. A key beside
    another ``--auth`` is refused rather than silently not sent."""
    if auth is None:
        return "key" if api_key else "none"
    chosen = AUTHS.get(auth)
    if chosen is None:
        raise InvalidInput(f"--auth {auth}: expected one of {', '.join(AUTHS)}")
    if api_key and chosen != "key":
        raise InvalidInput(f"an API key (--api-key or MODELFN_API_KEY) is sent only with "
                           f"--auth key, not --auth {auth}: give one or the other")
    return chosen


class RequestAuth:
    """A client's credentials on its requests: none, a gateway API key, or SigV4 for an
    ``AWS_IAM`` function URL (``region``: the URL's own when it names one, else the
    environment's). A SigV4 signature dates the request, so ``signs`` callers that send the
    same request for long sign it again now and then."""

    def __init__(self, auth: Auth = "none", api_key: str | None = None,
                 region: str | None = None, signer: Signer | None = None) -> None:
        if auth == "key" and not api_key:
            raise InvalidInput("--auth key needs an API key (--api-key or MODELFN_API_KEY)")
        self.auth = auth
        self.region = region
        self._key = api_key_headers(api_key) if auth == "key" and api_key else {}
        self._signer = (signer or Signer()) if auth == "iam" else None

    @classmethod
    def for_url(cls, url: str, auth: str | None = None, api_key: str | None = None,
                region: str | None = None) -> RequestAuth:
        """The options of ``invoke`` and ``bench`` for calls to ``url``."""
        return cls(choose_auth(auth, api_key), api_key,
                   region or region_of(urlsplit(url).netloc))

    @property
    def signs(self) -> bool:
        return self._signer is not None

    def headers(self, method: str, url: str, headers: Mapping[str, str],
                body: bytes = b"") -> dict[str, str]:
        """``headers`` with the credentials added."""
        sent = {**headers, **self._key}
        if self._signer is not None:
            sent = self._signer.sign(method, url, sent, body, self.region or env_region())
        return sent
