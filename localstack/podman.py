"""Execution environments as containers: ``podman run`` of a function's Lambda image.

The command lines are the sandbox recipe of ``platforms.podman`` (the one the serving
plane's ``--containers`` uses): state under one directory (``--root``/``--runroot``, the
vfs driver), ``runc``, the host network (the container reaches the Runtime API emulator
on 127.0.0.1), and explicit ``nofile`` and ``nproc`` limits. Variables go by name only
(``--env=NAME``): podman copies their values from its own environment, so they stay off
the command line. A killed ``podman run`` can leave its container behind; ``discard``
removes it by name.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from typing import TYPE_CHECKING

from modelfn.platforms.podman import Podman, Storage

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from modelfn.localstack.lambda_service import FunctionConfig

#: the Runtime API variables, Lambda's own, and the function's: what a container is given
_LAMBDA_PREFIXES = ("AWS_", "LAMBDA_", "_HANDLER", "TZ", "PYTHONUNBUFFERED")


@dataclass(frozen=True)
class PodmanLauncher:
    """Runs ``image`` (a Lambda image: awslambdaric as entrypoint) for each environment,
    keeping podman's state under ``root``."""

    root: Path
    image: str
    command: tuple[str, ...] = ()  # the function's ImageConfig command, if any
    executable: str = "podman"

    @property
    def podman(self) -> Podman:
        return Podman(Storage(self.root, driver="vfs"), binary=self.executable)

    def argv(self, config: FunctionConfig, env: Mapping[str, str], name: str) -> list[str]:
        names = sorted(
            key for key in env
            if key in config.env or key.startswith(_LAMBDA_PREFIXES)
        )
        # the images come from the registry the local platform pushes to: plain HTTP
        return self.podman.run(self.image, self.command, name=name, inherit=names,
                               tls_verify=False)

    def discard(self, name: str) -> None:
        subprocess.run(
            self.podman.remove(name),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=60,
            check=False,
        )
