"""SigV4 verification, the one verifier of every listener that takes AWS credentials.

``check_sigv4`` recomputes the caller's signature with botocore's own signer (the code every
AWS SDK for Python signs with) over what arrived: the method, the raw path and query, the
headers the caller listed in ``SignedHeaders`` and the SHA-256 of the body as received. The
payload hash is never taken from the request: an ``X-Amz-Content-SHA256`` header must equal
the body's hash, so a body is always covered by the signature. Only S3 takes the unsigned
and streaming payload declarations (as S3 does); a function URL refuses them, as Lambda does,
with the mismatch answer.

It raises ``SignatureRefused`` (403) with the message AWS gives for the same fault: no or a
malformed ``Authorization`` (query-string presigned requests included, which function URLs
and this endpoint do not take), an unknown key, a wrong scope, ``Host`` not signed, a
timestamp more than five minutes from now, or a signature that does not match.
"""

from __future__ import annotations

import hmac
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from hashlib import sha256
from typing import TYPE_CHECKING
from urllib.parse import quote, urlsplit

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.utils import normalize_url_path

from modelfn.runtime.errors import ModelfnError

if TYPE_CHECKING:
    from collections.abc import Callable

#: how far a request's X-Amz-Date may be from now (SigV4's five minutes)
CLOCK_SKEW = timedelta(minutes=5)
_STAMP = "%Y%m%dT%H%M%SZ"
_AUTHORIZATION = re.compile(
    r"AWS4-HMAC-SHA256\s+Credential=(?P<key>[^/,\s]+)/(?P<date>\d{8})/(?P<region>[^/]+)/"
    r"(?P<service>[^/]+)/aws4_request,\s*SignedHeaders=(?P<headers>[a-z0-9;_.-]+),\s*"
    r"Signature=(?P<signature>[0-9a-f]{64})\s*$"
)
#: payload declarations S3 takes in place of the body's hash
S3_UNSIGNED = frozenset({
    "UNSIGNED-PAYLOAD",
    "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
    "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
    "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER",
})
MISMATCH = ("The request signature we calculated does not match the signature you provided. "
            "Check your AWS Secret Access Key and signing method. Consult the service "
            "documentation for details.")


@dataclass(frozen=True)
class HttpRequest:
    """A request as it arrived, before any header is added: what a signature covers."""

    method: str
    raw_path: str
    raw_query: str
    headers: list[tuple[str, str]]
    body: bytes


class SignatureRefused(ModelfnError):
    """A request whose SigV4 signature is missing, stale, mis-scoped or wrong."""

    status_code = 403

    def __init__(self, message: str, error_type: str = "InvalidSignatureException") -> None:
        super().__init__(message)
        self.error_type = error_type


def check_sigv4(
    request: HttpRequest,
    secret_for: Callable[[str], str | None],
    *,
    region: str,
    service: str | None,
    now: datetime | None = None,
) -> str:
    """The access key that signed ``request`` for ``service`` (any, when None) in
    ``region``; ``SignatureRefused`` when it is not validly signed."""
    headers: dict[str, str] = {}
    for name, value in request.headers:
        name = name.lower()
        headers[name] = f"{headers[name]},{value}" if name in headers else value
    match = _AUTHORIZATION.match(headers.get("authorization", ""))
    if match is None:
        raise SignatureRefused("Forbidden", "AccessDeniedException")
    if service is not None and match["service"] != service:
        raise SignatureRefused(f"Credential should be scoped to correct service: '{service}'.")
    if match["region"] != region:
        raise SignatureRefused("Credential should be scoped to a valid region.")
    secret = secret_for(match["key"])
    if secret is None:
        raise SignatureRefused("The security token included in the request is invalid.",
                               "UnrecognizedClientException")
    signed = match["headers"].split(";")
    if "host" not in signed:
        raise SignatureRefused("'Host' or ':authority' must be a 'SignedHeader' in the AWS "
                               "Authorization.")
    if any(name not in headers for name in signed):
        raise SignatureRefused(MISMATCH, "SignatureDoesNotMatch")
    stamp = headers.get("x-amz-date", "")
    _check_time(stamp, match["date"], now or datetime.now(UTC))
    aws_request = AWSRequest(
        method=request.method,
        url=f"http://{headers['host']}{request.raw_path}"
            + (f"?{request.raw_query}" if request.raw_query else ""),
        headers={name: headers[name] for name in signed},
    )
    aws_request.context["timestamp"] = stamp
    scope = match["service"]
    signer = SigV4Auth(
        Credentials(match["key"], secret, headers.get("x-amz-security-token")), scope, region
    )
    payload = _payload(headers.get("x-amz-content-sha256"), request.body, s3=scope == "s3")
    canonical = "\n".join([
        request.method.upper(),
        _canonical_path(str(aws_request.url), s3=scope == "s3"),
        signer.canonical_query_string(aws_request),
        "".join(f"{name}:{' '.join(headers[name].split())}\n" for name in signed),
        ";".join(signed),
        payload,
    ])
    expected = signer.signature(signer.string_to_sign(aws_request, canonical), aws_request)
    if not hmac.compare_digest(expected, match["signature"]):
        raise SignatureRefused(MISMATCH, "SignatureDoesNotMatch")
    return match["key"]


def _check_time(stamp: str, scope_date: str, now: datetime) -> None:
    try:
        signed_at = datetime.strptime(stamp, _STAMP).replace(tzinfo=UTC)
    except ValueError:
        raise SignatureRefused("Authorization header requires existence of either a "
                               "'X-Amz-Date' or a 'Date' header.") from None
    if not stamp.startswith(scope_date):
        raise SignatureRefused("Date in Credential scope does not match YYYYMMDD from ISO-8601 "
                               "version of date from HTTP.")
    if signed_at < now - CLOCK_SKEW:
        raise SignatureRefused(f"Signature expired: {stamp} is now earlier than "
                               f"{(now - CLOCK_SKEW).strftime(_STAMP)} "
                               f"({now.strftime(_STAMP)} - 5 min.)")
    if signed_at > now + CLOCK_SKEW:
        raise SignatureRefused(f"Signature not yet current: {stamp} is still later than "
                               f"{(now + CLOCK_SKEW).strftime(_STAMP)} "
                               f"({now.strftime(_STAMP)} + 5 min.)")


def _payload(declared: str | None, body: bytes, *, s3: bool) -> str:
    """The payload hash the canonical request holds: the body's own, always, except for
    S3's unsigned and streaming declarations. A declared hash must be the body's."""
    if s3 and declared in S3_UNSIGNED:
        return str(declared)
    actual = sha256(body).hexdigest()
    if declared is not None and declared != actual:
        raise SignatureRefused(MISMATCH, "SignatureDoesNotMatch")
    return actual


def _canonical_path(url: str, *, s3: bool) -> str:
    """S3 signs the path as sent; every other service its normalised, encoded-again form."""
    path = urlsplit(url).path or "/"
    return path if s3 else quote(normalize_url_path(path), safe="/~")
