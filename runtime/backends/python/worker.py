"""A Python model instance's process: ``python -m modelfn.runtime.backends.python.worker``.

It imports the model's ``model.py`` (its directory first on ``sys.path``, and this package's
``pb_utils`` registered as ``triton_python_backend_utils``), then answers the server's
messages on its channel one at a time: ``autocomplete``, ``initialize``, ``execute``,
``finalize``. A reader thread takes every message off the channel, so that a BLS answer
reaches the model while ``execute`` waits for it, and ends the process the moment the
channel reaches its end: the server is gone, and no worker outlives it.

Each reply is ``("ok", payload)`` or ``("error", message)``; the model's traceback goes to
stderr, which the server logs under the model's name.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import inspect
import itertools
import json
import os
import queue
import sys
import threading
import traceback
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import numpy as np

from modelfn.runtime.backends.python import pb_utils
from modelfn.runtime.backends.python.autocomplete import AutoCompleteConfig
from modelfn.runtime.backends.python.channel import Channel, ChannelClosed

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path
    from types import ModuleType

#: the name model.py imports this package's pb_utils under
UTILS_MODULE = "triton_python_backend_utils"
#: the class model.py must define
MODEL_CLASS = "TritonPythonModel"


class Stub:
    """The model's way to the server: BLS calls (answered through the reader thread) and
    log lines."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self._pending: dict[int, Future[pb_utils.InferenceResponse]] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()

    def infer(self, request: pb_utils.InferenceRequest) -> Future[pb_utils.InferenceResponse]:
        future: Future[pb_utils.InferenceResponse] = Future()
        with self._lock:
            call = next(self._ids)
            self._pending[call] = future
        inputs = {t.name(): t.as_numpy() for t in request.inputs()}
        self.channel.send(("bls", call, (
            request.model_name(), request.model_version(), inputs,
            tuple(request.requested_output_names()), request.request_id(),
            json.loads(request.parameters() or "{}"), request.timeout())))
        return future

    def answer(self, call: int, outputs: dict[str, np.ndarray] | None,
               error: tuple[str, int] | None) -> None:
        with self._lock:
            future = self._pending.pop(call, None)
        if future is None:
            return
        tensors = [pb_utils.Tensor(name, array) for name, array in (outputs or {}).items()]
        failure = None if error is None else pb_utils.TritonError(*error)
        future.set_result(pb_utils.InferenceResponse(tensors, failure))

    def log(self, level: str, message: str) -> None:
        self.channel.send(("log", level, message))


def _read(channel: Channel, stub: Stub, commands: queue.SimpleQueue[Any]) -> None:
    """The reader thread: BLS answers to their callers, commands to the main thread; at the
    channel's end, the process ends."""
    try:
        while True:
            message = channel.receive()
            if message[0] == "bls_reply":
                stub.answer(*message[1:])
            else:
                commands.put(message)
    except ChannelClosed:
        pass
    except BaseException:
        traceback.print_exc()
    os._exit(0)


def _load(model_file: Path) -> ModuleType:
    sys.path.insert(0, str(model_file.parent))
    sys.modules[UTILS_MODULE] = pb_utils
    spec = importlib.util.spec_from_file_location("model", model_file)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {model_file.name}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["model"] = module
    spec.loader.exec_module(module)
    if not isinstance(getattr(module, MODEL_CLASS, None), type):
        raise ImportError(f"{model_file.name} defines no class {MODEL_CLASS}")
    return module


def _failure(exc: BaseException) -> str:
    """What a failure says: the exception's own line (a TritonModelException's message)."""
    if isinstance(exc, pb_utils.TritonModelException):
        return str(exc)
    return traceback.format_exception_only(exc)[-1].strip()


class Worker:
    def __init__(self, channel: Channel, model_file: Path, name: str, version: str) -> None:
        self.channel = channel
        self.model_file = model_file
        self.name = name
        self.version = version
        self.module: ModuleType | None = None
        self.model: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def autocomplete(self, doc: dict[str, Any]) -> dict[str, Any]:
        cls = getattr(self._module(), MODEL_CLASS)
        if not hasattr(cls, "auto_complete_config"):
            return doc
        given = AutoCompleteConfig(doc)
        returned = cls.auto_complete_config(given)
        return (returned if isinstance(returned, AutoCompleteConfig) else given).as_dict()

    def initialize(self, args: dict[str, str]) -> None:
        self.model = getattr(self._module(), MODEL_CLASS)()
        if hasattr(self.model, "initialize"):
            self.model.initialize(args)

    def execute(self, requests: list[tuple[Any, ...]]) -> list[Any]:
        if self.model is None:
            raise RuntimeError("execute before initialize")
        batch = [pb_utils.InferenceRequest(self.name, [pb_utils.Tensor(n, a)
                                                       for n, a in inputs.items()],
                                           outputs, request_id=request_id,
                                           model_version=int(self.version),
                                           parameters=json.dumps(parameters))
                 for inputs, request_id, parameters, outputs in requests]
        result = self.model.execute(batch)
        if inspect.isawaitable(result):
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
            result = self._loop.run_until_complete(_awaiting(result))
        if not isinstance(result, list | tuple):
            raise pb_utils.TritonModelException(
                f"execute returned {type(result).__name__}, not a list of InferenceResponse")
        return [_answer(response) for response in result]

    def finalize(self) -> None:
        if self.model is not None and hasattr(self.model, "finalize"):
            self.model.finalize()

    def _module(self) -> ModuleType:
        if self.module is None:
            self.module = _load(self.model_file)
        return self.module


async def _awaiting(awaitable: Any) -> Any:
    return await awaitable


def _answer(response: Any) -> tuple[dict[str, np.ndarray] | None, tuple[str, int] | None]:
    """A response as it crosses to the server: its outputs, or its error."""
    if not isinstance(response, pb_utils.InferenceResponse):
        return None, (f"execute returned {type(response).__name__} where an "
                      "InferenceResponse belongs", pb_utils.TritonError.INTERNAL)
    error = response.error()
    if error is not None:
        return None, (error.message(), error.code())
    return {t.name(): _wire(t.as_numpy()) for t in response.output_tensors()}, None


def _wire(array: Any) -> Any:
    """String arrays as Triton's BYTES are (object arrays of bytes)."""
    if isinstance(array, np.ndarray) and array.dtype.kind in "US":
        flat = [s.encode() if isinstance(s, str) else bytes(s) for s in array.ravel().tolist()]
        return np.array(flat, dtype=object).reshape(array.shape)
    return array


def main(argv: list[str] | None = None) -> None:
    from pathlib import Path

    parser = argparse.ArgumentParser(prog="modelfn python model worker")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--model-file", type=Path, required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--version", required=True)
    args = parser.parse_args(argv)
    import signal
    import socket

    # the server stops its workers itself (finalize, then the channel's end): a signal sent
    # to its whole process group (Ctrl-C, a supervisor's SIGTERM) must not cut that short
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)

    channel = Channel(socket.socket(fileno=args.fd))
    stub = Stub(channel)
    pb_utils.install(stub)
    commands: queue.SimpleQueue[Any] = queue.SimpleQueue()
    threading.Thread(target=_read, args=(channel, stub, commands), daemon=True,
                     name="modelfn-worker-reader").start()
    worker = Worker(channel, args.model_file, args.name, args.version)
    handlers: dict[str, Callable[..., Any]] = {
        "autocomplete": worker.autocomplete, "initialize": worker.initialize,
        "execute": worker.execute, "finalize": worker.finalize}
    while True:
        kind, *payload = commands.get()
        try:
            reply: tuple[str, Any] = ("ok", handlers[kind](*payload))
        except Exception as exc:
            traceback.print_exc()
            reply = ("error", _failure(exc))
        try:
            channel.send(reply)
        except ChannelClosed:
            os._exit(0)
        if kind == "finalize":
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)


if __name__ == "__main__":
    main()
