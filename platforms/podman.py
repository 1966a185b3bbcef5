"""podman (and buildah) without a daemon: where they keep images, and how a container runs.

``Storage`` is containers/storage as ``modelfn build`` and the local platform share it:
its location, driver and build isolation (``MODELFN_STORAGE_ROOT``,
``MODELFN_STORAGE_DRIVER``, ``MODELFN_BUILD_ISOLATION``), so tests and CI keep every byte
under one directory. ``Podman`` writes the command lines that work on machines without a
Docker engine or cgroup delegation: runc (crun fails on hybrid cgroups), the cgroupfs
manager, events to a file, the host's network (``-p`` leaves iptables chains behind) and
explicit ``nofile`` and ``nproc`` limits (the sandbox may not raise them).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

#: global options of every podman command on a daemonless sandbox
SANDBOX = ("--cgroup-manager=cgroupfs", "--events-backend=file", "--runtime=runc")
#: options of every ``podman run`` there
RUN_SANDBOX = ("--network=host", "--ulimit=nofile=1024:1024", "--ulimit=nproc=1024:1024")
#: registries on this machine speak plain HTTP (Debian's docker-registry on loopback)
LOCAL_REGISTRIES = ("127.0.0.1", "localhost", "[::1]")


@dataclass(frozen=True)
class Storage:
    """Where podman and buildah keep images, and how RUN steps are isolated."""

    root: Path | None = None  # holds root/ (images, layers) and run/ (runtime state)
    driver: str | None = None  # e.g. "vfs" where overlay is not available
    isolation: str | None = None  # "chroot", "oci" or "rootless"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Storage:
        env = os.environ if env is None else env
        root = env.get("MODELFN_STORAGE_ROOT")
        return cls(
            root=Path(root) if root else None,
            driver=env.get("MODELFN_STORAGE_DRIVER") or None,
            isolation=env.get("MODELFN_BUILD_ISOLATION") or None,
        )

    def global_args(self) -> list[str]:
        args: list[str] = []
        if self.root is not None:
            args += ["--root", str(self.root / "root"), "--runroot", str(self.root / "run")]
        if self.driver:
            args += ["--storage-driver", self.driver]
        return args

    def isolation_args(self) -> list[str]:
        return ["--isolation", self.isolation] if self.isolation else []


def local_registry(image: str) -> bool:
    """Whether ``image`` comes from a registry on this machine (pulled without TLS)."""
    return image.split("/", 1)[0].split(":", 1)[0] in LOCAL_REGISTRIES


@dataclass(frozen=True)
class Podman:
    """podman on ``storage``, with the sandbox recipe."""

    storage: Storage = field(default_factory=Storage.from_env)
    binary: str = "podman"

    def command(self, *args: str) -> list[str]:
        """``podman <args>`` with the storage's and the sandbox's global options."""
        return [self.binary, *self.storage.global_args(), *SANDBOX, *args]

    def run(self, image: str, command: Sequence[str] = (), *, name: str,
            env: Mapping[str, str] | None = None, inherit: Iterable[str] = (),
            options: Sequence[str] = (), tls_verify: bool | None = None) -> list[str]:
        """``podman run`` of ``image`` as container ``name``, removed when it exits (and
        replacing one a killed run left behind). ``env`` is given by value; ``inherit``
        names variables podman copies from its own environment, so their values stay off
        the command line. ``options``: more ``run`` options (limits, CPUs).
        ``tls_verify``: whether a pull checks the registry's certificate (by default, unless
        the registry is on this machine)."""
        flags = ["run", "--rm", "--replace", f"--name={name}", *RUN_SANDBOX]
        if not (tls_verify if tls_verify is not None else not local_registry(image)):
            flags.append("--tls-verify=false")
        flags += options
        flags += [f"--env={key}" for key in inherit]
        flags += [f"--env={key}={value}" for key, value in (env or {}).items()]
        return self.command(*flags, image, *command)

    def remove(self, name: str) -> list[str]:
        """``podman rm`` of container ``name``, at once, whether it runs or not."""
        return self.command("rm", "--force", "--time", "0", name)
