"""Child processes the way a platform runs them: started, probed until ready, drained, reaped.

``Process`` is the one supervisor modelfn uses for every child it starts: the local
platform's function instances and Lambda environments, ``tune``'s candidate servers, the
bench harness and the tests. A child runs in its own session (so a stop reaches its
whole process group, including anything it forked), its stdout and stderr are read by a
thread into a bounded tail (and optionally appended to a log file), readiness is a probe
polled until it answers or the child dies, and a stop is SIGTERM to the group, a grace
period for draining, then SIGKILL to the group. A child that exits or never becomes
ready raises ``ProcessFailed`` carrying its exit code and the last lines it wrote, which
is where a function's own error (a missing model, a bad config) is found. A caller that
may itself be SIGKILLed can ask that its child go with it (``die_with_parent``, Linux).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import IO, TYPE_CHECKING

from modelfn.runtime.errors import ModelfnError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping, Sequence
    from types import TracebackType

#: lines of output a process keeps for error messages
TAIL_LINES = 200
#: seconds between readiness probes
PROBE_INTERVAL = 0.01


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (the kernel's choice; free until someone binds it)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class PortInUse(ModelfnError):
    status_code = 409

    def __init__(self, host: str, port: int, why: str, busy: bool = True) -> None:
        hint = " (another server listens there: choose another port)" if busy else ""
        super().__init__(f"cannot listen on {host}:{port}: {why}{hint}")


def check_port(host: str, port: int) -> None:
    """Raise ``PortInUse`` unless a server could listen on ``host:port`` now: a command
    says so before it spends seconds loading models (the server's own bind still decides:
    the port may be taken in between)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise PortInUse(host, port, exc.strerror or str(exc), busy=False) from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind(address)
        except OSError as exc:
            raise PortInUse(host, port, exc.strerror or str(exc),
                            busy=exc.errno == errno.EADDRINUSE) from None


class ProcessFailed(ModelfnError):
    """A child process exited, or did not become ready, when it was expected to serve."""

    status_code = 503

    def __init__(self, name: str, problem: str, tail: str = "") -> None:
        last = f"\n{tail}" if tail else ""
        super().__init__(f"{name} {problem}{last}")
        self.name = name
        self.problem = problem
        self.tail = tail


#: the script that applies a child's limits in the child and then execs its program
LAUNCH = Path(__file__).with_name("launch.py")


def _launcher(cpus: Sequence[int] | None, memory_bytes: int | None,
              die_with_parent: bool) -> list[str]:
    """The argv prefix that starts a child under ``launch.py`` with what the OS can
    enforce of a container's resources, and the parent-death signal when asked for (Linux
    only); empty when there is nothing to apply."""
    limits: list[str] = []
    if die_with_parent and sys.platform.startswith("linux"):
        limits += ["--die-with", str(os.getpid())]
    if cpus:
        limits += ["--cpus", ",".join(map(str, cpus))]
    if memory_bytes is not None:
        limits += ["--memory-bytes", str(memory_bytes)]
    return [sys.executable, "-I", "-S", str(LAUNCH), *limits, "--"] if limits else []


class Process:
    """One supervised child process. Use as a context manager, or ``start()`` and ``stop()``.

    ``die_with_parent`` asks Linux (``PR_SET_PDEATHSIG``) to SIGKILL the child when its
    parent goes, so a parent killed with SIGKILL, which runs no cleanup, leaves no child
    behind in its own session. SIGKILL, not SIGTERM: the parent that would wait for a
    drain is gone, and a server still loading its model may not handle SIGTERM for
    minutes. It is opt-in because the kernel sends the signal when the *thread* that
    started the child exits, not the process: only a caller that starts children from a
    thread living as long as they should may ask for it. ``tune`` starts its servers from
    its main thread; the local platform its gateway from the thread that runs it and its
    Knative instances from its loop's executor threads, which last as long as the plane.
    Lambda sandboxes are started from per-request server threads, which end while their
    children must go on serving, so they do not ask. Elsewhere than Linux it does nothing.

    ``cpus``, ``memory_bytes`` and the parent-death signal are applied by ``launch.py``,
    which the child runs first and which then execs ``argv`` in the same process. No
    Python runs in the child between ``fork`` and ``exec``: see ``launch.py`` for the
    crashes that did.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        name: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        log_path: Path | None = None,
        cpus: Sequence[int] | None = None,
        memory_bytes: int | None = None,
        tail_lines: int = TAIL_LINES,
        on_line: Callable[[str], None] | None = None,
        die_with_parent: bool = False,
    ) -> None:
        self.argv = list(argv)
        self.name = name or os.path.basename(self.argv[0])
        self.env = dict(os.environ if env is None else env)
        self.cwd = cwd
        self.log_path = log_path
        self.cpus = list(cpus) if cpus else None
        self.memory_bytes = memory_bytes
        self.die_with_parent = die_with_parent
        self.on_line = on_line  # called with each line the child writes, on the reader thread
        self._tail: deque[str] = deque(maxlen=tail_lines)
        self._popen: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None
        self.started_at = 0.0

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> Process:
        if self._popen is not None:
            raise RuntimeError(f"{self.name} was already started")
        env = {**self.env, "PYTHONUNBUFFERED": "1"}
        launcher = _launcher(self.cpus, self.memory_bytes, self.die_with_parent)
        if launcher and os.sep not in self.argv[0] and shutil.which(
                self.argv[0], path=os.pathsep.join(os.get_exec_path(env))) is None:
            # as Popen raises for a program it cannot find, rather than the launcher's 127
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), self.argv[0])
        self.started_at = time.monotonic()
        self._popen = subprocess.Popen(
            launcher + self.argv,
            env=env,
            cwd=self.cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: a stop reaches whatever it forked
        )
        assert self._popen.stdout is not None
        self._reader = threading.Thread(
            target=self._read, args=(self._popen.stdout,), name=f"{self.name}-output", daemon=True
        )
        self._reader.start()
        return self

    def _read(self, stream: IO[bytes]) -> None:
        log = self.log_path.open("ab") if self.log_path is not None else None
        try:
            for raw in iter(stream.readline, b""):
                line = raw.decode(errors="replace").rstrip("\n")
                self._tail.append(line)
                if self.on_line is not None:
                    self.on_line(line)
                if log is not None:
                    log.write(raw)
                    log.flush()
        finally:
            stream.close()
            if log is not None:
                log.close()

    @property
    def pid(self) -> int:
        if self._popen is None:
            raise RuntimeError(f"{self.name} was not started")
        return self._popen.pid

    @property
    def returncode(self) -> int | None:
        return None if self._popen is None else self._popen.poll()

    @property
    def running(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the child to exit by itself; returns its exit code."""
        if self._popen is None:
            raise RuntimeError(f"{self.name} was not started")
        code = self._popen.wait(timeout)
        if self._reader is not None:
            self._reader.join(1.0)
        return code

    def tail(self, lines: int | None = None) -> str:
        """The last ``lines`` lines the process wrote (all that are kept by default)."""
        kept = list(self._tail)
        return "\n".join(kept if lines is None else kept[-lines:])

    def _exited(self) -> ProcessFailed:
        if self._reader is not None:
            self._reader.join(1.0)  # the last lines, which usually hold the error
        return ProcessFailed(self.name, f"exited with code {self.returncode}", self.tail(20))

    # -- readiness ---------------------------------------------------------------------

    def wait_ready(self, probe: Callable[[], bool], timeout: float) -> float:
        """Poll ``probe`` until true; return seconds since start. Raises ``ProcessFailed``."""
        deadline = time.monotonic() + timeout
        while True:
            if not self.running:
                raise self._exited()
            with contextlib.suppress(OSError):
                if probe():
                    return time.monotonic() - self.started_at
            if time.monotonic() >= deadline:
                raise ProcessFailed(self.name, f"was not ready after {timeout:g} s", self.tail(20))
            time.sleep(PROBE_INTERVAL)

    async def wait_ready_async(self, probe: Callable[[], Awaitable[bool]], timeout: float) -> float:
        """``wait_ready`` for an event loop: ``probe`` is a coroutine function."""
        deadline = time.monotonic() + timeout
        while True:
            if not self.running:
                raise self._exited()
            with contextlib.suppress(OSError):
                if await probe():
                    return time.monotonic() - self.started_at
            if time.monotonic() >= deadline:
                raise ProcessFailed(self.name, f"was not ready after {timeout:g} s", self.tail(20))
            await asyncio.sleep(PROBE_INTERVAL)

    # -- stopping ----------------------------------------------------------------------

    def _signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    def terminate(self) -> None:
        """SIGTERM to the process group: the child drains and exits in its own time."""
        if self.running:
            self._signal_group(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL to the process group, and reap the child."""
        if self._popen is None:
            return
        self._signal_group(signal.SIGKILL)
        self._popen.wait()
        if self._reader is not None:
            self._reader.join(1.0)

    def stop(self, grace: float = 30.0) -> int | None:
        """SIGTERM, up to ``grace`` seconds to drain, then SIGKILL. Returns the exit code."""
        if self._popen is None:
            return None
        if self._popen.poll() is None:
            self._signal_group(signal.SIGTERM)
            try:
                self._popen.wait(grace)
            except subprocess.TimeoutExpired:
                self.kill()
        # the group may outlive its leader (a forked helper): take it down too
        self._signal_group(signal.SIGKILL)
        if self._reader is not None:
            self._reader.join(1.0)
        return self._popen.returncode

    async def stop_async(self, grace: float = 30.0) -> int | None:
        """``stop`` without blocking an event loop while the child drains."""
        return await asyncio.to_thread(self.stop, grace)

    def __enter__(self) -> Process:
        return self.start() if self._popen is None else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def http_probe(url: str, timeout: float = 1.0) -> Callable[[], bool]:
    """A readiness probe: true when ``GET url`` answers 200 (Knative's HTTP readiness check)."""
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host, port, path = parts.hostname or "127.0.0.1", parts.port or 80, parts.path or "/"

    def probe() -> bool:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
        try:
            conn.request("GET", path)
            return conn.getresponse().status == 200
        finally:
            conn.close()

    return probe


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (children of any of its threads), from ``/proc``."""
    found: set[int] = set()
    frontier = [pid]
    while frontier:
        current = frontier.pop()
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{current}/task/{task}/children") as listing:
                    kids = [int(p) for p in listing.read().split()]
            except OSError:
                continue
            fresh = [k for k in kids if k not in found]
            found.update(fresh)
            frontier.extend(fresh)
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting to be reaped does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
