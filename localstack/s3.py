"""The embedded S3 emulator: moto's S3 server on 127.0.0.1, speaking the real wire protocol.

``S3Emulator`` serves the same WSGI app as moto's ``ThreadedMotoServer`` on a free
loopback port, with two additions a test or the local dev stack needs:

- a request log (``requests``, ``count("GetObject")``), so a test can prove how
  many objects a code path read through any client;
- conditional writes made atomic. Moto checks ``If-None-Match: *`` and then
  stores the object in two steps, so two requests racing on server threads
  could both succeed; real S3 guarantees exactly one winner. The emulator runs
  conditional writes one at a time so it keeps S3's guarantee.

Moto keeps its state per process, not per server: emulators in one process
share buckets (use distinct bucket names, or ``reset()``).

Given ``credentials`` (the local platform's, a secret made per start), the endpoint checks
every request's SigV4 signature against them and IAM users' active keys, with the
function URLs' verifier (``localstack/sigv4.py``), and refuses a browser's request (one with
an ``Origin``) outright: 403, in the error shape of the service asked. Without, it takes any
signature, as moto does.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import threading
import urllib.request
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import boto3
import orjson
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import BaseWSGIServer, make_server

from modelfn.localstack.sigv4 import HttpRequest, SignatureRefused, check_sigv4

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping
    from typing import TypeAlias

    from mypy_boto3_s3 import S3Client

    WsgiApp: TypeAlias = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

REGION = "us-east-1"
#: services whose errors are XML documents (the others answer JSON)
_XML_SERVICES = frozenset({"s3", "iam", "sts", "sqs", "sns"})
_SERVICE = re.compile(r"Credential=[^/]+/[^/]+/[^/]+/([^/]+)/aws4_request")

#: (method, addresses an object) -> S3 operation, for path-style requests
_OPERATIONS: dict[tuple[str, bool], str] = {
    ("GET", True): "GetObject",
    ("HEAD", True): "HeadObject",
    ("PUT", True): "PutObject",
    ("DELETE", True): "DeleteObject",
    ("POST", True): "MultipartUpload",
    ("GET", False): "ListObjects",
    ("HEAD", False): "HeadBucket",
    ("PUT", False): "CreateBucket",
    ("DELETE", False): "DeleteBucket",
    ("POST", False): "DeleteObjects",
}


@dataclass(frozen=True, slots=True)
class S3Request:
    method: str
    service: str  # from the request signature: "s3", "iam", ...
    bucket: str
    key: str
    query: str

    @property
    def operation(self) -> str:
        if self.service != "s3":
            return f"{self.service}:{self.method}"
        return _OPERATIONS.get((self.method, bool(self.key)), self.method)


class _QuietHandler(MotoRequestHandler):
    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        return None


class S3Emulator:
    """``with S3Emulator() as s3: s3.create_bucket("models"); client = s3.client()``."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *,
                 credentials: Mapping[str, str] | None = None) -> None:
        self.credentials = None if credentials is None else dict(credentials)
        self._host = host
        self._port = port
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None
        self._conditional = threading.Lock()
        self._log_lock = threading.Lock()
        self.requests: list[S3Request] = []
        self._app: WsgiApp = DomainDispatcherApplication(create_backend_app)

    # ---- lifecycle ----------------------------------------------------------------------------

    def start(self) -> S3Emulator:
        self._server = make_server(
            self._host, self._port, self._wrap(), threaded=True,
            request_handler=_QuietHandler,
        )
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="s3-emulator", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join()
        self._server = None
        self._thread = None

    def __enter__(self) -> S3Emulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def endpoint_url(self) -> str:
        if self._server is None:
            raise RuntimeError("the S3 emulator is not running; call start() first")
        return f"http://{self._host}:{self._server.server_port}"

    # ---- use ----------------------------------------------------------------------------------

    def client(
        self,
        *,
        access_key: str | None = None,
        secret_key: str | None = None,
        max_attempts: int = 2,
    ) -> S3Client:
        """A boto3 S3 client for this emulator (its credentials, else dummy ones; us-east-1,
        path style)."""
        if access_key is None or secret_key is None:
            access_key, secret_key = self._key_pair()
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name=REGION,
            aws_access_key_id=access_key,
            aws_secret_access_key=secret_key,
            config=Config(
                retries={"max_attempts": max_attempts, "mode": "standard"},
                s3={"addressing_style": "path"},
            ),
        )

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)

    def count(self, operation: str, *, key_suffix: str = "") -> int:
        """How many logged requests were ``operation`` (e.g. "GetObject") on matching keys."""
        with self._log_lock:
            return sum(
                1 for r in self.requests
                if r.operation == operation and r.key.endswith(key_suffix)
            )

    def operations(self) -> Counter[str]:
        with self._log_lock:
            return Counter(r.operation for r in self.requests)

    def clear_requests(self) -> None:
        with self._log_lock:
            self.requests.clear()

    def reset(self) -> None:
        """Drop every bucket and object (of every emulator in this process: moto's state)."""
        self._moto_api("reset", b"")

    @contextlib.contextmanager
    def enforce_auth(self) -> Iterator[None]:
        """Check signatures against moto's IAM and evaluate IAM policies, as AWS does.

        Process-wide while active (a moto setting); the dummy credentials of
        ``client()`` are then unknown. Create users through ``iam_client()`` first.
        """
        self._moto_api("reset-auth", b"0")
        try:
            yield
        finally:
            self._moto_api("reset-auth", b"inf")

    def iam_client(self) -> Any:
        key, secret = self._key_pair()
        return boto3.client(
            "iam", endpoint_url=self.endpoint_url, region_name=REGION,
            aws_access_key_id=key, aws_secret_access_key=secret,
        )

    def _key_pair(self) -> tuple[str, str]:
        return next(iter(self.credentials.items())) if self.credentials else ("testing",
                                                                              "testing")

    def secret_for(self, access_key: str) -> str | None:
        """The secret of a key this endpoint knows: its own, or an IAM user's active one."""
        if self.credentials and access_key in self.credentials:
            return self.credentials[access_key]
        from moto.core.models import DEFAULT_ACCOUNT_ID
        from moto.iam.models import iam_backends

        key = iam_backends[DEFAULT_ACCOUNT_ID]["aws"].access_keys.get(access_key)
        return None if key is None or key.status != "Active" else str(key.secret_access_key)

    def user_credentials(self, user: str, policy: dict[str, Any] | None = None) -> tuple[str, str]:
        """Create an IAM user (with an optional inline policy); its access key pair."""
        iam = self.iam_client()
        iam.create_user(UserName=user)
        if policy is not None:
            iam.put_user_policy(
                UserName=user, PolicyName=f"{user}-policy", PolicyDocument=json.dumps(policy)
            )
        key = iam.create_access_key(UserName=user)["AccessKey"]
        return str(key["AccessKeyId"]), str(key["SecretAccessKey"])

    # ---- internals ----------------------------------------------------------------------------

    def _moto_api(self, action: str, body: bytes) -> None:
        url = f"{self.endpoint_url}/moto-api/{action}"
        signed = AWSRequest(method="POST", url=url, data=body,
                            headers={"Content-Type": "text/plain"})
        SigV4Auth(Credentials(*self._key_pair()), "s3", REGION).add_auth(signed)
        request = urllib.request.Request(url, data=body, method="POST",
                                         headers=dict(signed.headers.items()))
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()

    def add_middleware(self, middleware: Callable[[WsgiApp], WsgiApp]) -> None:
        """Put ``middleware`` in front of moto (e.g. the local Lambda's own API paths).

        Every service moto serves shares this endpoint (moto dispatches by the service
        in the request's SigV4 credential scope): S3, IAM, ECR, Lambda, ...
        """
        self._app = middleware(self._app)

    def _wrap(self) -> WsgiApp:
        def logged(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            if self.credentials is not None:
                refused = self._refusal(environ)
                if refused is not None:
                    return refused(start_response)
            path = unquote(environ.get("PATH_INFO", ""))
            if not path.startswith("/moto-api"):
                self._log(environ, path)
            app = self._app
            if environ.get("HTTP_IF_NONE_MATCH") == "*" and environ["REQUEST_METHOD"] == "PUT":
                with self._conditional:
                    return list(app(environ, start_response))
            return app(environ, start_response)

        return logged

    def _refusal(self, environ: dict[str, Any]) -> _Refusal | None:
        """Why this request may not reach moto (a browser's, or not validly signed), if so.
        The body is read to hash it, and put back for moto."""
        match = _SERVICE.search(environ.get("HTTP_AUTHORIZATION", ""))
        service = match.group(1) if match else "s3"
        if environ.get("HTTP_ORIGIN") is not None:
            return _Refusal(service, "AccessDenied", "requests from a browser are refused")
        size = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(size) if size else b""
        environ["wsgi.input"] = io.BytesIO(body)
        raw = environ.get("RAW_URI") or environ.get("REQUEST_URI") or environ["PATH_INFO"]
        path, _, query = str(raw).partition("?")
        headers = [(key[5:].replace("_", "-").lower(), str(value))
                   for key, value in environ.items() if key.startswith("HTTP_")]
        headers += [(key.replace("_", "-").lower(), str(environ[key]))
                    for key in ("CONTENT_TYPE", "CONTENT_LENGTH") if environ.get(key)]
        request = HttpRequest(environ["REQUEST_METHOD"], path, query, headers, body)
        try:
            check_sigv4(request, self.secret_for, region=REGION, service=None)
        except SignatureRefused as exc:
            return _Refusal(service, exc.error_type, exc.message)
        return None

    def _log(self, environ: dict[str, Any], path: str) -> None:
        bucket, _, key = path.lstrip("/").partition("/")
        match = _SERVICE.search(environ.get("HTTP_AUTHORIZATION", ""))
        request = S3Request(
            method=environ["REQUEST_METHOD"],
            service=match.group(1) if match else "s3",
            bucket=bucket,
            key=key,
            query=environ.get("QUERY_STRING", ""),
        )
        with self._log_lock:
            self.requests.append(request)


@dataclass(frozen=True)
class _Refusal:
    """A 403 in the error shape of the service asked: XML for S3 and IAM, JSON for the rest."""

    service: str
    code: str
    message: str

    def __call__(self, start_response: Callable[..., Any]) -> Iterable[bytes]:
        if self.service in _XML_SERVICES:
            text = self.message.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            body = (f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{self.code}</Code>"
                    f"<Message>{text}</Message></Error>").encode()
            kind = "application/xml"
        else:
            body, kind = orjson.dumps({"message": self.message}), "application/json"
        start_response("403 Forbidden", [("Content-Type", kind), ("x-amzn-ErrorType", self.code),
                                          ("Content-Length", str(len(body)))])
        return [body]
