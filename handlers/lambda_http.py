"""What one HTTP invocation of a Lambda function may carry, checked on both sides of Mangum.

``check_event`` takes the event as Lambda hands it over (a function URL's or API Gateway's
payload 2.0, or API Gateway's 1.0) and returns what Mangum can read, or the 400 answer for a
malformed part: Mangum itself would raise on it (``KeyError``, ``int()`` of a port), which
the caller would see as an opaque invocation error. AWS builds these events itself, so only
a hand-made invocation meets these answers.

``within_limit`` keeps a response under Lambda's 6 MB payload limit, counted as the runtime
interface client will send it: awslambdaric's own JSON encoder when it is importable (it
writes UTF-8 on the python3.12 and later runtimes and ``\\uXXXX`` escapes before them), the
worst case of escapes otherwise. Lambda refuses a larger response with an opaque error; a
V2 413 that says why is sent instead.

No state: ``handlers/aws_lambda.py`` (whose import is the function's init) uses both.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from typing import Any

from modelfn.platforms import aws_lambda
from modelfn.runtime.errors import ModelfnError

log = logging.getLogger("modelfn.lambda")

#: Lambda's synchronous invocation payload limit, for the request and the response alike
PAYLOAD_LIMIT = aws_lambda.PAYLOAD_BYTES
#: responses Mangum returns as text; every other content type is base64-encoded
TEXT_MIME_TYPES = ["application/json", "text/"]


class LambdaResponseTooLarge(ModelfnError):
    status_code = 413

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            f"Response of {size} bytes exceeds the Lambda response limit of {limit} bytes "
            "(binary outputs count 4/3 as base64): request fewer rows or outputs"
        )


class InvalidEvent(ModelfnError):
    """An event no AWS HTTP source sends: the invocation fails with this message."""

    status_code = 400


def encoded_size(response: dict[str, Any]) -> int:
    """Bytes of ``response`` as the runtime interface client sends it."""
    try:
        from awslambdaric.lambda_runtime_marshaller import to_json
    except ImportError:  # not under awslambdaric: count every escape it could write
        body = response.get("body", "")
        envelope = len(json.dumps({**response, "body": ""}))
        if response.get("isBase64Encoded"):
            return envelope + len(body)  # base64 needs no escaping
        return envelope + len(json.dumps(body)) - 2
    return len(to_json(response).encode())


def within_limit(response: dict[str, Any], limit: int = PAYLOAD_LIMIT) -> dict[str, Any]:
    """``response``, or a V2 413 error in its place when Lambda would refuse to return it."""
    body = response.get("body", "")
    if len(body) < limit // 16:  # fits even as escapes: 12 bytes at most for one character
        return response
    size = encoded_size(response)
    if size <= limit:
        return response
    error = LambdaResponseTooLarge(size, limit)
    log.warning("%s", error.message)
    return {
        "statusCode": error.status_code,
        "headers": {"content-type": "application/json"},
        "body": json.dumps({"error": error.message}, separators=(",", ":")),
        "isBase64Encoded": False,
    }


def _bad_request(message: str) -> dict[str, Any]:
    return {"statusCode": 400, "headers": {"content-type": "application/json"},
            "body": json.dumps({"error": message}), "isBase64Encoded": False}


def _port_problem(headers: dict[str, Any]) -> str | None:
    """Why Mangum could not read the server's port from these headers, if it could not."""
    headers = {name.lower(): value for name, value in headers.items()}
    host = headers.get("host")
    if isinstance(host, str) and ":" in host:
        port = host.rpartition(":")[2]
        if host.count(":") > 1 or not port.isascii() or not port.isdigit():
            return f"the Host header {host!r} has no valid port"
        return None
    forwarded = headers.get("x-forwarded-port")
    if forwarded is not None and not (str(forwarded).isascii() and str(forwarded).isdigit()):
        return f"the X-Forwarded-Port header {forwarded!r} is not a port"
    return None


def _v2_problem(event: dict[str, Any]) -> str | None:
    context = event.get("requestContext")
    http = context.get("http") if isinstance(context, dict) else None
    for field in ("method", "path", "sourceIp"):
        if not isinstance(http, dict) or not isinstance(http.get(field), str):
            return f"the payload 2.0 event has no requestContext.http.{field}"
    if not isinstance(event.get("rawPath"), str):
        return "the payload 2.0 event has no rawPath"
    query = event.get("rawQueryString")
    if query is not None and not isinstance(query, str):
        return "the payload 2.0 event's rawQueryString must be a string"
    cookies = event.get("cookies")
    if cookies is not None and not (isinstance(cookies, list)
                                    and all(isinstance(c, str) for c in cookies)):
        return "the payload 2.0 event's cookies must be a list of strings"
    return None


def _v1_problem(event: dict[str, Any]) -> str | None:
    if not isinstance(event.get("path"), str):
        return "the API Gateway event has no path"
    if not isinstance(event.get("httpMethod"), str):
        return "the API Gateway event has no httpMethod"
    if not isinstance(event.get("requestContext"), dict):
        return "the API Gateway event's requestContext must be an object"
    if not isinstance(event.get("resource"), str):
        return "the API Gateway event has no resource"
    return None


_KINDS = {dict: "an object", list: "a list", bool: "a boolean", int: "a number",
          float: "a number"}


def _body(event: dict[str, Any]) -> bytes | str:
    """The body as the bytes Mangum passes on, or why it has none: Mangum would call
    ``.encode()`` on whatever JSON value it is, or decode bad base64 with an opaque error.
    Decoded here once, so Mangum does not decode it again."""
    body, encoded = event.get("body"), event.get("isBase64Encoded", False)
    if not isinstance(encoded, bool):
        return "the event's isBase64Encoded must be true or false"
    if body is None:
        return b""
    if not isinstance(body, str):
        kind = _KINDS.get(type(body), type(body).__name__)
        return f"the event's body must be a string (a JSON body arrives as text), not {kind}"
    if encoded:
        try:
            return base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError):
            return "the event's body is not valid base64 (isBase64Encoded is true)"
    try:
        return body.encode()
    except UnicodeEncodeError:
        return "the event's body is not valid Unicode text"


def check_event(event: Any) -> dict[str, Any]:
    """The event as Mangum can take it. Not an HTTP event at all raises ``InvalidEvent`` (the
    invocation's error); an HTTP event with a malformed part returns a 400 response under
    ``"response"``. Parts AWS may leave out are filled in: ``headers: null`` (API Gateway
    without headers) becomes {}, a missing ``rawQueryString`` "", a missing ``version``
    of an event with ``rawPath`` "2.0". The body goes on as bytes, base64 decoded."""
    if not isinstance(event, dict):
        kind = "null" if event is None else type(event).__name__
        raise InvalidEvent(f"the event is {kind}, not an HTTP request: invoke this function "
                           "through its function URL or API Gateway (payload 2.0)")
    v2 = event.get("version") == "2.0" or "rawPath" in event
    if not v2 and "httpMethod" not in event:
        raise InvalidEvent("the event is not an HTTP request (no rawPath, requestContext.http "
                           "or httpMethod): invoke this function through its function URL or "
                           "API Gateway")
    headers = event.get("headers")
    if headers is None:
        headers = {}
    if not isinstance(headers, dict):
        return {"response": _bad_request("the event's headers must be an object")}
    for name, value in headers.items():
        if not isinstance(value, str):
            return {"response": _bad_request(f"the event's header {name!r} must be a string")}
    problem = _v2_problem(event) if v2 else _v1_problem(event)
    if problem is None:
        problem = _port_problem(headers)
    body = _body(event) if problem is None else problem
    if isinstance(body, str):
        return {"response": _bad_request(body)}
    event = {**event, "headers": headers, "body": body, "isBase64Encoded": False}
    if v2:
        event["version"] = "2.0"
        event["rawQueryString"] = event.get("rawQueryString") or ""
    return {"event": event}
