"""An ensemble model version: Triton's ``platform: "ensemble"``, scheduled over arrays.

An ensemble has no backend and no batcher of its own. A request runs its steps as soon
as their inputs are ready, independent steps at once, each through its composing model's
own ``ModelVersion``, so each step is batched with that model's other traffic. Tensors
pass between steps by reference (``ensemble_step``). The request's timeout and context go
to every step; the ensemble's ``max_batch_size`` bounds its rows.

How a request runs is chosen once, at load:
- ``infer`` on an ensemble whose steps form a chain (``Topology.sequential``) awaits each
  step in the caller's own coroutine: no task, no callback, no future of its own;
- ``submit`` (the HTTP edge's callback path), and ``infer`` on any other graph, make a
  ``_Run``: the request's ``Answer``, which submits each step when its inputs are there
  and settles when the last one answers. Cancelling it cancels the steps in flight.

A step's failure fails the request with the step and its model named (``StepFailed``).

Statistics are Triton's for an ensemble: each composing model counts its own requests;
the ensemble counts each request once in success or fail with its whole duration, its
rows in ``inference_count`` and one execution, a queue time of 0 (it has no queue), and
compute durations summed from the batches that ran its steps (``ComputeTimes``).
"""

from __future__ import annotations

import asyncio
import copy
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from modelfn.runtime.batch_request import Answer
from modelfn.runtime.config_file import load_config
from modelfn.runtime.ensemble_graph import Topology, bind, topology
from modelfn.runtime.ensemble_step import Step, make_steps
from modelfn.runtime.errors import (
    ConfigError,
    InvalidInput,
    ModelfnError,
    ModelNotReady,
    StepFailed,
)
from modelfn.runtime.model import ModelVersion
from modelfn.runtime.stats import ComputeTimes

if TYPE_CHECKING:
    from modelfn.runtime.batch_request import Outputs, RequestContext
    from modelfn.runtime.config import EnsembleStep, ModelConfig
    from modelfn.runtime.ensemble_step import Arrays
    from modelfn.runtime.stats import FailureReason

_now = time.perf_counter_ns


@dataclass(eq=False)
class EnsembleVersion(ModelVersion):
    """A loaded ensemble version; see the module doc. ``start_ensemble`` makes it serve."""

    steps: tuple[Step, ...] = ()
    #: the steps in an order that runs each after those it reads from
    order: tuple[Step, ...] = ()
    #: the steps that read no other step's output: a request starts with them
    first: tuple[Step, ...] = ()
    #: internal tensor -> the steps that read it
    readers: dict[str, tuple[Step, ...]] = field(default_factory=dict)
    waits: tuple[int, ...] = ()
    sequential: bool = False
    output_names: tuple[str, ...] = ()
    active: int = 0  # requests in flight
    _drained: asyncio.Future[None] | None = None

    @property
    def wants_context(self) -> bool:
        return True  # its steps get the request's id and parameters

    def start_steps(self, steps: list[Step], graph: Topology,
                    labels: dict[str, list[str]]) -> None:
        self.steps = tuple(steps)
        self.order = tuple(steps[i] for i in graph.order)
        self.first = tuple(s for s in self.order if graph.waits[s.index] == 0)
        self.readers = {t: tuple(steps[i] for i in r) for t, r in graph.readers.items()}
        self.waits = graph.waits
        self.sequential = graph.sequential
        self.output_names = tuple(t.name for t in self.config.outputs)
        self.labels = labels
        self.state = "READY"

    def _admit(self, rows: int) -> None:
        if self.state != "READY":
            raise ModelNotReady(self.name, self.version, self.reason)
        limit = self.config.max_batch_size
        if limit and rows > limit:
            self.stats.record_failure("OTHER", 0)
            raise InvalidInput(f"inference request batch-size must be <= {limit} for "
                               f"'{self.name}'")

    def submit(self, inputs: Arrays, rows: int, timeout_us: int | None = None,
               context: RequestContext | None = None) -> Answer:
        """The request's ``Answer`` (a ``_Run``); a step that refuses at once (a full
        queue, a model not ready) raises here, as a model's own refusal would."""
        self._admit(rows)
        run = _Run(self, inputs, rows, timeout_us, context)
        self._enter()
        run.start()
        return run

    async def infer(self, inputs: Arrays, rows: int, timeout_us: int | None = None,
                    context: RequestContext | None = None) -> Outputs:
        if not self.sequential:
            return await _awaited(self.submit(inputs, rows, timeout_us, context))
        self._admit(rows)
        start, times, tensors = _now(), ComputeTimes(), dict(inputs)
        self._enter()
        try:
            for step in self.order:
                try:
                    step_inputs = step.inputs(tensors)
                    outputs = await step.model.infer(step_inputs, step.rows(step_inputs, rows),
                                                     timeout_us, step.context(context, times))
                    step.keep(outputs, tensors)
                except Exception as exc:
                    raise StepFailed(step.label, exc) from exc
        except asyncio.CancelledError:
            self._failed("CANCELED", start)
            raise
        except Exception:
            self._failed("OTHER", start)
            raise
        self._succeeded(rows, start, times)
        return {name: tensors[name] for name in self.output_names}

    def _enter(self) -> None:
        self.active += 1
        self.stats.pending = self.active

    def _succeeded(self, rows: int, start: int, times: ComputeTimes) -> None:
        self.stats.record_execution(max(rows, 1), 1, times.input_ns, times.infer_ns,
                                    times.output_ns)
        self.stats.record_success(_now() - start, 0)
        self._leave()

    def _failed(self, reason: FailureReason, start: int) -> None:
        self.stats.record_failure(reason, _now() - start)
        self._leave()

    def _leave(self) -> None:
        self.active -= 1
        self.stats.pending = self.active
        drained = self._drained
        if not self.active and drained is not None and not drained.done():
            drained.set_result(None)

    async def stop(self) -> None:
        """Refuse new requests and let those in flight finish (their steps' models stop
        after the ensemble: the repository stops versions in reverse load order)."""
        self.state = "UNLOADING"
        if self.active:
            self._drained = asyncio.get_running_loop().create_future()
            await self._drained
        self.state, self.reason = "UNAVAILABLE", "unloaded"


class _Run(Answer):
    """One request through an ensemble's steps, driven by its steps' answers."""

    __slots__ = ("_context", "_ensemble", "_left", "_pending", "_rows", "_start", "_tensors",
                 "_timeout_us", "_times", "_waits")

    def __init__(self, ensemble: EnsembleVersion, inputs: Arrays, rows: int,
                 timeout_us: int | None, context: RequestContext | None) -> None:
        super().__init__()
        self._ensemble = ensemble
        self._tensors = dict(inputs)
        self._rows = rows
        self._timeout_us = timeout_us
        self._context = context
        self._times = ComputeTimes()
        self._waits = list(ensemble.waits)
        self._pending: dict[int, Answer] = {}
        self._left = len(ensemble.steps)
        self._start = _now()

    def start(self) -> None:
        """Submit the steps that need no other step's output; a refusal raises."""
        try:
            for step in self._ensemble.first:
                self._launch(step)
        except ModelfnError as error:
            self._fail(error)
            raise

    def _launch(self, step: Step) -> None:
        try:
            inputs = step.inputs(self._tensors)
            answer = step.model.submit(inputs, step.rows(inputs, self._rows), self._timeout_us,
                                       step.context(self._context, self._times))
        except Exception as exc:
            raise StepFailed(step.label, exc) from exc
        self._pending[step.index] = answer
        answer.then(partial(self._answered, step))

    def _answered(self, step: Step, outcome: Outputs | Exception) -> None:
        self._pending.pop(step.index, None)
        if self.done():  # failed or cancelled already
            return
        try:
            if isinstance(outcome, Exception):
                raise StepFailed(step.label, outcome) from outcome
            try:
                step.keep(outcome, self._tensors)
            except ModelfnError as exc:
                raise StepFailed(step.label, exc) from exc
            readers, waits = self._ensemble.readers, self._waits
            for _, tensor, _ in step.writes:
                for reader in readers.get(tensor, ()):
                    waits[reader.index] -= 1
                    if not waits[reader.index]:
                        self._launch(reader)
        except ModelfnError as error:
            self._fail(error)
            return
        self._left -= 1
        if not self._left:
            ensemble = self._ensemble
            outputs = {name: self._tensors[name] for name in ensemble.output_names}
            ensemble._succeeded(self._rows, self._start, self._times)
            self.set_result(outputs)

    def _fail(self, error: ModelfnError) -> None:
        self._withdraw_steps()
        self._ensemble._failed("OTHER", self._start)
        self.set_exception(error)

    def cancel(self) -> bool:
        if not super().cancel():
            return False
        self._withdraw_steps()
        self._ensemble._failed("CANCELED", self._start)
        return True

    def _withdraw_steps(self) -> None:
        pending, self._pending = self._pending, {}
        for answer in pending.values():
            answer.cancel()


async def _awaited(answer: Answer) -> Outputs:
    """An ``Answer``'s outcome for a caller that awaits: cancelled, it cancels the answer."""
    future: asyncio.Future[Outputs] = asyncio.get_running_loop().create_future()
    answer.then(partial(_settle, future))
    try:
        return await future
    except asyncio.CancelledError:
        answer.cancel()
        raise


def _settle(future: asyncio.Future[Outputs], outcome: Outputs | Exception) -> None:
    if future.done():
        return
    if isinstance(outcome, Exception):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


# --- loading -------------------------------------------------------------------------------


def complete_ensemble(config: ModelConfig, name: str) -> ModelConfig:
    """An ensemble's config as served: its directory's name, and nothing auto-completed
    (it has no model file: its inputs and outputs are those it lists)."""
    if config.name and config.name != name:
        raise ConfigError(f"config name '{config.name}' does not match the model directory "
                          f"'{name}'", path=config.source or None)
    completed = copy.deepcopy(config)
    completed.name = name
    return completed


def start_ensemble(model: ModelVersion, models: dict[str, dict[int, ModelVersion]],
                   labels: dict[str, list[str]]) -> ModelConfig:
    """Bind an ensemble version to its steps' model versions (loaded before it, in
    ``models``), check it against their configs, and serve. Returns its config."""
    assert isinstance(model, EnsembleVersion)
    config, name = model.config, model.name
    graph = topology(config, name)
    composing = [_composing(config, name, i, step, models)
                 for i, step in enumerate(config.ensemble_steps)]
    bind(config, name, [m.config for m in composing])
    model.start_steps(make_steps(config, name, composing), graph, labels)
    return config


def _composing(config: ModelConfig, name: str, index: int, step: EnsembleStep,
               models: dict[str, dict[int, ModelVersion]]) -> ModelVersion:
    """The model version step ``index`` runs: ``model_version``, or -1 for the newest
    ready one."""
    where = f"ensemble '{name}' step {index}"

    def error(problem: str) -> ConfigError:
        return ConfigError(f"{where}: {problem}", path=config.source or None, line=step.line)

    versions = models.get(step.model_name)
    if versions is None:
        loop = _circle(Path(config.source).parent.parent, name, step.model_name)
        if loop:
            raise error(f"circular dependency between ensembles: {loop}")
        raise error(f"model '{step.model_name}' is not in the model repository")
    if step.model_version == -1:
        ready = [m for m in versions.values() if m.ready]
        if ready:
            return max(ready, key=lambda m: m.version)
        reasons = "; ".join(m.reason for m in versions.values() if m.reason)
        raise error(f"model '{step.model_name}' has no ready version"
                    + (f": {reasons}" if reasons else ""))
    chosen = versions.get(step.model_version)
    if chosen is None:
        served = ", ".join(str(v) for v in versions if v) or "none"
        raise error(f"model '{step.model_name}' version {step.model_version} is not served "
                    f"(versions served: {served})")
    if not chosen.ready:
        raise error(f"model '{step.model_name}' version {step.model_version} is not ready: "
                    f"{chosen.reason}")
    return chosen


def ensemble_steps_of(model_dir: Path) -> list[str]:
    """The models an ensemble's steps name ([] for a model that is no ensemble, or whose
    config does not parse: its own load says why)."""
    try:
        config = load_config(model_dir)
    except ModelfnError:
        return []
    if config is None or not config.is_ensemble:
        return []
    return [step.model_name for step in config.ensemble_steps]


def _circle(repository: Path, name: str, start: str) -> str:
    """The chain of ensembles from ``name`` through ``start`` back to ``name``, or ""."""

    def walk(path: list[str]) -> list[str] | None:
        for model in ensemble_steps_of(repository / path[-1]):
            if model == name:
                return [*path, model]
            if model not in path and (found := walk([*path, model])):
                return found
        return None

    found = walk([name, start])
    return " -> ".join(found) if found else ""


def with_composing_models(repository: Path, wanted: list[tuple[str, int | None]]
                          ) -> list[tuple[str, int | None]]:
    """``wanted`` with the models its ensembles' steps name added (those in the
    repository), each model before the ensembles that run it."""
    pins = dict(wanted)
    order: list[tuple[str, int | None]] = []
    placed: set[str] = set()

    def visit(model: str, stack: set[str]) -> None:
        if model in placed or model in stack:  # a cycle: the ensemble's load reports it
            return
        stack.add(model)
        for dependency in ensemble_steps_of(repository / model):
            if (repository / dependency).is_dir():
                visit(dependency, stack)
        stack.discard(model)
        placed.add(model)
        order.append((model, pins.get(model)))

    for model, _ in wanted:
        visit(model, set())
    return order
