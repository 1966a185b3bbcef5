"""The local platform's state directory: what ``modelfn dev`` writes for other programs to read.

``DIR/env`` holds shell ``KEY=VALUE`` lines (``set -a; . DIR/env`` in a shell, or
``read_env`` here) so ``kubectl``, boto3, scripts and ``modelfn deploy`` reach the local
platform unchanged; ``DIR/kubeconfig`` has a ``modelfn-dev`` context and the Knative API's
token; ``DIR/ready`` exists only while everything answers, and holds the platform's status
URL (a secret: its path is the key) and process id. The files are the owner's only (0600).
These names are a contract with users' scripts: keep them stable.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import orjson

from modelfn.runtime.errors import ModelfnError

ENV_FILE = "env"
KUBECONFIG_FILE = "kubeconfig"
READY_FILE = "ready"
LOCK_FILE = ".lock"
CONTEXT = "modelfn-dev"
#: the variables ``DIR/env`` may hold, in the order they are written
ENV_KEYS = (
    "KUBECONFIG",
    "AWS_ENDPOINT_URL",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_DEFAULT_REGION",
    "MODELFN_STORE",
    "MODELFN_S3_ENDPOINT",
    "MODELFN_GATEWAY",
    "MODELFN_GATEWAY_GRPC",
    "MODELFN_DEV_DIR",
)


def default_state_dir() -> Path:
    return Path(os.environ.get("MODELFN_DEV_DIR") or Path.home() / ".modelfn" / "dev")


def write_private(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` at once, readable by its owner only (mode 0600 from
    the moment it exists): the state directory holds the platform's secrets."""
    temp = path.with_name(f".{path.name}.tmp")
    temp.unlink(missing_ok=True)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    temp.replace(path)


class PlatformNotRunning(ModelfnError):
    """A command needs the local platform and none answers for this state directory."""

    status_code = 503

    def __init__(self, path: Path) -> None:
        super().__init__(f"no local platform is running for {path}: start one with "
                         "`modelfn dev` (and source its env: set -a; "
                         f". {path / ENV_FILE}; set +a), or point MODELFN_DEV_DIR (--state-dir)"
                         " at the one that runs")


class PlatformRunning(ModelfnError):
    status_code = 409

    def __init__(self, path: Path, pid: object) -> None:
        who = f" (process {pid})" if pid is not None else ""
        super().__init__(f"a local platform already runs on {path}{who}: use it (set -a; "
                         f". {path / ENV_FILE}), stop it, or start this one with another "
                         "--state-dir")


@dataclass(frozen=True)
class StateDir:
    path: Path

    @property
    def env_file(self) -> Path:
        return self.path / ENV_FILE

    @property
    def kubeconfig(self) -> Path:
        return self.path / KUBECONFIG_FILE

    @property
    def ready_file(self) -> Path:
        return self.path / READY_FILE

    def claim(self) -> IO[bytes]:
        """Hold the directory for this process (a lock the kernel drops when it exits, even
        killed): a second platform on it would write its own ports over the first one's
        ``env`` and ``kubeconfig``, and remove its ``ready``. Keep the file open while the
        platform runs; ``PlatformRunning`` when another process holds it."""
        import fcntl

        self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
        lock = (self.path / LOCK_FILE).open("ab")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            running = self.read_ready()
            raise PlatformRunning(self.path, None if running is None
                                  else running.get("pid")) from None
        return lock

    def prepare(self) -> None:
        """Create the directory and forget a previous run's ``ready`` marker (``claim``
        it first)."""
        self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.ready_file.unlink(missing_ok=True)

    def write_env(self, env: dict[str, str]) -> None:
        unknown = set(env) - set(ENV_KEYS)
        if unknown:
            raise ValueError(f"not a local platform variable: {', '.join(sorted(unknown))}")
        lines = [f"{key}={shlex.quote(env[key])}" for key in ENV_KEYS if key in env]
        write_private(self.env_file, ("\n".join(lines) + "\n").encode())

    def read_env(self) -> dict[str, str]:
        env: dict[str, str] = {}
        for line in self.env_file.read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep and key in ENV_KEYS:
                env[key] = shlex.split(value)[0] if value else ""
        return env

    def mark_ready(self, status_url: str) -> None:
        info = {"pid": os.getpid(), "status_url": status_url}
        write_private(self.ready_file, orjson.dumps(info))

    def read_ready(self) -> dict[str, object] | None:
        """What ``mark_ready`` wrote, or None when no platform is up (or it died)."""
        try:
            info: dict[str, object] = orjson.loads(self.ready_file.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return None
        pid = info.get("pid")
        if not isinstance(pid, int) or not _alive(pid):
            return None
        return info

    def clear_ready(self) -> None:
        self.ready_file.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
