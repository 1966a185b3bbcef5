"""Execution environments as containers: ``podman run`` of a function's Lambda image.

The recipe that works on machines without a Docker engine or cgroup delegation: state
under one directory (``--root``/``--runroot``, the vfs driver), ``runc``, the host network
(the container reaches the Runtime API emulator on 127.0.0.1), and explicit ``nofile`` and
``nproc`` limits (the sandbox may not raise them). Variables go by name only (``--env
NAME``): podman copies their values from its own environment, so they stay off the
command line. A killed ``podman run`` can leave its container behind; ``discard`` removes
it by name.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from modelfn.localstack.lambda_service import FunctionConfig

#: the Runtime API variables, Lambda's own, and the function's: what a container is given
_LAMBDA_PREFIXES = ("AWS_", "LAMBDA_", "_HANDLER", "TZ", "PYTHONUNBUFFERED")


@dataclass(frozen=True)
class Podman:
    """Runs ``image`` (a Lambda image: awslambdaric as entrypoint) for each environment."""

    root: Path
    image: str
    command: tuple[str, ...] = ()  # the function's ImageConfig command, if any
    executable: str = "podman"

    def _global(self) -> list[str]:
        return [
            self.executable,
            "--root", str(self.root / "root"),
            "--runroot", str(self.root / "run"),
            "--storage-driver", "vfs",
            "--cgroup-manager", "cgroupfs",
            "--events-backend", "file",
            "--runtime", "runc",
        ]

    def argv(self, config: FunctionConfig, env: Mapping[str, str], name: str) -> list[str]:
        names = sorted(
            key for key in env
            if key in config.env or key.startswith(_LAMBDA_PREFIXES)
        )
        return [
            *self._global(),
            "run", "--rm", "--name", name,
            "--network", "host",
            "--tls-verify=false",
            "--ulimit", "nofile=1024:1024",
            "--ulimit", "nproc=1024:1024",
            *(arg for key in names for arg in ("--env", key)),
            self.image,
            *self.command,
        ]

    def discard(self, name: str) -> None:
        subprocess.run(
            [*self._global(), "rm", "--force", "--time", "0", name],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=60,
            check=False,
        )
