"""Who may call a function URL: SigV4 for ``AWS_IAM`` URLs, the resource policy for ``NONE``.

``verify_sigv4`` recomputes the caller's signature with botocore's own signer (the code
every AWS SDK for Python signs with): the canonical request from the incoming method,
path, query, the headers the caller listed in ``SignedHeaders`` and the body's SHA-256,
the credential scope's date, region and service (``lambda``), and the secret the
platform knows for the access key. A missing, malformed, stale, mis-scoped or wrong
signature is refused.

``public_access_allowed`` evaluates a function's resource policy the way Lambda does
for a ``NONE`` URL: the caller is anonymous, so a statement must allow principal ``*``
``lambda:InvokeFunctionUrl`` with ``lambda:FunctionUrlAuthType`` = ``NONE``, and (since
October 2025) another must allow ``lambda:InvokeFunction`` when invoked via a function URL.
Lambda's ``AddPermission`` stores ``FunctionUrlAuthType`` and ``InvokedViaFunctionUrl``
as conditions; moto keeps them as the request's own keys. Both spellings are read.

Not emulated: identity-based IAM policies. Any key the platform knows may call any
``AWS_IAM`` URL, as an account administrator could.
"""

from __future__ import annotations

import hmac
import re
from datetime import UTC, datetime
from hashlib import sha256
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.utils import normalize_url_path

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from modelfn.localstack.function_url import HttpRequest

SERVICE = "lambda"
#: how far a request's X-Amz-Date may be from now, as AWS allows
CLOCK_SKEW_S = 15 * 60
_AUTHORIZATION = re.compile(
    r"AWS4-HMAC-SHA256\s+Credential=(?P<key>[^/,\s]+)/(?P<date>\d{8})/(?P<region>[^/]+)/"
    r"(?P<service>[^/]+)/aws4_request,\s*SignedHeaders=(?P<headers>[a-z0-9;_.-]+),\s*"
    r"Signature=(?P<signature>[0-9a-f]{64})\s*$"
)
_ALL_PRINCIPALS = ("*", {"AWS": "*"})


def verify_sigv4(
    request: HttpRequest,
    secret_for: Callable[[str], str | None],
    *,
    region: str,
    now: datetime | None = None,
) -> bool:
    """True when ``request`` carries a valid SigV4 signature for ``lambda`` in ``region``."""
    headers = {name.lower(): value for name, value in request.headers}
    match = _AUTHORIZATION.match(headers.get("authorization", ""))
    if match is None or match["service"] != SERVICE or match["region"] != region:
        return False
    secret = secret_for(match["key"])
    stamp = headers.get("x-amz-date", "")
    if secret is None or not stamp.startswith(match["date"]):
        return False
    try:
        signed_at = datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    except ValueError:
        return False
    if abs(((now or datetime.now(UTC)) - signed_at).total_seconds()) > CLOCK_SKEW_S:
        return False
    content_hash = headers.get("x-amz-content-sha256")
    if content_hash not in (None, "UNSIGNED-PAYLOAD", sha256(request.body).hexdigest()):
        return False
    signed = match["headers"].split(";")
    if "host" not in signed or any(name not in headers for name in signed):
        return False
    query = f"?{request.raw_query}" if request.raw_query else ""
    url = f"http://{headers['host']}{request.raw_path}{query}"
    aws_request = AWSRequest(
        method=request.method,
        url=url,
        headers={name: headers[name] for name in signed},
        data=request.body,
    )
    aws_request.context["timestamp"] = stamp
    token = headers.get("x-amz-security-token")
    signer = SigV4Auth(Credentials(match["key"], secret, token), SERVICE, region)
    canonical = _canonical_request(signer, request.method, aws_request, signed)
    expected = signer.signature(signer.string_to_sign(aws_request, canonical), aws_request)
    return hmac.compare_digest(expected, match["signature"])


def _canonical_request(
    signer: SigV4Auth, method: str, request: AWSRequest, signed: list[str]
) -> str:
    """The canonical request over exactly the headers the caller signed (botocore's parts)."""
    payload = request.headers.get("x-amz-content-sha256") or signer.payload(request)
    return "\n".join([
        method.upper(),
        quote(normalize_url_path(urlsplit(str(request.url)).path), safe="/~"),
        signer.canonical_query_string(request),
        "".join(f"{name}:{' '.join(str(request.headers[name]).split())}\n" for name in signed),
        ";".join(signed),
        str(payload),
    ])


def _condition(statement: Mapping[str, Any], operator: str, key: str) -> Any:
    block = statement.get("Condition") or {}
    values = block.get(operator) or {}
    for name, value in values.items():
        if name.lower() == key.lower():
            return value[0] if isinstance(value, list) and len(value) == 1 else value
    return None


def _allows(statement: Mapping[str, Any], action: str, resources: Iterable[str]) -> bool:
    if statement.get("Effect", "Allow") != "Allow":
        return False
    if statement.get("Principal") not in _ALL_PRINCIPALS:
        return False
    actions = statement.get("Action")
    if action not in (actions if isinstance(actions, list) else [actions]):
        return False
    return statement.get("Resource") in set(resources)


def public_access_allowed(
    statements: Iterable[Mapping[str, Any]], function_arn: str, qualifier: str | None
) -> bool:
    """Whether a ``NONE`` URL of ``function_arn[:qualifier]`` may be called by anyone."""
    resources = [function_arn] if qualifier is None else [f"{function_arn}:{qualifier}"]
    url_permission = invoke_permission = False
    for statement in statements:
        if _allows(statement, "lambda:InvokeFunctionUrl", resources):
            auth_type = statement.get("FunctionUrlAuthType") or _condition(
                statement, "StringEquals", "lambda:FunctionUrlAuthType"
            )
            url_permission |= auth_type == "NONE"
        if _allows(statement, "lambda:InvokeFunction", resources):
            via_url = statement.get("InvokedViaFunctionUrl")
            if via_url is None:
                via_url = _condition(statement, "Bool", "lambda:InvokedViaFunctionUrl")
            # without the condition the statement allows every invoke, URLs included
            invoke_permission |= via_url in (None, True, "true", "True")
    return url_permission and invoke_permission
