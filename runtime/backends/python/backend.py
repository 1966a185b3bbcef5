"""Triton's Python backend (``backend: "python"``): ``model.py``'s ``TritonPythonModel`` in
worker processes, one per instance, as Triton runs each instance in a stub process.

``load`` starts the workers, asks the first for the model's ``auto_complete_config``,
completes the config with it and initializes every worker with Triton's ``args``.
``run_requests`` hands a batch's requests to the instance's worker (its batcher thread
waits, the event loop does not) and checks each response against the config; a response's
error fails that request alone, an exception in ``execute`` the batch. A worker that died is
started and initialized again for the next batch; the batch it was running fails with how
it ended. BLS calls from ``execute`` run on the server's loop (``bls``), found through the
repository the backend is ``attach``-ed to. Why processes, and where this differs from
Triton: docs/adr/0008-python-models-in-worker-processes.md.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any, ClassVar

from modelfn.runtime.autocomplete import autocomplete, runtime_fields
from modelfn.runtime.backends.base import Backend, Signature, TensorSpec, register
from modelfn.runtime.backends.python.autocomplete import completed
from modelfn.runtime.backends.python.bls import schedule
from modelfn.runtime.backends.python.requirements import missing_requirements
from modelfn.runtime.backends.python.responses import ModelResponseError, checked
from modelfn.runtime.backends.python.workers import PythonWorker, WorkerFailed
from modelfn.runtime.config_file import load_config
from modelfn.runtime.errors import BackendError, ModelfnError

if TYPE_CHECKING:
    from pathlib import Path

    import numpy as np

    from modelfn.runtime.backends.base import ModelLookup
    from modelfn.runtime.batch_request import RequestContext
    from modelfn.runtime.config import InstanceGroup, ModelConfig
    from modelfn.runtime.model import ModelVersion

log = logging.getLogger("modelfn.python")

PLATFORM = "python"
#: V2 request parameters the server itself acts on, left out of ``request.parameters()``
RESERVED_PARAMETERS = frozenset({"binary_data_output", "timeout", "priority",
                                 "sequence_id", "sequence_start", "sequence_end"})


def signature_of(config: ModelConfig) -> Signature:
    """What a Python model declares, as a signature: its config's tensors (with the batch
    dimension when it batches) and its ``max_batch_size``, which the model's word settles."""
    lead = (-1,) if config.batching else ()

    def spec(tensor: Any) -> TensorSpec:
        dims = tensor.reshape if tensor.reshape is not None else tensor.dims
        return TensorSpec(tensor.name, tensor.datatype, (*lead, *dims))

    return Signature(inputs=tuple(spec(t) for t in config.inputs),
                     outputs=tuple(spec(t) for t in config.outputs),
                     max_batch_size=config.max_batch_size)


def _declared(config: ModelConfig, model_path: Path) -> ModelConfig:
    """``config`` with what the model's ``auto_complete_config`` adds, run in a worker of
    its own that ends with it (as Triton runs it in an interpreter of its own)."""
    worker = PythonWorker(model_path, config.name, _version(model_path), 0)
    worker.start()
    try:
        return completed(config, _answer(config, worker, "autocomplete", config.to_json()))
    finally:
        worker.stop()


def _version(model_path: Path) -> int:
    name = model_path.parent.name
    return int(name) if name.isdigit() else 1


def _answer(config: ModelConfig, worker: PythonWorker, kind: str, *payload: Any) -> Any:
    """A load-time command's reply; the model's failure names the model and what failed."""
    try:
        return worker.call(kind, *payload)
    except WorkerFailed as exc:
        raise BackendError(f"python model '{config.name}' failed in {kind}: "
                           f"{exc.message}") from None
    except BackendError as exc:  # the worker died: its output says why
        raise BackendError(f"python model '{config.name}' failed in {kind}: "
                           f"{exc.message}") from None


@register
class PythonBackend(Backend):
    platform = PLATFORM
    per_request = True
    implicit_warmup = False
    #: the model warns about its missing requirements once, not once per version
    _warned: ClassVar[set[str]] = set()

    def __init__(self, config: ModelConfig, model_path: Path) -> None:
        super().__init__(config, model_path)
        self.workers: list[PythonWorker] = []
        self._models: ModelLookup | None = None
        self._model: ModelVersion | None = None
        self._args: list[dict[str, str]] = []
        self._restart = threading.Lock()

    @classmethod
    def read_signature(cls, model_path: Path) -> Signature:
        model_dir = model_path.parent.parent
        given = runtime_fields(load_config(model_dir), name=model_dir.name, platform=PLATFORM)
        return signature_of(_declared(given, model_path))

    def attach(self, models: ModelLookup, model: ModelVersion) -> None:
        self._models, self._model = models, model

    def load(self) -> None:
        self._warn_missing_requirements()
        groups: list[tuple[InstanceGroup | None, int]] = [
            (g, k) for g in self.config.instance_group for k in range(g.count)] or [(None, 0)]
        version = _version(self.model_path)
        self.workers = [PythonWorker(self.model_path, self.config.name, version, i)
                        for i in range(len(groups))]
        for worker in self.workers:
            worker.start()
        declared = completed(self.config, _answer(self.config, self.workers[0],
                                                  "autocomplete", self.config.to_json()))
        self.config = autocomplete(declared, name=self.config.name,
                                   signature=signature_of(declared), platform=PLATFORM)
        document = _json(self.config)
        # Triton's "model_repository" is the model's own directory, absolute: models join
        # it with "model_version" to find their files
        repository = str(self.model_path.parent.parent.resolve())
        for group, index in groups:
            kind = group.kind.removeprefix("KIND_") if group is not None else "CPU"
            self._args.append({
                "model_config": document, "model_instance_kind": kind,
                "model_instance_name": f"{group.name if group else self.config.name}_{index}",
                "model_instance_device_id": str(group.gpus[index % len(group.gpus)]
                                                if group is not None and group.gpus else 0),
                "model_repository": repository, "model_version": str(version),
                "model_name": self.config.name,
            })
        for worker, args in zip(self.workers, self._args, strict=True):
            _answer(self.config, worker, "initialize", args)
        log.info("model %s: %d python worker(s), pids %s", self.config.name, len(self.workers),
                 [w.pid for w in self.workers])

    def _warn_missing_requirements(self) -> None:
        model_dir = self.model_path.parent.parent
        missing = missing_requirements(model_dir)
        if missing and str(model_dir) not in self._warned:
            self._warned.add(str(model_dir))
            log.warning("model %s: requirements.txt asks for %s, not installed here",
                        self.config.name, ", ".join(missing))

    def signature(self) -> Signature:
        return signature_of(self.config)

    @property
    def instance_count(self) -> int:
        return len(self.workers)

    def run(self, instance: int, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        [answer] = self.run_requests(instance, [(inputs, None)])
        if isinstance(answer, Exception):
            raise answer
        return answer

    def run_requests(self, instance: int,
                     requests: list[tuple[dict[str, np.ndarray], RequestContext | None]]
                     ) -> list[dict[str, np.ndarray] | Exception]:
        worker = self._serving(instance)
        payload = [(inputs, c.id if c else "",
                    {k: v for k, v in c.parameters.items() if k not in RESERVED_PARAMETERS}
                    if c else {}, c.outputs if c else ())
                   for inputs, c in requests]
        try:
            answers = worker.call("execute", payload, bls=self._bls)
        except WorkerFailed as exc:
            raise BackendError(f"python model '{self.config.name}': {exc.message}") from None
        if len(answers) != len(requests):
            raise BackendError(f"python model '{self.config.name}' returned {len(answers)} "
                               f"responses to {len(requests)} requests: execute must return "
                               "one InferenceResponse per request")
        return [self._checked(inputs, context, outputs, error)
                for (inputs, context), (outputs, error) in zip(requests, answers, strict=True)]

    def _checked(self, inputs: dict[str, np.ndarray], context: RequestContext | None,
                 outputs: dict[str, np.ndarray] | None, error: tuple[str, int] | None
                 ) -> dict[str, np.ndarray] | Exception:
        if error is not None:
            return ModelResponseError(self.config.name, *error)
        assert outputs is not None
        first = next(iter(inputs.values()), None)
        rows = first.shape[0] if first is not None and first.ndim else None
        return checked(self.config, rows, context.outputs if context else (), outputs)

    def _serving(self, instance: int) -> PythonWorker:
        """The instance's worker, started again (and initialized) if it died."""
        worker = self.workers[instance]
        if worker.alive:
            return worker
        with self._restart:
            fresh = PythonWorker(self.model_path, self.config.name, worker.version, instance)
            fresh.start()
            self.workers[instance] = fresh
            log.warning("model %s: python worker %d restarted (pid %d)", self.config.name,
                        instance, fresh.pid)
            _answer(self.config, fresh, "initialize", self._args[instance])
        return fresh

    def _bls(self, worker: PythonWorker, call: int, request: Any) -> None:
        batcher = self._model.batcher if self._model is not None else None
        loop = batcher.loop if batcher is not None else None
        if self._models is None or loop is None:
            worker.answer(call, None, ("BLS calls are served only while the server "
                                       "serves requests", 4))
            return
        future = schedule(self._models, loop, request)
        future.add_done_callback(lambda done: worker.events.put(("bls_done", call, done)))

    @property
    def pids(self) -> list[int]:
        """The worker processes' ids, one per instance."""
        return [w.pid for w in self.workers]

    def close(self) -> None:
        """Finalize every instance at once: each worker's ``finalize`` may take its time."""
        threads = [threading.Thread(target=self._stop, args=(worker,),
                                    name=f"modelfn-python-stop-{worker.instance}")
                   for worker in self.workers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def _stop(self, worker: PythonWorker) -> None:
        try:
            worker.stop()
        except (OSError, ModelfnError) as exc:
            log.warning("model %s: stopping python worker %d: %s", self.config.name,
                        worker.instance, exc)


def _json(config: ModelConfig) -> str:
    import json

    return json.dumps(config.to_json())
