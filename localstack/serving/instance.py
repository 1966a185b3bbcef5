"""One instance of a revision: a supervised process (or ``podman run``) on its own port.

Process mode runs the installed modelfn (``python -m modelfn.handlers.http``) with the
revision's container environment; container mode runs the revision's image with the
recipe that works on daemonless machines (``platforms.podman``: runc, host network).
Both honour ``resources``: CPU affinity to that many CPUs, and a memory limit. A process
instance has its own ``TMPDIR``, removed once it has stopped, however it stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from itertools import count
from typing import TYPE_CHECKING

from modelfn.localstack.serving.http import UpstreamPool
from modelfn.process.supervisor import Process, free_port

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping, Sequence
    from pathlib import Path

    import grpc

    from modelfn.localstack.plane import RevisionSpec
    from modelfn.platforms.podman import Podman

HOST = "127.0.0.1"
#: environment prefixes only the revision's spec may set
_REVISION_OWNED = ("MODELFN_", "K_")
#: seconds an instance gets to drain its in-flight requests after SIGTERM
DRAIN_GRACE_S = 30.0
#: the largest gRPC message passed to or from an instance (its own default limit)
GRPC_MAX_MESSAGE_BYTES = 64 * 1024 * 1024


def container_argv(podman: Podman, spec: RevisionSpec, name: str, env: Mapping[str, str],
                   cpus: Sequence[int] | None) -> list[str]:
    """``podman run`` of the revision's image as instance ``name``: the platform's sandbox
    recipe, pinned to ``cpus`` and limited to the revision's memory."""
    limits = []
    if cpus:
        limits.append(f"--cpuset-cpus={','.join(map(str, cpus))}")
    if spec.resources.memory_bytes is not None:
        limits.append(f"--memory={spec.resources.memory_bytes}")
    return podman.run(spec.image, spec.command, name=name, env=env, options=limits)


class CpuSets:
    """Hands out CPU affinity sets of a given size, round robin over the usable CPUs."""

    def __init__(self, usable: Sequence[int] | None = None) -> None:
        self.usable = sorted(usable if usable is not None else os.sched_getaffinity(0))
        self._next = 0

    def take(self, cpus: float | None) -> list[int] | None:
        if cpus is None or cpus <= 0:
            return None
        n = min(len(self.usable), max(1, math.ceil(cpus)))
        start, self._next = self._next, (self._next + n) % len(self.usable)
        return [self.usable[(start + i) % len(self.usable)] for i in range(n)]


_serial = count(1)


@dataclass(eq=False)
class Instance:
    """A running (or starting, or draining) instance and what the queue-proxy tracks of it."""

    name: str
    port: int
    process: Process
    pool: UpstreamPool
    ready: bool = False
    draining: bool = False
    in_flight: int = 0
    served: int = 0
    last_used: float = field(default_factory=time.monotonic)
    _starting: asyncio.Future[Process] | None = None
    _channel: grpc.aio.Channel | None = None
    tmp: str | None = None  # the process's TMPDIR (a container has its own /tmp)

    @classmethod
    def create(cls, spec: RevisionSpec, *, cpusets: CpuSets, podman: Podman | None,
               log_dir: Path | None, base_env: Mapping[str, str],
               tmp_root: Path | None = None) -> Instance:
        """``tmp_root``: where a process instance's ``TMPDIR`` goes (the system's when
        None); the platform clears it at start, after a run that could not clean up."""
        port = free_port(HOST)
        name = f"{spec.name}-{next(_serial)}"
        env = {
            **base_env,
            **spec.env,
            "PORT": str(port),
            "MODELFN_HOST": HOST,
            "K_SERVICE": spec.service,
            "K_CONFIGURATION": spec.service,
            "K_REVISION": spec.name,
        }
        cpus = cpusets.take(spec.resources.cpus)
        log_path = log_dir / f"{name}.log" if log_dir is not None else None
        tmp = None
        if podman is None:
            tmp = tempfile.mkdtemp(prefix=f"modelfn-{name}-", dir=tmp_root)
            env["TMPDIR"] = tmp
            # die_with_parent: a platform killed with SIGKILL (an OOM kill) runs no cleanup;
            # the thread that starts it (the plane loop's executor) lives as long as it
            process = Process([sys.executable, "-m", "modelfn.handlers.http"], name=name,
                              env={**_host_env(), **env}, cpus=cpus,
                              memory_bytes=spec.resources.memory_bytes, log_path=log_path,
                              die_with_parent=True)
        else:  # the container runtime applies the limits inside
            process = Process(container_argv(podman, spec, name, env, cpus), name=name,
                              log_path=log_path)
        return cls(name, port, process, UpstreamPool(HOST, port), tmp=tmp)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def accepting(self) -> bool:
        return self.ready and not self.draining

    async def start(self, readiness_path: str | None, deadline_s: float) -> float:
        """Start the process and wait until ``readiness_path`` answers 200 (None: until its
        port takes a connection); the seconds it took. Raises ``ProcessFailed`` with the
        instance's last words if it never does."""
        self._starting = asyncio.ensure_future(asyncio.to_thread(self.process.start))
        await asyncio.shield(self._starting)
        ready = (probe(HOST, self.port, readiness_path) if readiness_path is not None
                 else tcp_probe(HOST, self.port))
        elapsed = await self.process.wait_ready_async(ready, deadline_s)
        self.ready = True
        self.last_used = time.monotonic()
        return elapsed

    def channel(self) -> grpc.aio.Channel:
        """A gRPC channel to the instance (h2c), made on first use, closed by ``stop``."""
        if self._channel is None:
            from modelfn.net.grpc_relay import channel_for

            self._channel = channel_for(f"http://{HOST}:{self.port}",
                                        max_message_bytes=GRPC_MAX_MESSAGE_BYTES)
        return self._channel

    async def stop(self, grace: float = DRAIN_GRACE_S) -> None:
        """SIGTERM (the instance drains what it is serving), then the group is killed."""
        self.draining = True
        self.pool.close()
        if self._channel is not None:
            channel, self._channel = self._channel, None
            await channel.close()
        if self._starting is not None:  # a start cancelled mid-fork still forks: wait for it
            with contextlib.suppress(Exception):
                await self._starting
        await self.process.stop_async(grace)
        if self.tmp is not None:  # the group is gone: nothing writes there any more
            shutil.rmtree(self.tmp, ignore_errors=True)


def _host_env() -> dict[str, str]:
    """This machine's environment (PATH, the virtualenv, AWS settings) minus what the
    revision's own container environment decides: a process instance behaves like the
    container would, not like the shell that started the platform."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(_REVISION_OWNED) and k != "PORT"}


def probe(host: str, port: int, path: str) -> Callable[[], Awaitable[bool]]:
    """A readiness probe on a raw connection: ``GET path`` answers 200."""
    request = f"GET {path} HTTP/1.1\r\nhost: {host}:{port}\r\nconnection: close\r\n\r\n".encode()

    async def ready() -> bool:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(request)
            line = await asyncio.wait_for(reader.readline(), 5.0)
            return line.split(b" ", 2)[1:2] == [b"200"]
        except (TimeoutError, asyncio.IncompleteReadError):
            return False
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    return ready


def tcp_probe(host: str, port: int) -> Callable[[], Awaitable[bool]]:
    """A ``tcpSocket`` readiness probe: the port takes a connection."""

    async def ready() -> bool:
        try:
            _, writer = await asyncio.open_connection(host, port)
        except OSError:
            return False
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return True

    return ready
