"""A Lambda function URL on loopback: HTTP in, payload format 2.0 event, HTTP out.

``build_event`` and ``render_response`` are the two mappings the real service applies;
``FunctionUrlApp`` is an ASGI app joining them around an ``Invoker`` (a ``LambdaFunction``,
or the local platform's ``UrlTarget`` that picks an alias's version per request), and
``FunctionUrl`` serves it with uvicorn on a free port. An optional ``authorize`` callable
sees each request first (method, path, query, headers, body); when it refuses, the
answer is Lambda's 403 ``{"Message":"Forbidden"}`` (or, for a bad signature, the message
AWS gives for it, in the same shape) and nothing is invoked.

As on AWS: a body is base64-encoded unless its content type is ``text/*`` or
``application/json``; a request whose event exceeds 6 MB gets a 413 without invoking; a
function error or an over-limit response is a 502 ``Internal Server Error``; a response
without ``statusCode`` is a 200 ``application/json`` whose body is the returned JSON.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import parse_qsl

import anyio.to_thread
import orjson
import uvicorn

from modelfn.localstack.lambda_service import Throttled
from modelfn.localstack.runtime_api import REQUEST_LIMIT, new_trace_id
from modelfn.localstack.sigv4 import HttpRequest, SignatureRefused
from modelfn.net.headers import FRAMING, HOP_BY_HOP, latin1
from modelfn.runtime.errors import PayloadTooLarge

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from starlette.types import Receive, Scope, Send

    from modelfn.localstack.lambda_platform import LocalLambda
    from modelfn.localstack.lambda_service import InvocationResult

logger = logging.getLogger(__name__)

#: a function's response headers not passed on: the connection's, and the body's framing
#: (the URL frames the body it decoded from the function's answer itself)
_NOT_PASSED = latin1(HOP_BY_HOP | FRAMING)


@dataclass(frozen=True)
class HttpResponse:
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes


class FunctionIdentity(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def region(self) -> str: ...


class Invoker(Protocol):
    """What a function URL invokes: a ``LambdaFunction`` or anything routing to one."""

    @property
    def config(self) -> FunctionIdentity: ...

    def invoke_payload(
        self,
        payload: bytes,
        timeout: float | None = None,
        *,
        request_id: str | None = None,
        trace_id: str | None = None,
        client_context: str | None = None,
    ) -> InvocationResult: ...


#: Lambda's answer to a function URL request that fails authentication or authorisation
FORBIDDEN = HttpResponse(
    403,
    [(b"content-type", b"application/json"), (b"x-amzn-errortype", b"AccessDeniedException")],
    b'{"Message":"Forbidden"}',
)
#: Lambda's answer when the function has no concurrency to run the request
THROTTLED = HttpResponse(
    429,
    [(b"content-type", b"application/json"), (b"x-amzn-errortype", b"TooManyRequestsException")],
    b'{"Message":"Rate Exceeded."}',
)


def url_id(function_name: str) -> str:
    """A stable 32-character id in the shape of a function URL's ``<url-id>``."""
    digest = hashlib.sha256(function_name.encode()).digest()
    return base64.b32encode(digest).decode().lower()[:32]


def is_text(content_type: str | None) -> bool:
    media_type = (content_type or "").split(";")[0].strip().lower()
    return media_type.startswith("text/") or media_type == "application/json"


def build_event(
    *,
    method: str,
    raw_path: str,
    raw_query: str,
    headers: Iterable[tuple[str, str]],
    body: bytes,
    source_ip: str,
    request_id: str,
    function_name: str,
    region: str,
    protocol: str = "HTTP/1.1",
    epoch_ms: int | None = None,
) -> dict[str, Any]:
    """The payload format 2.0 event a function URL sends for one HTTP request."""
    joined: dict[str, str] = {}
    cookies: list[str] = []
    for name, value in headers:
        name = name.lower()
        if name == "cookie":
            cookies.extend(c.strip() for c in value.split(";") if c.strip())
        else:
            joined[name] = f"{joined[name]},{value}" if name in joined else value
    epoch_ms = int(time.time() * 1000) if epoch_ms is None else epoch_ms
    prefix = url_id(function_name)
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": raw_path,
        "rawQueryString": raw_query,
    }
    if cookies:
        event["cookies"] = cookies
    event["headers"] = joined
    if raw_query:
        params: dict[str, str] = {}
        for key, value in parse_qsl(raw_query, keep_blank_values=True):
            params[key] = f"{params[key]},{value}" if key in params else value
        event["queryStringParameters"] = params
    event["requestContext"] = {
        "accountId": "anonymous",
        "apiId": prefix,
        "domainName": f"{prefix}.lambda-url.{region}.on.aws",
        "domainPrefix": prefix,
        "http": {
            "method": method,
            "path": raw_path,
            "protocol": protocol,
            "sourceIp": source_ip,
            "userAgent": joined.get("user-agent", ""),
        },
        "requestId": request_id,
        "routeKey": "$default",
        "stage": "$default",
        "time": time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(epoch_ms / 1000)),
        "timeEpoch": epoch_ms,
    }
    if body:
        text = None
        if is_text(joined.get("content-type")):
            try:
                text = body.decode()
            except UnicodeDecodeError:
                pass
        event["body"] = text if text is not None else base64.b64encode(body).decode()
        event["isBase64Encoded"] = text is None
    else:
        event["isBase64Encoded"] = False
    return event


def render_response(result: InvocationResult) -> HttpResponse:
    """The HTTP response a function URL makes of an invocation's result."""
    ids = [(b"x-amzn-requestid", result.request_id.encode())]
    if result.error is not None:
        logger.warning(
            "function URL request %s failed: %s: %s",
            result.request_id,
            result.error.error_type,
            result.error.error_message,
        )
        return _internal_error(ids)
    try:
        doc = orjson.loads(result.payload)
    except orjson.JSONDecodeError:
        logger.warning("function URL request %s: response is not JSON", result.request_id)
        return _internal_error(ids)
    if not isinstance(doc, dict) or "statusCode" not in doc:
        return HttpResponse(200, [(b"content-type", b"application/json"), *ids], result.payload)
    try:
        return _structured(doc, ids)
    except (AttributeError, TypeError, ValueError, binascii.Error) as exc:
        logger.warning("function URL request %s: bad response: %s", result.request_id, exc)
        return _internal_error(ids)


def _structured(doc: dict[str, Any], ids: list[tuple[bytes, bytes]]) -> HttpResponse:
    status = int(doc["statusCode"])
    if not 100 <= status <= 599:
        raise ValueError(f"statusCode {status} is not an HTTP status")
    headers = [
        (str(k).lower().encode("latin-1"), str(v).encode("latin-1"))
        for k, v in (doc.get("headers") or {}).items()
    ]
    headers = [(k, v) for k, v in headers if k not in _NOT_PASSED]
    if not any(k == b"content-type" for k, _ in headers):
        headers.append((b"content-type", b"application/json"))
    headers += [(b"set-cookie", str(c).encode("latin-1")) for c in doc.get("cookies") or ()]
    body = doc.get("body")
    if body is None:
        raw = b""
    elif not isinstance(body, str):
        raw = orjson.dumps(body)
    elif doc.get("isBase64Encoded"):
        raw = base64.b64decode(body, validate=True)
    else:
        raw = body.encode()
    return HttpResponse(status, headers + ids, raw)


def _internal_error(ids: list[tuple[bytes, bytes]]) -> HttpResponse:
    return HttpResponse(
        502, [(b"content-type", b"application/json"), *ids], b"Internal Server Error"
    )


def _refused(exc: SignatureRefused) -> HttpResponse:
    if exc.message == "Forbidden":
        return FORBIDDEN
    headers = [(b"content-type", b"application/json"),
               (b"x-amzn-errortype", exc.error_type.encode())]
    return HttpResponse(403, headers, orjson.dumps({"Message": exc.message}))


def _too_large(size: int) -> HttpResponse:
    message = (
        f"Request payload of {size} bytes exceeds the Lambda invocation limit of "
        f"{REQUEST_LIMIT} bytes"
    )
    return HttpResponse(
        413, [(b"content-type", b"application/json")], orjson.dumps({"message": message})
    )


class FunctionUrlApp:
    """ASGI app: every request, whatever its method and path, invokes ``function``."""

    def __init__(
        self, function: Invoker, authorize: Callable[[HttpRequest], bool] | None = None
    ) -> None:
        self.function = function
        self.authorize = authorize

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:  # read it all, keeping at most the limit, so the client sees the 413
            message = await receive()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size <= REQUEST_LIMIT:
                chunks.append(chunk)
            more = message.get("more_body", False)
        response = await self._respond(scope, b"".join(chunks), size)
        await send(
            {"type": "http.response.start", "status": response.status, "headers": response.headers}
        )
        await send({"type": "http.response.body", "body": response.body})

    async def _respond(self, scope: Scope, body: bytes, size: int) -> HttpResponse:
        if size > REQUEST_LIMIT:
            return _too_large(size)
        client = scope.get("client") or ("127.0.0.1", 0)
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]]
        raw_path = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
        raw_query = scope["query_string"].decode("latin-1")
        if self.authorize is not None:
            request = HttpRequest(scope["method"], raw_path, raw_query, list(headers), body)
            try:  # on the loop: it must be quick (cached reads, one hash of the body)
                if not self.authorize(request):
                    return FORBIDDEN
            except SignatureRefused as exc:
                return _refused(exc)
        names = {name for name, _ in headers}
        trace_id = new_trace_id()
        server = scope.get("server") or ("127.0.0.1", 80)
        headers += [
            (name, value)
            for name, value in (
                ("x-amzn-trace-id", trace_id),
                ("x-forwarded-for", client[0]),
                ("x-forwarded-proto", scope.get("scheme", "http")),
                ("x-forwarded-port", str(server[1])),
            )
            if name not in names
        ]
        request_id = str(uuid.uuid4())
        event = build_event(
            method=scope["method"],
            raw_path=raw_path,
            raw_query=raw_query,
            headers=headers,
            body=body,
            source_ip=client[0],
            request_id=request_id,
            function_name=self.function.config.name,
            region=self.function.config.region,
            protocol=f"HTTP/{scope.get('http_version', '1.1')}",
        )
        payload = orjson.dumps(event)
        invoke = partial(
            self.function.invoke_payload, payload, request_id=request_id, trace_id=trace_id
        )
        try:
            result = await anyio.to_thread.run_sync(invoke)
        except PayloadTooLarge:
            return _too_large(len(payload))
        except Throttled:
            return THROTTLED
        response = render_response(result)
        response.headers.append((b"x-amzn-trace-id", trace_id.encode()))
        return response


class FunctionUrl:
    """``FunctionUrlApp`` served by uvicorn on ``host`` (a free port unless ``port``)."""

    def __init__(
        self,
        function: Invoker,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        authorize: Callable[[HttpRequest], bool] | None = None,
    ) -> None:
        self.function = function
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, port))
        self.host, self.port = self._socket.getsockname()[:2]
        config = uvicorn.Config(
            FunctionUrlApp(function, authorize),
            lifespan="off",
            ws="none",
            access_log=False,
            log_level="warning",
            server_header=False,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 10.0) -> FunctionUrl:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"function URL server on {self.url} did not start")
            time.sleep(0.005)
        return self

    def close(self) -> None:
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        self._socket.close()

    def __enter__(self) -> FunctionUrl:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()


@dataclass(frozen=True)
class _Identity:
    name: str
    region: str


@dataclass
class UrlConfig:
    """A function URL config as Lambda keeps it, and the front serving it here."""

    function_name: str
    qualifier: str | None
    auth_type: str
    cors: dict[str, Any] | None
    invoke_mode: str
    created: str
    modified: str
    front: FunctionUrl

    @property
    def url(self) -> str:
        return f"{self.front.url}/"


class UrlTarget:
    """A function URL's target: its version, or its alias's versions by weight."""

    def __init__(self, platform: LocalLambda, function_name: str, qualifier: str | None) -> None:
        self.platform = platform
        self.qualifier = qualifier
        self.config = _Identity(function_name, platform.region)

    def invoke_payload(
        self,
        payload: bytes,
        timeout: float | None = None,
        *,
        request_id: str | None = None,
        trace_id: str | None = None,
        client_context: str | None = None,
    ) -> InvocationResult:
        _, result = self.platform.invoke(
            self.config.name, self.qualifier, payload, timeout=timeout, request_id=request_id,
            trace_id=trace_id, client_context=client_context,
        )
        return result
