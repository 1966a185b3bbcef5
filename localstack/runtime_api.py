"""The AWS Lambda Runtime API on loopback: what ``awslambdaric`` talks to.

``RuntimeApiServer`` serves one execution environment's endpoint: ``invocation/next``
long-polls for the next event, ``invocation/{id}/response`` and ``/error`` finish it, and
``init/error`` reports a handler that could not load. HTTP/1.1 connections stay alive with
Nagle's algorithm off: awslambdaric's curl client reuses one connection, and with Nagle
every reply would wait for the client's delayed ACK.
"""

from __future__ import annotations

import collections
import logging
import socketserver
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

import orjson

from modelfn.platforms import aws_lambda

if TYPE_CHECKING:
    from collections.abc import Callable

REQUEST_LIMIT = aws_lambda.PAYLOAD_BYTES  # Invoke request payload: 6291456 bytes
RESPONSE_LIMIT = aws_lambda.PAYLOAD_BYTES + 100  # Lambda reports 6291556 bytes for responses
API = "/2018-06-01/runtime"
_NEXT = f"{API}/invocation/next"
_INVOCATION = f"{API}/invocation/"
_INIT_ERROR = f"{API}/init/error"
_ERROR_TYPE_HEADER = "Lambda-Runtime-Function-Error-Type"

logger = logging.getLogger("modelfn.localstack.lambda_service")


@dataclass(frozen=True)
class FunctionError:
    """An invocation error as Lambda reports it: ``errorType``, ``errorMessage``, ``stackTrace``."""

    error_type: str
    error_message: str
    stack_trace: list[str] = field(default_factory=list)

    @classmethod
    def from_body(cls, body: bytes, error_type: str | None = None) -> FunctionError:
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError:
            doc = None
        if not isinstance(doc, dict):
            return cls(error_type or "Runtime.Unknown", body.decode("utf-8", "replace"))
        trace = doc.get("stackTrace")
        return cls(
            str(doc.get("errorType") or error_type or "Runtime.Unknown"),
            str(doc.get("errorMessage", "")),
            [str(line) for line in trace] if isinstance(trace, list) else [],
        )

    def to_json(self) -> bytes:
        doc = {"errorMessage": self.error_message, "errorType": self.error_type}
        return orjson.dumps({**doc, "stackTrace": self.stack_trace})



@dataclass(eq=False)
class Invocation:
    payload: bytes
    timeout: float
    request_id: str
    trace_id: str
    client_context: str | None
    delivered: threading.Event = field(default_factory=threading.Event)  # or failed
    done: threading.Event = field(default_factory=threading.Event)
    delivered_at: float = 0.0
    deadline_ms: int = 0
    response: bytes = b""
    error: FunctionError | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def deliver(self) -> None:
        self.delivered_at = time.monotonic()
        self.deadline_ms = int((time.time() + self.timeout) * 1000)
        self.delivered.set()

    def finish(self, response: bytes = b"", error: FunctionError | None = None) -> bool:
        """Record the outcome; only the first call counts (a late response loses to a timeout)."""
        with self._lock:
            if self.done.is_set():
                return False
            self.response, self.error = response, error
            self.done.set()
        self.delivered.set()
        return True


class RuntimeApiServer(ThreadingHTTPServer):
    """The Lambda Runtime API (2018-06-01) of one execution environment, on 127.0.0.1."""

    daemon_threads = True

    def __init__(self, function_arn: str) -> None:
        super().__init__(("127.0.0.1", 0), _RuntimeApiHandler)
        self.function_arn = function_arn
        self.init_error: FunctionError | None = None
        self.first_poll_at: float | None = None  # when the runtime finished init
        self._cond = threading.Condition()
        self._queue: collections.deque[Invocation] = collections.deque()
        self._inflight: dict[str, Invocation] = {}
        self._closed = False
        threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True).start()

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host name (getfqdn): a DNS lookup per cold start.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = "127.0.0.1", self.server_address[1]

    @property
    def address(self) -> str:
        """``host:port``, the value of ``AWS_LAMBDA_RUNTIME_API``."""
        host, port = self.server_address[:2]
        return f"{host!s}:{port}"

    def submit(self, invocation: Invocation) -> None:
        with self._cond:
            if self.init_error is None and not self._closed:
                self._queue.append(invocation)
                self._cond.notify()
                return
        invocation.finish(error=self.init_error or FunctionError("Runtime.Closed", "closed"))

    def next_invocation(self) -> Invocation | None:
        """Block until there is work (long poll); ``None`` once the server closes."""
        with self._cond:
            if self.first_poll_at is None:
                self.first_poll_at = time.monotonic()
            while True:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return None
                invocation = self._queue.popleft()
                if not invocation.done.is_set():  # skip one its caller gave up on
                    break
            self._inflight[invocation.request_id] = invocation
        invocation.deliver()
        return invocation

    def complete(
        self, request_id: str, response: bytes = b"", error: FunctionError | None = None
    ) -> bool:
        with self._cond:
            invocation = self._inflight.pop(request_id, None)
        return invocation is not None and invocation.finish(response, error)

    def fail(self, error_for: Callable[[str], FunctionError], *, init: bool = False) -> None:
        """Fail everything queued or in flight; an init error also fails every later submit."""
        with self._cond:
            if init and self.init_error is None:
                self.init_error = error_for("")
            pending = [*self._queue, *self._inflight.values()]
            self._queue.clear()
            self._inflight.clear()
        for invocation in pending:
            invocation.finish(error=error_for(invocation.request_id))

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self.shutdown()
        self.server_close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A killed runtime resets its connection: expected, not worth a traceback on stderr.
        logger.debug(
            "runtime api %s: error serving %s", self.address, client_address, exc_info=True
        )


class _RuntimeApiHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: RuntimeApiServer

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("runtime api %s: " + format, self.server.address, *args)

    def do_GET(self) -> None:
        if self.path != _NEXT:
            self._reply(404, "UnknownPath", f"unknown path {self.path}")
            return
        invocation = self.server.next_invocation()
        if invocation is None:
            self.close_connection = True
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(invocation.payload)))
        self.send_header("Lambda-Runtime-Aws-Request-Id", invocation.request_id)
        self.send_header("Lambda-Runtime-Deadline-Ms", str(invocation.deadline_ms))
        self.send_header("Lambda-Runtime-Invoked-Function-Arn", self.server.function_arn)
        self.send_header("Lambda-Runtime-Trace-Id", invocation.trace_id)
        if invocation.client_context is not None:
            self.send_header("Lambda-Runtime-Client-Context", invocation.client_context)
        self.end_headers()
        self.wfile.write(invocation.payload)

    def do_POST(self) -> None:
        body, size = self._read_body(RESPONSE_LIMIT)
        error_type = self.headers.get(_ERROR_TYPE_HEADER)
        if self.path == _INIT_ERROR:
            error = FunctionError.from_body(body or b"", error_type)
            logger.warning("%s: init error %s", self.server.function_arn, error.to_json())
            self.server.fail(lambda _request_id: error, init=True)
            self._accepted()
            return
        request_id, _, action = self.path.removeprefix(_INVOCATION).partition("/")
        if not self.path.startswith(_INVOCATION) or action not in ("response", "error"):
            self._reply(404, "UnknownPath", f"unknown path {self.path}")
        elif body is None:
            message = f"Response payload size ({size} bytes) exceeded maximum allowed payload "
            message += f"size ({RESPONSE_LIMIT} bytes)."
            error = FunctionError("Function.ResponseSizeTooLarge", message)
            self.server.complete(request_id, error=error)
            self._reply(413, "RequestEntityTooLarge", message)
        elif action == "response" and self.server.complete(request_id, response=body):
            self._accepted()
        elif action == "error" and self.server.complete(
            request_id, error=FunctionError.from_body(body, error_type)
        ):
            self._accepted()
        else:
            self._reply(400, "InvalidRequestID", f"Invalid request ID: {request_id}")

    def _read_body(self, limit: int) -> tuple[bytes | None, int]:
        """The request body, or ``None`` (drained) when it is over ``limit`` bytes."""
        size = int(self.headers.get("Content-Length") or 0)
        if size <= limit:
            return self.rfile.read(size), size
        remaining = size
        while remaining > 0 and (chunk := self.rfile.read(min(remaining, 1 << 20))):
            remaining -= len(chunk)
        return None, size

    def _accepted(self) -> None:
        self._reply(202, "", "", b'{"status":"OK"}')

    def _reply(self, status: int, error_type: str, message: str, body: bytes = b"") -> None:
        body = body or orjson.dumps({"errorMessage": message, "errorType": error_type})
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)



def new_trace_id() -> str:
    """An X-Ray trace header value like Lambda passes in ``Lambda-Runtime-Trace-Id``."""
    return f"Root=1-{int(time.time()):08x}-{uuid.uuid4().hex[:24]};Sampled=0"
