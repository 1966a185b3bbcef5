"""The Lambda API paths the local platform answers itself, in front of moto.

moto records functions, versions, aliases, permissions and concurrency, and those calls go
through to it unchanged. Two families it cannot serve for a local platform are answered
here, in Lambda's wire format, so plain boto3 clients work:

- function URL configs (``Create/Get/Update/Delete/ListFunctionUrlConfig(s)``): moto keeps
  one per function and ignores ``Qualifier``; Lambda keeps one per alias (or ``$LATEST``),
  and here each starts a real front whose loopback address is the ``FunctionUrl``;
- ``Invoke``: moto runs it in Docker; here it runs on the platform's environments
  (``RequestResponse``, ``Event`` and ``DryRun``), answering ``X-Amz-Executed-Version``.

A function name Lambda does not take (other than letters, digits, ``-`` and ``_``, or
over 64 characters), in a path or in ``CreateFunction``, is refused here with Lambda's
400 ``ValidationException``: moto would store a long one, and answer a name with a dot
with an HTML 404.

Every Lambda write that reaches moto tells the platform to read its state again, and a
deleted function's URLs and environments go with it. Requests are recognised by the
service in their SigV4 credential scope, as moto's own dispatcher does.
"""

from __future__ import annotations

import io
import re
import threading
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote

import orjson
from werkzeug.exceptions import HTTPException

from modelfn.localstack.function_url import UrlConfig
from modelfn.localstack.lambda_service import Throttled
from modelfn.platforms import aws_lambda
from modelfn.runtime.errors import PayloadTooLarge

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from modelfn.localstack.lambda_platform import LocalLambda
    from modelfn.localstack.s3 import WsgiApp

_SCOPE = re.compile(r"Credential=[^/]+/[^/]+/(?P<region>[^/]+)/(?P<service>[^/]+)/aws4_request")
_URL_CONFIG = re.compile(r"^/2021-10-31/functions/(?P<name>[^/]+)/(?P<kind>url|urls)/?$")
_INVOKE = re.compile(r"^/2015-03-31/functions/(?P<name>[^/]+)/invocations/?$")
_FUNCTION = re.compile(r"^/2015-03-31/functions/(?P<name>[^/]+)/?$")
#: any path of one function (its versions, aliases, policy, concurrency, URL, ...)
_ANY_FUNCTION = re.compile(r"^/\d{4}-\d{2}-\d{2}/functions/(?P<name>[^/]+)")
_CREATE = re.compile(r"^/2015-03-31/functions/?$")
AUTH_TYPES = tuple(aws_lambda.AUTH_TYPES.values())
INVOKE_MODES = ("BUFFERED", "RESPONSE_STREAM")


class LambdaApiError(Exception):
    """An error answered as Lambda does: status, ``x-amzn-ErrorType`` and a message."""

    def __init__(self, status: int, error_type: str, message: str, **extra: str) -> None:
        super().__init__(message)
        self.status, self.error_type, self.message = status, error_type, message
        self.extra = extra  # more members of the error document (``Reason``, ...)


def split_name(name_or_arn: str) -> tuple[str, str | None]:
    """``name``, ``name:qualifier``, ``account:function:name[:q]`` or an ARN -> (name, q)."""
    parts = name_or_arn.split(":")
    if parts[0] == "arn":
        parts = parts[6:]
    elif len(parts) >= 3 and parts[1] == "function":
        parts = parts[2:]
    return parts[0], (parts[1] if len(parts) > 1 else None)


def check_function_name(name_or_arn: str) -> None:
    """Lambda's ``ValidationException`` for a function name it does not take."""
    name, _ = split_name(name_or_arn)
    if aws_lambda.FUNCTION_NAME.fullmatch(name):
        return
    constraint = ("Member must have length less than or equal to 64" if len(name) > 64
                  else "Member must satisfy regular expression pattern: [a-zA-Z0-9-_]+")
    raise LambdaApiError(400, "ValidationException",
                         f"1 validation error detected: Value '{name}' at 'functionName' "
                         f"failed to satisfy constraint: {constraint}")


def _named(environ: dict[str, Any], path: str, method: str) -> None:
    """Check the function name a request is for (in its path, or CreateFunction's body);
    the body read is put back for moto."""
    if match := _ANY_FUNCTION.match(path):
        check_function_name(match["name"])
    elif method == "POST" and _CREATE.match(path):
        body = _body(environ)
        environ["wsgi.input"] = io.BytesIO(body)
        try:
            name = orjson.loads(body).get("FunctionName") if body else None
        except (orjson.JSONDecodeError, AttributeError):
            return  # moto answers what it cannot read
        if isinstance(name, str):
            check_function_name(name)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000+0000", time.gmtime())


def _body(environ: dict[str, Any]) -> bytes:
    size = int(environ.get("CONTENT_LENGTH") or 0)
    return bytes(environ["wsgi.input"].read(size)) if size else b""


class _Answer:
    def __init__(
        self, status: int, body: bytes = b"", headers: list[tuple[str, str]] | None = None
    ) -> None:
        self.status, self.body, self.headers = status, body, headers or []

    def __call__(self, start_response: Callable[..., Any]) -> Iterable[bytes]:
        headers = [("Content-Type", "application/json"), *self.headers,
                   ("Content-Length", str(len(self.body)))]
        start_response(f"{self.status} {_REASONS.get(self.status, '')}".strip(), headers)
        return [self.body]


_REASONS = {200: "OK", 201: "Created", 202: "Accepted", 204: "No Content", 400: "Bad Request",
            404: "Not Found", 409: "Conflict", 413: "Request Entity Too Large",
            429: "Too Many Requests"}


def lambda_api_middleware(app: WsgiApp, platform: LocalLambda) -> WsgiApp:
    """moto behind the URL-config and Invoke paths the platform serves itself."""

    def middleware(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        scope = _SCOPE.search(environ.get("HTTP_AUTHORIZATION", ""))
        if scope is None or scope["service"] != "lambda" or platform.stopped:
            return app(environ, start_response)  # a stopped platform leaves moto alone
        path, method = unquote(environ.get("PATH_INFO", "")), environ["REQUEST_METHOD"]
        query = {k: v[-1] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()}
        try:
            _named(environ, path, method)
            if match := _URL_CONFIG.match(path):
                answer = _url_config(platform, method, match["kind"], match["name"], query,
                                     _body(environ))
                return answer(start_response)
            if (match := _INVOKE.match(path)) and method == "POST":
                return _invoke(platform, environ, match["name"], query)(start_response)
        except LambdaApiError as exc:
            body = orjson.dumps({"Type": "User", "Message": exc.message,
                                 **{k.capitalize(): v for k, v in exc.extra.items()}})
            return _Answer(exc.status, body, [("x-amzn-ErrorType", exc.error_type)])(
                start_response)
        except HTTPException as exc:  # moto's own errors (an unknown function, ...)
            return exc(environ, start_response)
        return _through(app, platform, environ, start_response, method, path, query)

    return middleware


def _through(
    app: WsgiApp, platform: LocalLambda, environ: dict[str, Any],
    start_response: Callable[..., Any], method: str, path: str, query: dict[str, str],
) -> Iterable[bytes]:
    statuses: list[int] = []

    def recording(status: str, headers: list[tuple[str, str]], *exc_info: Any) -> Any:
        statuses.append(int(status.split()[0]))
        return start_response(status, headers, *exc_info)

    body = list(app(environ, recording))
    if method != "GET":
        platform.changed()
        match = _FUNCTION.match(path)
        if match and method == "DELETE" and statuses and statuses[0] < 300:
            name, qualifier = split_name(match["name"])
            if (query.get("Qualifier") or qualifier) is None:
                platform.function_deleted(name)
    return body


def _existing(platform: LocalLambda, name_or_arn: str, qualifier: str | None) -> Any:
    """The function (version) as moto has it; moto's 404 when there is none."""
    from moto.awslambda.models import lambda_backends
    from moto.core.models import DEFAULT_ACCOUNT_ID

    backend = lambda_backends[DEFAULT_ACCOUNT_ID][platform.region]
    return backend.get_function(name_or_arn, qualifier)


def _url_doc(platform: LocalLambda, config: UrlConfig, arn: str) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "FunctionUrl": config.url,
        "FunctionArn": arn if config.qualifier is None else f"{arn}:{config.qualifier}",
        "AuthType": config.auth_type,
        "CreationTime": config.created,
        "LastModifiedTime": config.modified,
        "InvokeMode": config.invoke_mode,
    }
    if config.cors is not None:
        doc["Cors"] = config.cors
    return doc


def _url_config(
    platform: LocalLambda, method: str, kind: str, name_or_arn: str, query: dict[str, str],
    body: bytes,
) -> _Answer:
    name, embedded = split_name(name_or_arn)
    qualifier = query.get("Qualifier") or embedded
    if qualifier == "$LATEST":
        qualifier = None
    function = _existing(platform, name, qualifier)
    arn = str(function.function_arn).split(":$LATEST")[0]
    arn = ":".join(arn.split(":")[:7])  # unqualified
    if kind == "urls":
        configs = [c for (n, _), c in platform.url_configs().items() if n == name]
        docs = [_url_doc(platform, c, arn) for c in configs]
        return _Answer(200, orjson.dumps({"FunctionUrlConfigs": docs}))
    if qualifier is not None and qualifier.isdigit():
        raise LambdaApiError(400, "InvalidParameterValueException",
                             "A function URL can only be created for an alias or $LATEST, "
                             f"not version {qualifier}")
    config = platform.url_configs().get((name, qualifier))
    request = orjson.loads(body) if body else {}
    if method == "POST":
        if config is not None:
            raise LambdaApiError(409, "ResourceConflictException",
                                 f"Failed to create function url config for [functionArn = "
                                 f"{arn}]. Error message:  FunctionUrlConfig exists for this "
                                 "Lambda function")
        auth_type = _choice(request, "AuthType", AUTH_TYPES, None)
        now = _now()
        config = UrlConfig(name, qualifier, auth_type, request.get("Cors"),
                           _choice(request, "InvokeMode", INVOKE_MODES, "BUFFERED"), now, now,
                           platform.serve_url(name, qualifier))
        platform.add_url(config)
        return _Answer(201, orjson.dumps(_url_doc(platform, config, arn)))
    if config is None:
        raise LambdaApiError(404, "ResourceNotFoundException",
                             "The resource you requested does not exist.")
    if method == "GET":
        return _Answer(200, orjson.dumps(_url_doc(platform, config, arn)))
    if method == "PUT":
        if "AuthType" in request:
            config.auth_type = _choice(request, "AuthType", AUTH_TYPES, None)
        if "Cors" in request:
            config.cors = request["Cors"]
        if "InvokeMode" in request:
            config.invoke_mode = _choice(request, "InvokeMode", INVOKE_MODES, None)
        config.modified = _now()
        return _Answer(200, orjson.dumps(_url_doc(platform, config, arn)))
    if method == "DELETE":
        removed = platform.remove_url(name, qualifier)
        if removed is not None:
            removed.front.close()
        return _Answer(204)
    raise LambdaApiError(400, "InvalidRequestContentException", f"{method} is not supported")


def _choice(request: dict[str, Any], field: str, allowed: tuple[str, ...],
            default: str | None) -> str:
    value = request.get(field, default)
    if value not in allowed:
        raise LambdaApiError(400, "ValidationException",
                             f"1 validation error detected: Value '{value}' at '{field}' failed "
                             f"to satisfy constraint: Member must satisfy enum value set: "
                             f"[{', '.join(allowed)}]")
    return str(value)


def _invoke(
    platform: LocalLambda, environ: dict[str, Any], name_or_arn: str, query: dict[str, str]
) -> _Answer:
    name, embedded = split_name(name_or_arn)
    qualifier = query.get("Qualifier") or embedded
    _existing(platform, name, qualifier)
    kind = environ.get("HTTP_X_AMZ_INVOCATION_TYPE", "RequestResponse")
    payload = _body(environ) or b"{}"
    if kind == "DryRun":
        return _Answer(204)
    if kind == "Event":
        threading.Thread(
            target=platform.invoke, args=(name, qualifier, payload), daemon=True
        ).start()
        return _Answer(202)
    if kind != "RequestResponse":
        raise LambdaApiError(400, "InvalidParameterValueException",
                             f"Unsupported invocation type {kind}")
    try:
        version, result = platform.invoke(name, qualifier, payload)
    except PayloadTooLarge as exc:
        raise LambdaApiError(413, "RequestTooLargeException", exc.message) from exc
    except Throttled as exc:
        raise LambdaApiError(429, "TooManyRequestsException", "Rate Exceeded.",
                             reason=exc.reason) from exc
    headers = [("X-Amz-Executed-Version", version), ("x-amzn-RequestId", result.request_id)]
    if result.error is not None:
        headers.append(("X-Amz-Function-Error", "Unhandled"))
    return _Answer(200, result.payload, headers)
