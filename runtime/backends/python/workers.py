"""One Python model instance's worker process, seen from the server.

``start`` runs ``python -m modelfn.runtime.backends.python.worker`` with one end of a
socketpair (``channel.pair``). Two threads per worker: one reads the channel (log lines go
to the server's log, everything else to the worker's ``events`` queue, and the end of the
channel becomes an ``exited`` event), one copies the worker's stdout and stderr into the
server's log under the model's name, keeping the last lines for an error message.

``call`` sends a command and waits for its reply on ``events``; while it waits it serves the
worker's BLS calls (``bls``, a callable that runs one on another model and puts its
``bls_done`` event on the queue when it finishes), so several may be in flight at once.
A worker that dies makes ``call`` raise ``WorkerExited``, never hang.
"""

from __future__ import annotations

import collections
import logging
import queue
import signal
import subprocess
import sys
import threading
from typing import TYPE_CHECKING, Any

from modelfn.runtime.backends.python.channel import ChannelClosed, pair
from modelfn.runtime.backends.python.responses import error_reply
from modelfn.runtime.errors import BackendError

if TYPE_CHECKING:
    from collections.abc import Callable
    from concurrent.futures import Future
    from pathlib import Path

    import numpy as np

    #: a BLS call as the worker sends it: (call id, request), and the worker it came from
    BlsRunner = Callable[["PythonWorker", int, tuple[Any, ...]], None]

log = logging.getLogger("modelfn.python")

WORKER_MODULE = "modelfn.runtime.backends.python.worker"
#: the worker's last lines of output an error message quotes
TAIL_LINES = 5
#: seconds a worker has to finalize before it is killed
FINALIZE_TIMEOUT_S = 30.0
#: seconds to wait for a worker whose channel closed to exit, and for its last output
EXIT_WAIT_S = 5.0

_LOG_LEVELS = {"INFO": logging.INFO, "WARNING": logging.WARNING, "ERROR": logging.ERROR,
               "VERBOSE": logging.DEBUG}


class WorkerExited(BackendError):
    """The worker process died (a crash, ``os._exit``, a signal) before it answered."""

    def __init__(self, model: str, instance: int, code: int | None, tail: list[str]) -> None:
        if code is None:
            how = "closed its channel"
        elif code < 0:
            how = f"was killed by {signal.Signals(-code).name}"
        else:
            how = f"exited with code {code}"
        last = f"; its last output: {' | '.join(tail)}" if tail else ""
        super().__init__(f"python model '{model}' instance {instance} {how} while serving; "
                         f"it is restarted for the next requests{last}")


class WorkerFailed(BackendError):
    """The worker answered a command with an error: the model's code raised."""


class PythonWorker:
    def __init__(self, model_file: Path, model: str, version: int, instance: int) -> None:
        self.model_file = model_file
        self.model = model
        self.version = version
        self.instance = instance
        self.events: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self._tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self._threads: list[threading.Thread] = []
        self.proc: subprocess.Popen[bytes] | None = None
        self.alive = False

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None else 0

    def start(self) -> None:
        self.channel, theirs = pair()
        with theirs:
            self.proc = subprocess.Popen(
                [sys.executable, "-u", "-m", WORKER_MODULE, "--fd", str(theirs.fileno()),
                 "--model-file", str(self.model_file), "--name", self.model,
                 "--version", str(self.version)],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.alive = True
        name = f"modelfn-python-{self.model}-{self.instance}"
        self._threads = [threading.Thread(target=self._read, name=f"{name}-channel", daemon=True),
                         threading.Thread(target=self._pump, name=f"{name}-output", daemon=True)]
        for thread in self._threads:
            thread.start()

    def call(self, kind: str, *payload: Any, bls: BlsRunner | None = None,
             timeout: float | None = None) -> Any:
        """Send a command; its reply's payload, once the worker gives it."""
        if not self.alive:
            raise self._exited()
        try:
            self.channel.send((kind, *payload))
        except ChannelClosed:
            raise self._exited() from None
        while True:
            event = self.events.get(timeout=timeout)
            match event[0]:
                case "ok":
                    return event[1]
                case "error":
                    raise WorkerFailed(event[1])
                case "bls":
                    if bls is None:
                        self.answer(event[1], None, ("a BLS call is served only while the "
                                                     "model executes requests", 4))
                    else:
                        bls(self, event[1], event[2])
                case "bls_done":
                    self._answer_bls(event[1], event[2])
                case "exited":
                    raise self._exited()

    def answer(self, call: int, outputs: dict[str, np.ndarray] | None,
               error: tuple[str, int] | None) -> None:
        try:
            self.channel.send(("bls_reply", call, outputs, error))
        except ChannelClosed:
            pass  # the worker is gone; its caller hears of it on its own

    def _answer_bls(self, call: int, done: Future[Any]) -> None:
        error = done.exception()
        if error is None:
            self.answer(call, done.result(), None)
        else:
            self.answer(call, None, error_reply(error))

    def stop(self) -> None:
        """Finalize the model and end the process (killed if it does not end in time)."""
        proc = self.proc
        if proc is None:
            return
        if self.alive and proc.poll() is None:
            try:
                self.call("finalize", timeout=FINALIZE_TIMEOUT_S)
            except queue.Empty:
                log.warning("python model '%s' instance %d did not finalize within %g s; "
                            "killing it", self.model, self.instance, FINALIZE_TIMEOUT_S)
            except BackendError as exc:
                log.warning("python model '%s' instance %d: finalize failed: %s",
                            self.model, self.instance, exc.message)
        self.alive = False
        self.channel.close()
        try:
            proc.wait(EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for thread in self._threads:
            thread.join(EXIT_WAIT_S)

    def _exited(self) -> WorkerExited:
        """The worker is gone: reap it, and say how it ended."""
        self.alive = False
        code: int | None = None
        if self.proc is not None:
            try:
                code = self.proc.wait(EXIT_WAIT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                code = self.proc.wait()
        self._threads[-1].join(EXIT_WAIT_S)  # its last words
        self.channel.close()
        return WorkerExited(self.model, self.instance, code, list(self._tail))

    def _read(self) -> None:
        try:
            while True:
                message = self.channel.receive()
                if message[0] == "log":
                    log.log(_LOG_LEVELS.get(message[1], logging.INFO), "model %s instance %d: %s",
                            self.model, self.instance, message[2])
                else:
                    self.events.put(message)
        except (ChannelClosed, OSError):
            self.alive = False  # the next batch starts a new worker, even if none waits now
            self.events.put(("exited",))

    def _pump(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        with self.proc.stdout:
            for raw in self.proc.stdout:
                line = raw.decode(errors="replace").rstrip()
                self._tail.append(line)
                log.info("model %s instance %d: %s", self.model, self.instance, line)
