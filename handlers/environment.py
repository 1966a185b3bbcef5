"""What a function process serves, read from its environment once at start.

Both entrypoints (Lambda and HTTP) build their repository here, so an image
behaves the same on every platform:

- ``MODELFN_REPOSITORY``: a local model repository (baked into the image);
- ``MODELFN_STORE``: a model store (``s3://bucket/prefix``, ``file://`` or a path) to
  fetch ``MODELFN_MODELS`` from at cold start instead; the checkout goes to
  ``MODELFN_REPOSITORY`` when set, else to a temporary directory;
- ``MODELFN_MODELS``: which models to serve, comma-separated ``name[:version]``
  (default: every model in the repository; required with a store);
- ``MODELFN_MAX_BODY_BYTES``: the request body limit;
- ``MODELFN_EXIT_ON_ERROR``: ``true`` makes a model that fails to load fail the start
  (Triton's ``--exit-on-error``); by default (``false``) it is UNAVAILABLE with its reason
  and the others serve. A start where no model serves fails either way.

The HTTP entrypoint also reads what to speak, where to listen and how much to log:

- ``MODELFN_PROTOCOL``: ``http`` (default; KServe V2 REST) or ``grpc`` (KServe V2 over
  gRPC on the same port instead: Knative routes one port per container); gRPC's message
  limits are ``MODELFN_MAX_BODY_BYTES`` received and ``MODELFN_GRPC_MAX_SEND_BYTES`` sent;
- ``PORT`` (default 8080, as Knative and Cloud Run set it);
- ``MODELFN_HOST`` (default ``0.0.0.0``);
- ``MODELFN_LOG_LEVEL`` (default ``info``);
- ``MODELFN_BUSY_POLL_US``: microseconds the REST server's loop keeps polling after each
  request before it sleeps (default 0: it sleeps at once; ``handlers/busy_poll.py``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from modelfn.net.busy_poll import GRPC_DOES_NOT_POLL, MAX_WINDOW_US
from modelfn.runtime.errors import ConfigError

DEFAULT_REPOSITORY = "/opt/modelfn/models"
DEFAULT_PORT = 8080
LOG_LEVELS = ("debug", "info", "warning", "error")
PROTOCOLS = ("http", "grpc")


def _flag(env: dict[str, str], name: str) -> bool:
    value = env.get(name, "").strip().lower()
    if value in ("", "0", "false", "no"):
        return False
    if value in ("1", "true", "yes"):
        return True
    raise ConfigError(f"{name} must be true or false, not '{env[name]}'")


def _number(env: dict[str, str], name: str) -> int | None:
    value = env.get(name)
    if value is None or value == "":
        return None
    if not value.isdigit():
        raise ConfigError(f"{name} must be a whole number, not '{value}'")
    return int(value)


@dataclass(frozen=True)
class FunctionEnvironment:
    repository: Path | None
    models: list[str] = field(default_factory=list)
    store: str | None = None
    store_endpoint: str | None = None  # an S3-compatible store's endpoint (None: AWS S3)
    max_body_bytes: int | None = None
    host: str = "0.0.0.0"
    port: int = DEFAULT_PORT
    log_level: str = "info"
    protocol: str = "http"
    grpc_max_send_bytes: int | None = None
    busy_poll_us: int = 0
    exit_on_error: bool = False

    @classmethod
    def read(cls, env: dict[str, str] | None = None) -> FunctionEnvironment:
        env = dict(os.environ) if env is None else env
        models = [m.strip() for m in env.get("MODELFN_MODELS", "").split(",") if m.strip()]
        port = _number(env, "PORT")
        if port is not None and not 0 < port < 65536:
            raise ConfigError(f"PORT must be between 1 and 65535, not {port}")
        log_level = env.get("MODELFN_LOG_LEVEL", "info").strip().lower() or "info"
        if log_level not in LOG_LEVELS:
            raise ConfigError(f"MODELFN_LOG_LEVEL must be one of {', '.join(LOG_LEVELS)}, "
                              f"not '{log_level}'")
        protocol = env.get("MODELFN_PROTOCOL", "").strip().lower() or "http"
        if protocol not in PROTOCOLS:
            raise ConfigError(f"MODELFN_PROTOCOL must be one of {', '.join(PROTOCOLS)}, "
                              f"not '{protocol}'")
        busy_poll_us = _number(env, "MODELFN_BUSY_POLL_US") or 0
        if busy_poll_us > MAX_WINDOW_US:
            raise ConfigError(f"MODELFN_BUSY_POLL_US must be at most {MAX_WINDOW_US} "
                              f"(one second), not {busy_poll_us}")
        if busy_poll_us and protocol == "grpc":
            raise ConfigError(f"MODELFN_BUSY_POLL_US polls the REST server's loop; "
                              f"{GRPC_DOES_NOT_POLL}")
        store = env.get("MODELFN_STORE", "").strip() or None
        repository = env.get("MODELFN_REPOSITORY", "").strip()
        if not repository and store is None:
            repository = DEFAULT_REPOSITORY
        return cls(
            repository=Path(repository) if repository else None,
            models=models,
            store=store,
            store_endpoint=env.get("MODELFN_S3_ENDPOINT", "").strip() or None,
            max_body_bytes=_number(env, "MODELFN_MAX_BODY_BYTES"),
            host=env.get("MODELFN_HOST", "").strip() or "0.0.0.0",
            port=DEFAULT_PORT if port is None else port,
            log_level=log_level,
            protocol=protocol,
            grpc_max_send_bytes=_number(env, "MODELFN_GRPC_MAX_SEND_BYTES"),
            busy_poll_us=busy_poll_us,
            exit_on_error=_flag(env, "MODELFN_EXIT_ON_ERROR"),
        )

    def to_env(self) -> dict[str, str]:
        """The variables that make ``read`` give this environment back: what an image build,
        a deploy renderer or the local platform writes into a function's environment.
        Fields left at their defaults are not written (the platform's own ``PORT`` stays)."""
        default = FunctionEnvironment(repository=None)
        env: dict[str, str] = {}
        if self.repository is not None:
            env["MODELFN_REPOSITORY"] = str(self.repository)
        if self.store is not None:
            env["MODELFN_STORE"] = self.store
        if self.store_endpoint is not None:
            env["MODELFN_S3_ENDPOINT"] = self.store_endpoint
        if self.models:
            env["MODELFN_MODELS"] = ",".join(self.models)
        if self.max_body_bytes is not None:
            env["MODELFN_MAX_BODY_BYTES"] = str(self.max_body_bytes)
        if self.host != default.host:
            env["MODELFN_HOST"] = self.host
        if self.port != default.port:
            env["PORT"] = str(self.port)
        if self.log_level != default.log_level:
            env["MODELFN_LOG_LEVEL"] = self.log_level
        if self.protocol != default.protocol:
            env["MODELFN_PROTOCOL"] = self.protocol
        if self.grpc_max_send_bytes is not None:
            env["MODELFN_GRPC_MAX_SEND_BYTES"] = str(self.grpc_max_send_bytes)
        if self.busy_poll_us:
            env["MODELFN_BUSY_POLL_US"] = str(self.busy_poll_us)
        if self.exit_on_error:
            env["MODELFN_EXIT_ON_ERROR"] = "true"
        return env

    def model_names(self) -> list[str]:
        """Model names without pinned versions (``digits:2`` -> ``digits``)."""
        return [m.split(":", 1)[0] for m in self.models]
