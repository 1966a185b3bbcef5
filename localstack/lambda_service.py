"""The emulated Lambda service: execution environments running the real ``awslambdaric``.

Each execution environment (*sandbox*) is a ``python -m awslambdaric <module.handler>`` child
(or a container, through a ``Launcher``) supervised by ``modelfn.process.Process``, with its
own Runtime API server on 127.0.0.1, as each Lambda environment has its own endpoint.
It serves one invocation at a time and is reused while it lives (warm). Init errors, runtime
exits and timeouts fail the invocation with Lambda's error shapes and discard the sandbox.
The server keeps HTTP/1.1 connections alive with Nagle's algorithm off: awslambdaric's curl
client reuses one connection, and with Nagle every reply would wait for a delayed ACK.

Each process environment has its own temporary directory (``TMPDIR``, Lambda's ``/tmp``)
under ``FunctionConfig.tmp_root``; it is removed once the process is gone, whichever way it
went (discarded, reaped, timed out, crashed), so what the function wrote there (a model
checkout) never outlives it.

A function whose ``FunctionConfig.log_path`` is set writes its environments' output there,
every line whole, as Lambda sends it to the function's log group; without one each line
goes to this module's logger.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol

import orjson

from modelfn.localstack.runtime_api import (
    REQUEST_LIMIT,
    FunctionError,
    Invocation,
    RuntimeApiServer,
    new_trace_id,
)
from modelfn.process.supervisor import Process
from modelfn.runtime.errors import ModelfnError, PayloadTooLarge

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

INIT_LIMIT = 10.0  # seconds of on-demand init before Lambda moves init into the invoke
ACCOUNT_ID = "000000000000"
# Variables of the parent that would switch awslambdaric into another mode.
_SCRUBBED_ENV = ("AWS_LAMBDA_MAX_CONCURRENCY", "AWS_EXECUTION_ENV", "_LAMBDA_TELEMETRY_LOG_FD")

logger = logging.getLogger(__name__)


class Throttled(ModelfnError):
    """Lambda refused to run the invocation: no concurrency is available to the function."""

    status_code = 429

    def __init__(self, function_name: str, reason: str) -> None:
        super().__init__(f"Rate Exceeded. ({function_name}: {reason})")
        self.reason = reason


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


class _Sandbox:
    """One execution environment: a Runtime API server and the runtime process it drives."""

    def __init__(self, config: FunctionConfig, log: _LogFile | None = None) -> None:
        self.name = config.name
        self.log = log
        self.api = RuntimeApiServer(config.arn)
        self.launcher = config.launcher
        self.id = f"{config.name}-{uuid.uuid4().hex[:12]}"
        env = config.child_env(self.api.address)
        self.tmp: Path | None = None
        if self.launcher is None:  # a container has its own /tmp
            root = None if config.tmp_root is None else Path(config.tmp_root)
            if root is not None:
                root.mkdir(parents=True, exist_ok=True)
            self.tmp = Path(tempfile.mkdtemp(prefix=f"{self.id}-", dir=root))
            env["TMPDIR"] = str(self.tmp)
        self.process = Process(
            config.argv(env, self.id),
            name=f"{config.name}:{config.version}",
            env=env,
            cwd=config.task_root,
            on_line=self._forward if log is None else log.write,
        )
        self._killed = False
        try:
            self.process.start()
        except OSError:
            self.api.close()
            self._remove_tmp()
            raise
        self.started_at = self.process.started_at
        self.idle_since = self.started_at
        threading.Thread(target=self._watch, name=f"{self.process.name}-watch", daemon=True).start()

    @property
    def alive(self) -> bool:
        return not self._killed and self.process.running and self.api.init_error is None

    @property
    def init_duration_ms(self) -> float | None:
        ready = self.api.first_poll_at
        return None if ready is None else (ready - self.started_at) * 1000

    def kill(self) -> None:
        """Lambda freezes and then discards an environment: SIGKILL to its group, no drain."""
        if self._killed:
            return
        self._killed = True
        self.process.kill()  # and reaped: nothing writes to its TMPDIR any more
        self._remove_tmp()
        if self.launcher is not None:
            self.launcher.discard(self.id)
        self.api.close()

    def _remove_tmp(self) -> None:
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def _forward(self, line: str) -> None:
        logger.info("[%s %d] %s", self.name, self.process.pid, line)

    def _watch(self) -> None:
        code = self.process.wait()
        self._remove_tmp()  # gone by itself (or killed): its /tmp goes with it
        if code < 0:
            reason = f"signal: {(signal.strsignal(-code) or str(-code)).lower()}"
        else:
            reason = f"exit status {code}"
        if not self._killed:
            output = "" if self.log is None else f"; its output is in {self.log.path}"
            logger.warning(
                "%s: runtime process %d exited (%s)%s", self.name, self.process.pid, reason,
                output,
            )
        self.api.fail(
            lambda request_id: FunctionError(
                "Runtime.ExitError",
                f"RequestId: {request_id} Error: Runtime exited with error: {reason}",
            )
        )


class _LogFile:
    """One function version's log: the lines of all its environments, each written whole
    (environments running at once interleave line by line, never inside one)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._file: IO[str] | None = None
        self._closed = False

    def write(self, line: str) -> None:
        with self._lock:
            if self._closed:
                return
            if self._file is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._file = self.path.open("a", encoding="utf-8", errors="replace")
            self._file.write(line + "\n")
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._file is not None:
                self._file.close()


class Launcher(Protocol):
    """Runs an execution environment some other way than the installed Python (a container)."""

    def argv(self, config: FunctionConfig, env: Mapping[str, str], name: str) -> list[str]:
        """The command that starts the runtime with ``env`` (Lambda's variables included)."""

    def discard(self, name: str) -> None:
        """Remove whatever outlives the command once it is killed (a container named ``name``)."""


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
    account: str = ACCOUNT_ID
    version: str = "$LATEST"
    init_timeout: float | None = None
    max_concurrency: int = 1
    python: str = sys.executable
    launcher: Launcher | None = None
    #: the execution role's credentials, as Lambda hands them to every environment
    credentials: tuple[str, str] | None = None
    #: where each process environment's own TMPDIR is made (the system's when None)
    tmp_root: str | Path | None = None
    #: the file every environment's output goes to (the logger's, line by line, when None)
    log_path: str | Path | None = None

    @property
    def arn(self) -> str:
        return f"arn:aws:lambda:{self.region}:{self.account}:function:{self.name}"

    def argv(self, env: Mapping[str, str], name: str = "function") -> list[str]:
        """What starts the runtime: ``python -m awslambdaric <handler>``, or the launcher's."""
        if self.launcher is not None:
            return self.launcher.argv(self, env, name)
        return [self.python, "-m", "awslambdaric", self.handler]

    def lambda_env(self, runtime_api: str) -> dict[str, str]:
        """The variables Lambda sets in an execution environment, then the function's ``env``."""
        task_root = str(Path(self.task_root).resolve())
        stream = f"{time.strftime('%Y/%m/%d')}/[{self.version}]{uuid.uuid4().hex}"
        env = dict(
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
            PYTHONUNBUFFERED="1",
            TZ=":UTC",
        )
        if self.credentials is not None:
            env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"] = self.credentials
        env.update(self.env)
        return env

    def child_env(self, runtime_api: str) -> dict[str, str]:
        """The runtime process's environment: the parent's, Lambda's variables, then ``env``."""
        env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED_ENV}
        task_root = str(Path(self.task_root).resolve())
        pythonpath = [task_root, *(str(Path(p).resolve()) for p in self.path)]
        lambda_env = self.lambda_env(runtime_api)
        extra = [p for p in (lambda_env.get("PYTHONPATH"), env.get("PYTHONPATH")) if p]
        env.update(lambda_env)
        env["PYTHONPATH"] = os.pathsep.join([*pythonpath, *extra])
        return env


class LambdaFunction:
    """A function run locally as Lambda runs it: ``invoke`` an event, get the response.

    The first invoke starts an execution environment (cold); later ones reuse it (warm).
    ``cold_starts`` and ``invocations`` count environments started and invokes served;
    ``reap_idle(idle_s)`` discards environments nobody used for ``idle_s`` seconds.
    """

    def __init__(self, config: FunctionConfig) -> None:
        if config.max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        self.config = config
        self._cond = threading.Condition()
        self._idle: list[_Sandbox] = []
        self._sandboxes: set[_Sandbox] = set()
        self._closed = False
        self._log = None if config.log_path is None else _LogFile(Path(config.log_path))
        self.cold_starts = 0
        self.invocations = 0

    @property
    def environments(self) -> int:
        """Execution environments alive now, busy or idle."""
        with self._cond:
            return len(self._sandboxes)

    @property
    def busy(self) -> int:
        """Execution environments running an invocation now."""
        with self._cond:
            return len(self._sandboxes) - len(self._idle)

    def pids(self) -> list[int]:
        """The runtime processes of the live environments (their group leaders)."""
        with self._cond:
            return [s.process.pid for s in self._sandboxes]

    def reap_idle(self, idle_s: float) -> int:
        """Discard environments idle for at least ``idle_s`` seconds; how many went."""
        cutoff = time.monotonic() - idle_s
        with self._cond:
            stale = [s for s in self._idle if s.idle_since <= cutoff]
            for sandbox in stale:
                self._idle.remove(sandbox)
                self._sandboxes.discard(sandbox)
            self._cond.notify_all()
        for sandbox in stale:
            sandbox.kill()
        return len(stale)

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
            invocation = Invocation(payload, timeout, *ids, client_context)
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

    def _run(self, sandbox: _Sandbox, invocation: Invocation) -> None:
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
                sandbox = _Sandbox(self.config, self._log)
                self._sandboxes.add(sandbox)
                self.cold_starts += 1
                return sandbox, True
        finally:
            for sandbox in dead:
                sandbox.kill()

    def _release(self, sandbox: _Sandbox) -> None:
        with self._cond:
            keep = sandbox.alive and not self._closed
            self.invocations += 1
            if keep:
                sandbox.idle_since = time.monotonic()
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
        if self._log is not None:
            self._log.close()

    def __enter__(self) -> LambdaFunction:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
