"""A local AWS Lambda: the Runtime API emulated on loopback, driving the real ``awslambdaric``.

Each execution environment (*sandbox*) is a ``python -m awslambdaric <module.handler>`` child
with its own Runtime API server on 127.0.0.1, as each Lambda environment has its own endpoint.
It serves one invocation at a time and is reused while it lives (warm). Init errors, runtime
exits and timeouts fail the invocation with Lambda's error shapes and discard the sandbox.
The server keeps HTTP/1.1 connections alive with Nagle's algorithm off: awslambdaric's curl
client reuses one connection, and with Nagle every reply would wait for a delayed ACK.
"""

from __future__ import annotations

import collections
import logging
import os
import signal
import socketserver
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from modelfn.runtime.errors import ModelfnError, PayloadTooLarge

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

REQUEST_LIMIT = 6 * 1024 * 1024  # Invoke request payload: 6291456 bytes
RESPONSE_LIMIT = 6 * 1024 * 1024 + 100  # Lambda reports 6291556 bytes for responses
INIT_LIMIT = 10.0  # seconds of on-demand init before Lambda moves init into the invoke
ACCOUNT_ID = "000000000000"
API = "/2018-06-01/runtime"
_NEXT = f"{API}/invocation/next"
_INVOCATION = f"{API}/invocation/"
_INIT_ERROR = f"{API}/init/error"
_ERROR_TYPE_HEADER = "Lambda-Runtime-Function-Error-Type"
# Variables of the parent that would switch awslambdaric into another mode.
_SCRUBBED_ENV = ("AWS_LAMBDA_MAX_CONCURRENCY", "AWS_EXECUTION_ENV", "_LAMBDA_TELEMETRY_LOG_FD")

logger = logging.getLogger(__name__)


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


@dataclass(frozen=True)
class InvocationResult:
    """One invocation's outcome. On error ``payload`` is the error document Lambda returns."""

    request_id: str
    payload: bytes
    error: FunctionError | None
    cold: bool
    init_duration_ms: float | None
    duration_ms: float

    @property
    def ok(self) -> bool:
        return self.error is None

    def json(self) -> Any:
        return orjson.loads(self.payload)


@dataclass(eq=False)
class _Invocation:
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
        self._queue: collections.deque[_Invocation] = collections.deque()
        self._inflight: dict[str, _Invocation] = {}
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

    def submit(self, invocation: _Invocation) -> None:
        with self._cond:
            if self.init_error is None and not self._closed:
                self._queue.append(invocation)
                self._cond.notify()
                return
        invocation.finish(error=self.init_error or FunctionError("Runtime.Closed", "closed"))

    def next_invocation(self) -> _Invocation | None:
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


class _Sandbox:
    """One execution environment: a Runtime API server and the runtime process it drives."""

    def __init__(self, config: FunctionConfig) -> None:
        self.name = config.name
        self.api = RuntimeApiServer(config.arn)
        self.started_at = time.monotonic()
        self._killed = False
        try:
            self.process = subprocess.Popen(
                [config.python, "-m", "awslambdaric", config.handler],
                cwd=config.task_root,
                env=config.child_env(self.api.address),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own group, so a kill takes its children too
            )
        except OSError:
            self.api.close()
            raise
        self._pump = threading.Thread(target=self._forward_output, daemon=True)
        self._pump.start()
        threading.Thread(target=self._watch, daemon=True).start()

    @property
    def alive(self) -> bool:
        return not self._killed and self.process.poll() is None and self.api.init_error is None

    @property
    def init_duration_ms(self) -> float | None:
        ready = self.api.first_poll_at
        return None if ready is None else (ready - self.started_at) * 1000

    def kill(self) -> None:
        if self._killed:
            return
        self._killed = True
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()
        self._pump.join(timeout=5)
        self.api.close()
        if self.process.stdout is not None:
            self.process.stdout.close()

    def _forward_output(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            logger.info("[%s %d] %s", self.name, self.process.pid, line.decode(errors="replace"))

    def _watch(self) -> None:
        code = self.process.wait()
        if code < 0:
            reason = f"signal: {(signal.strsignal(-code) or str(-code)).lower()}"
        else:
            reason = f"exit status {code}"
        if not self._killed:
            logger.warning(
                "%s: runtime process %d exited (%s)", self.name, self.process.pid, reason
            )
        self.api.fail(
            lambda request_id: FunctionError(
                "Runtime.ExitError",
                f"RequestId: {request_id} Error: Runtime exited with error: {reason}",
            )
        )


@dataclass(frozen=True)
class FunctionConfig:
    """A function as Lambda knows it: handler, code location, environment and limits.

    ``init_timeout`` bounds the init phase; by default it is the larger of Lambda's 10 s
    on-demand init and the function timeout (Lambda retries a longer init inside the invoke).
    Up to ``max_concurrency`` execution environments run at once; more invokes wait.
    """

    handler: str
    task_root: str | Path = "."
    path: Sequence[str | Path] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    name: str = "function"
    timeout: float = 3.0
    memory_mb: int = 128
    region: str = "us-east-1"
    version: str = "$LATEST"
    init_timeout: float | None = None
    max_concurrency: int = 1
    python: str = sys.executable

    @property
    def arn(self) -> str:
        return f"arn:aws:lambda:{self.region}:{ACCOUNT_ID}:function:{self.name}"

    def child_env(self, runtime_api: str) -> dict[str, str]:
        """The runtime process's environment: the parent's, Lambda's variables, then ``env``."""
        env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED_ENV}
        task_root = str(Path(self.task_root).resolve())
        pythonpath = [task_root, *(str(Path(p).resolve()) for p in self.path)]
        stream = f"{time.strftime('%Y/%m/%d')}/[{self.version}]{uuid.uuid4().hex}"
        env.update(
            AWS_LAMBDA_RUNTIME_API=runtime_api,
            _HANDLER=self.handler,
            AWS_LAMBDA_FUNCTION_NAME=self.name,
            AWS_LAMBDA_FUNCTION_MEMORY_SIZE=str(self.memory_mb),
            AWS_LAMBDA_FUNCTION_VERSION=self.version,
            AWS_LAMBDA_INITIALIZATION_TYPE="on-demand",
            AWS_LAMBDA_LOG_GROUP_NAME=f"/aws/lambda/{self.name}",
            AWS_LAMBDA_LOG_STREAM_NAME=stream,
            AWS_REGION=self.region,
            AWS_DEFAULT_REGION=self.region,
            LAMBDA_TASK_ROOT=task_root,
            PYTHONPATH=os.pathsep.join([*pythonpath, *filter(None, [env.get("PYTHONPATH")])]),
            PYTHONUNBUFFERED="1",
            TZ=":UTC",
        )
        env.update(self.env)
        return env


class LambdaFunction:
    """A function run locally as Lambda runs it: ``invoke`` an event, get the response.

    The first invoke starts an execution environment (cold); later ones reuse it (warm).
    """

    def __init__(self, config: FunctionConfig) -> None:
        if config.max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        self.config = config
        self._cond = threading.Condition()
        self._idle: list[_Sandbox] = []
        self._sandboxes: set[_Sandbox] = set()
        self._closed = False

    def invoke(
        self,
        event: Any,
        timeout: float | None = None,
        *,
        client_context: Mapping[str, Any] | None = None,
    ) -> InvocationResult:
        """Invoke with a JSON-serialisable event (``RequestResponse``)."""
        context = None if client_context is None else orjson.dumps(client_context).decode()
        return self.invoke_payload(orjson.dumps(event), timeout, client_context=context)

    def invoke_payload(
        self,
        payload: bytes,
        timeout: float | None = None,
        *,
        request_id: str | None = None,
        trace_id: str | None = None,
        client_context: str | None = None,
    ) -> InvocationResult:
        """Invoke with an already serialised event; raises ``PayloadTooLarge`` over 6 MB."""
        if len(payload) > REQUEST_LIMIT:
            raise PayloadTooLarge(len(payload), REQUEST_LIMIT)
        timeout = self.config.timeout if timeout is None else timeout
        ids = (request_id or str(uuid.uuid4()), trace_id or new_trace_id())
        while True:
            invocation = _Invocation(payload, timeout, *ids, client_context)
            sandbox, cold = self._acquire()
            try:
                self._run(sandbox, invocation)
            finally:
                self._release(sandbox)
            # A warm runtime that exited while idle: Lambda would have replaced it; so do we.
            if cold or invocation.delivered_at:
                break
        error, started = invocation.error, invocation.delivered_at
        return InvocationResult(
            request_id=invocation.request_id,
            payload=invocation.response if error is None else error.to_json(),
            error=error,
            cold=cold,
            init_duration_ms=sandbox.init_duration_ms if cold else None,
            duration_ms=(time.monotonic() - started) * 1000 if started else 0.0,
        )

    def _run(self, sandbox: _Sandbox, invocation: _Invocation) -> None:
        init_budget = self.config.init_timeout or max(INIT_LIMIT, invocation.timeout)
        sandbox.api.submit(invocation)
        if not invocation.delivered.wait(init_budget):
            phase = f"Init timed out after {init_budget:.2f} seconds"
        elif not invocation.done.wait(
            invocation.delivered_at + invocation.timeout - time.monotonic()
        ):
            phase = f"Task timed out after {invocation.timeout:.2f} seconds"
        else:
            return
        message = f"RequestId: {invocation.request_id} Error: {phase}"
        if invocation.finish(error=FunctionError("Sandbox.Timedout", message)):
            logger.warning("%s: %s", self.config.name, message)
            sandbox.kill()

    def _acquire(self) -> tuple[_Sandbox, bool]:
        dead: list[_Sandbox] = []
        try:
            with self._cond:
                while True:
                    if self._closed:
                        raise ModelfnError(f"Lambda function {self.config.name!r} is closed")
                    while self._idle:
                        sandbox = self._idle.pop()
                        if sandbox.alive:
                            return sandbox, False
                        self._sandboxes.discard(sandbox)
                        dead.append(sandbox)
                    if len(self._sandboxes) < self.config.max_concurrency:
                        break
                    self._cond.wait()
                sandbox = _Sandbox(self.config)
                self._sandboxes.add(sandbox)
                return sandbox, True
        finally:
            for sandbox in dead:
                sandbox.kill()

    def _release(self, sandbox: _Sandbox) -> None:
        with self._cond:
            keep = sandbox.alive and not self._closed
            if keep:
                self._idle.append(sandbox)
            else:
                self._sandboxes.discard(sandbox)
            self._cond.notify()
        if not keep:
            sandbox.kill()

    def close(self) -> None:
        """Kill every execution environment; invocations in flight fail."""
        with self._cond:
            self._closed = True
            sandboxes = list(self._sandboxes)
            self._sandboxes.clear()
            self._idle.clear()
            self._cond.notify_all()
        for sandbox in sandboxes:
            sandbox.kill()

    def __enter__(self) -> LambdaFunction:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
