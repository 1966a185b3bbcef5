"""The local platform: a small cloud on this machine, speaking the real APIs.

``LocalPlatform`` starts, on loopback only:

- one AWS endpoint (moto): S3 with a model store bucket, Lambda (executed by
  ``awslambdaric`` environments), IAM and ECR;
- the serving plane that runs Knative revisions as processes that scale to zero, behind
  the Knative API the ``kubernetes`` client and ``kubectl`` use;
- the gateway, reading the routing tables ``modelfn deploy`` writes into the store;
- a status endpoint (``modelfn dev status``), at a secret URL the state directory holds.

The Knative API asks every request for the kubeconfig's token, a fresh secret per start.

It writes the state directory (``localstack/state.py``): ``kubeconfig``, ``env`` and, once
everything answers, ``ready``. ``modelfn dev`` runs it until Ctrl-C or SIGTERM; tests use
it as a context manager. Stopping it leaves no process behind.
"""

from __future__ import annotations

import contextlib
import hmac
import importlib.util
import json
import os
import secrets
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from modelfn.localstack.state import StateDir
from modelfn.process.supervisor import Process, free_port, http_probe

if TYPE_CHECKING:
    from pathlib import Path
    from types import TracebackType

    from modelfn.localstack.knative.platform import KnativePlatform
    from modelfn.localstack.lambda_platform import LocalLambda
    from modelfn.localstack.s3 import S3Emulator
    from modelfn.localstack.serving import LocalServingPlane

BUCKET = "modelfn-dev"
STORE_PREFIX = "models"
REGION = "us-east-1"
#: the state directory's folder for functions' output
LOGS_DIR = "logs"
#: the access key id of the platform's one set of credentials; its secret is made per start
ACCESS_KEY = "modelfn-dev"
#: what ``modelfn dev`` needs beyond a plain install, and the extra that brings it
NEEDS = {"moto": "local", "awslambdaric": "local", "kubernetes": "local",
         "jsonschema": "local", "cryptography": "local"}


def missing_extras() -> list[str]:
    """The modules the local platform needs that are not installed."""
    import importlib.util

    return [name for name in NEEDS if importlib.util.find_spec(name) is None]


class _StatusServer:
    """``GET /status/<secret>`` answers the platform's status as JSON, for ``modelfn dev
    status``, which finds the URL in ``DIR/ready`` (the owner's only). Every other path is
    a 404 and a browser's request (with an ``Origin``) a 403: only who can read the state
    directory can read the status."""

    def __init__(self, platform: LocalPlatform) -> None:
        path = f"/status/{secrets.token_urlsafe(32)}".encode()

        class StatusHandler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                if self.headers.get("origin") is not None:
                    self._answer(403, {"error": "requests from a browser are refused"})
                elif not hmac.compare_digest(self.path.encode(), path):
                    self._answer(404, {"error": "not found: the status URL is in the state "
                                                "directory's ready file"})
                else:
                    self._answer(200, platform.status())

            def _answer(self, code: int, document: dict[str, Any]) -> None:
                body = json.dumps(document, default=str).encode()
                self.send_response(code)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), StatusHandler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}{path.decode()}"
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="dev-status", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class LocalPlatform:
    """``with LocalPlatform(state_dir, idle_s=5) as platform: ...``"""

    def __init__(self, state_dir: Path | None = None, *, idle_s: float | None = None,
                 containers: bool = False, gateway: bool = True,
                 drain_s: float | None = None) -> None:
        """``drain_s``: how long stopping waits for requests in flight (the serving
        plane's default, 30 s, when None)."""
        from modelfn.localstack.state import default_state_dir

        self.state = StateDir(state_dir or default_state_dir())
        self.idle_s = idle_s
        self.containers = containers
        self.with_gateway = gateway
        self.drain_s = drain_s
        self.s3: S3Emulator | None = None
        self.aws: LocalLambda | None = None
        self.serving: LocalServingPlane | None = None
        self.knative: KnativePlatform | None = None
        self.gateway: Process | None = None
        self.gateway_url: str | None = None
        self.gateway_grpc: str | None = None  # host:port of the gateway's gRPC side
        self._status: _StatusServer | None = None
        self._stack = contextlib.ExitStack()
        self.secret_key = secrets.token_urlsafe(30)

    # -- what others reach it by -------------------------------------------------------

    @property
    def endpoint_url(self) -> str:
        assert self.s3 is not None, "the platform is not started"
        return self.s3.endpoint_url

    @property
    def log_dir(self) -> Path:
        """Where functions' output goes: ``<instance>.log`` per Knative instance,
        ``lambda-<function>-<version>.log`` per Lambda function version."""
        return self.state.path / LOGS_DIR

    @property
    def store(self) -> str:
        return f"s3://{BUCKET}/{STORE_PREFIX}"

    def aws_env(self) -> dict[str, str]:
        """The variables that point boto3 (and functions' stores) at the local endpoint."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": REGION,
            "MODELFN_S3_ENDPOINT": self.endpoint_url,
        }

    def env(self) -> dict[str, str]:
        """What ``DIR/env`` holds."""
        # MODELFN_DEV_DIR: modelfn deploy/status --target local find this platform (its
        # state directory may be another than the default)
        env = {"KUBECONFIG": str(self.state.kubeconfig), **self.aws_env(),
               "MODELFN_STORE": self.store, "MODELFN_DEV_DIR": str(self.state.path)}
        if self.gateway_url is not None:
            env["MODELFN_GATEWAY"] = self.gateway_url
        if self.gateway_grpc is not None:
            env["MODELFN_GATEWAY_GRPC"] = self.gateway_grpc
        return env

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> LocalPlatform:
        from modelfn.localstack.knative.platform import KnativePlatform
        from modelfn.localstack.lambda_platform import LocalLambda
        from modelfn.localstack.s3 import S3Emulator
        from modelfn.localstack.serving import LocalServingPlane
        from modelfn.localstack.serving.instance import DRAIN_GRACE_S

        self._stack.callback(self.state.claim().close)  # one platform per directory
        self.state.prepare()
        try:
            # every request to the AWS endpoint is signed with a secret only DIR/env holds
            self.s3 = S3Emulator(credentials={ACCESS_KEY: self.secret_key}).start()
            self._stack.callback(self.s3.stop)
            self.s3.create_bucket(BUCKET)
            self.aws = LocalLambda(self.state.path / "lambda", idle_s=self.idle_s or 300.0,
                                   containers=self.containers, emulator=self.s3,
                                   log_dir=self.log_dir).start()
            self._stack.callback(self.aws.stop)
            self.serving = LocalServingPlane(idle_s=self.idle_s, containers=self.containers,
                                             log_dir=self.log_dir,
                                             tmp_dir=self.state.path / "tmp",
                                             env=self.aws_env(),
                                             drain_s=DRAIN_GRACE_S if self.drain_s is None
                                             else self.drain_s).start()
            self._stack.callback(self.serving.stop)
            self.knative = KnativePlatform(self.serving).start()
            self._stack.callback(self.knative.stop)
            self.knative.write_kubeconfig(self.state.kubeconfig)
            if self.with_gateway:
                self._start_gateway()
            self._status = _StatusServer(self)
            self._status.start()
            self._stack.callback(self._status.stop)
            self.state.write_env(self.env())
            self.state.mark_ready(self._status.url)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_gateway(self) -> None:
        port = free_port()
        self.gateway_url = f"http://127.0.0.1:{port}"
        grpc_args: list[str] = []
        if importlib.util.find_spec("grpc") is not None:  # the grpc extra: gRPC too
            grpc_port = free_port()
            self.gateway_grpc = f"127.0.0.1:{grpc_port}"
            grpc_args = ["--grpc-port", str(grpc_port)]
        self.gateway = Process(
            [sys.executable, "-m", "modelfn.cli.main", "gateway", "--routes", self.store,
             "--host", "127.0.0.1", "--port", str(port), *grpc_args],
            name="gateway", env={**os.environ, **self.aws_env()},
            log_path=self.state.path / "gateway.log",
            die_with_parent=True,  # started by the thread that runs the platform
        ).start()
        self._stack.callback(self.gateway.stop)
        self.gateway.wait_ready(http_probe(f"{self.gateway_url}/v2/health/ready"), timeout=60)

    def stop(self) -> None:
        self.state.clear_ready()
        self._stack.close()

    def hurry(self) -> None:
        """Make a ``stop()`` under way stop waiting for requests in flight (a second
        Ctrl-C): they are answered 503."""
        if self.serving is not None:
            self.serving.hurry()

    def __enter__(self) -> LocalPlatform:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # -- what runs ---------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        return {
            "endpoints": {
                "aws": self.endpoint_url,
                "knative": self.knative.url if self.knative is not None else None,
                "gateway": self.gateway_url,
                "gateway_grpc": self.gateway_grpc,
                "store": self.store,
            },
            "knative": self.serving.status() if self.serving is not None else {},
            "lambda": self.aws.status() if self.aws is not None else {},
        }
