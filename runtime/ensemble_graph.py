"""An ensemble's data flow, checked with Triton's rules in two places.

``check_flow`` reads the config alone, when ``config.pbtxt`` is parsed: each step names a
model (never the ensemble itself) and maps inputs and outputs; every ensemble tensor is
produced once; every step input is an ensemble input or some step's output; no cycle;
every ensemble input is read, every ensemble output written, every internal tensor read.
``bind`` checks the steps against their composing models' completed configs, when the
ensemble loads: the mapped names exist, every required input is mapped, each tensor has
one datatype and shape whichever model it is seen from, and no composing model batches
less than the ensemble. ``topology`` is the order the scheduler (``ensemble``) follows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from modelfn.runtime.errors import ConfigError

if TYPE_CHECKING:
    from modelfn.runtime.config import EnsembleStep, ModelConfig, TensorConfig
    from modelfn.runtime.datatypes import Datatype


@dataclass(frozen=True)
class Topology:
    """How an ensemble's steps depend on each other."""

    #: step indices in an order that runs each after the steps it reads from
    order: tuple[int, ...]
    #: internal tensor -> the steps that read it
    readers: dict[str, tuple[int, ...]]
    #: per step: how many distinct internal tensors it waits for (0: it starts at once)
    waits: tuple[int, ...]
    #: no two steps can ever run at once: each step reads an output of the one before
    sequential: bool


def _error(config: ModelConfig, message: str, step: EnsembleStep | None = None) -> ConfigError:
    return ConfigError(message, path=config.source or None,
                       line=None if step is None else step.line)


def _label(index: int, step: EnsembleStep) -> str:
    return f"step {index} (model '{step.model_name}')"


def topology(config: ModelConfig, name: str) -> Topology:
    """The steps' order and dependencies; a cycle is a ``ConfigError`` that draws it."""
    steps = config.ensemble_steps
    producer = {t: i for i, s in enumerate(steps) for t in s.output_map.values()}
    needs = [sorted({t for t in s.input_map.values() if t in producer}) for s in steps]
    readers: dict[str, list[int]] = {}
    for i, tensors in enumerate(needs):
        for tensor in tensors:
            readers.setdefault(tensor, []).append(i)
    waiting = [len(n) for n in needs]
    ready = [i for i, count in enumerate(waiting) if count == 0]
    order: list[int] = []
    while ready:
        i = ready.pop(0)
        order.append(i)
        for tensor in steps[i].output_map.values():
            for reader in readers.get(tensor, ()):
                waiting[reader] -= 1
                if waiting[reader] == 0:
                    ready.append(reader)
    if len(order) < len(steps):
        stuck = set(range(len(steps))) - set(order)
        raise _error(config, f"ensemble '{name}' has a cycle: "
                     f"{_cycle(steps, needs, producer, stuck)}", steps[min(stuck)])
    sequential = all(
        any(producer.get(t) == before for t in steps[after].input_map.values())
        for before, after in zip(order, order[1:], strict=False)
    )
    return Topology(tuple(order), {t: tuple(r) for t, r in readers.items()},
                    tuple(len(n) for n in needs), sequential)


def _cycle(steps: list[EnsembleStep], needs: list[list[str]], producer: dict[str, int],
           stuck: set[int]) -> str:
    """One cycle among the ``stuck`` steps (those that never become ready), drawn."""
    # a stuck step waits for at least one tensor of another stuck step: walking from
    # one to the next must come back to a step already seen
    seen: list[int] = []
    i = min(stuck)
    while i not in seen:
        seen.append(i)
        i = next(producer[t] for t in needs[i] if producer[t] in stuck)
    loop = [*seen[seen.index(i):], i]
    parts = [_label(loop[0], steps[loop[0]])]
    for before, after in zip(loop, loop[1:], strict=False):
        tensor = next(t for t in needs[before] if producer[t] == after)
        parts.append(f"reads '{tensor}' from {_label(after, steps[after])}")
    return ", which ".join(parts)


def check_flow(config: ModelConfig, name: str) -> None:
    """Triton's checks of ``ensemble_scheduling`` on the config alone; see the module doc."""
    steps = config.ensemble_steps
    if not steps:
        raise _error(config, f"must specify 'step' for ensemble '{name}'")
    inputs = [t.name for t in config.inputs]
    producer: dict[str, int] = {}
    for i, step in enumerate(steps):
        for field, present in (("model_name", step.model_name), ("input_map", step.input_map),
                               ("output_map", step.output_map)):
            if not present:
                raise _error(config, f"must specify '{field}' in step {i} of ensemble "
                             f"'{name}'", step)
        if step.model_name == name:
            raise _error(config, f"ensemble '{name}' {_label(i, step)} runs the ensemble "
                         "itself: an ensemble cannot contain itself", step)
        if step.model_version < -1 or step.model_version == 0:
            raise _error(config, f"ensemble '{name}' {_label(i, step)}: model_version must "
                         f"be -1 (the newest) or a version number, not {step.model_version}",
                         step)
        for tensor in step.output_map.values():
            if tensor in producer:
                raise _error(config, f"ensemble tensor '{tensor}' can appear in an output map "
                             f"only once for ensemble '{name}' step {i} (step "
                             f"{producer[tensor]} produces it too)", step)
            if tensor in inputs:
                raise _error(config, f"ensemble '{name}' {_label(i, step)} writes ensemble "
                             f"tensor '{tensor}', which is an input of the ensemble", step)
            producer[tensor] = i
    read: set[str] = set()
    for i, step in enumerate(steps):
        for model_input, tensor in step.input_map.items():
            if tensor not in producer and tensor not in inputs:
                raise _error(config, f"ensemble '{name}' {_label(i, step)}: input "
                             f"'{model_input}' reads ensemble tensor '{tensor}', which is "
                             "neither an input of the ensemble nor any step's output", step)
            read.add(tensor)
    topology(config, name)
    for tensor in inputs:
        if tensor not in read:
            raise _error(config, f"ensemble input '{tensor}' for ensemble '{name}' is not used")
    outputs = {t.name for t in config.outputs}
    for tensor in outputs:
        if tensor not in producer:
            raise _error(config, f"output '{tensor}' for ensemble '{name}' is not written: no "
                         "step's output_map produces it")
    for tensor, i in producer.items():
        if tensor not in read and tensor not in outputs:
            raise _error(config, f"ensemble tensor '{tensor}' is unused in ensemble '{name}': "
                         f"{_label(i, steps[i])} writes it, but no step reads it and it is "
                         "not an output", steps[i])


@dataclass(frozen=True)
class _Node:
    """An ensemble tensor's datatype and shape as one model sees it."""

    datatype: Datatype
    dims: tuple[int, ...]
    batching: bool
    origin: str

    @property
    def full(self) -> tuple[int, ...]:
        return (-1, *self.dims) if self.batching else self.dims


def _fits(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return len(a) == len(b) and all(x == y or -1 in (x, y) for x, y in zip(a, b, strict=True))


def _shape(dims: tuple[int, ...]) -> str:
    return "[" + ",".join(map(str, dims)) + "]"


def bind(config: ModelConfig, name: str, composing: list[ModelConfig]) -> None:
    """Check each step against its composing model's completed config (``composing[i]`` is
    step i's); see the module doc."""
    nodes: dict[str, _Node] = {}
    own = f"'{name}' (the ensemble)"
    for own_tensor in (*config.inputs, *config.outputs):
        dims = own_tensor.dims if own_tensor.reshape is None else own_tensor.reshape
        nodes[own_tensor.name] = _Node(own_tensor.datatype, dims, config.batching, own)
    for i, (step, model) in enumerate(zip(config.ensemble_steps, composing, strict=True)):
        where = f"ensemble '{name}' {_label(i, step)}"
        if 0 < model.max_batch_size < config.max_batch_size:
            raise _error(config, f"ensemble '{name}' allows maximum batch size "
                         f"{config.max_batch_size}, but its step {i} runs model "
                         f"'{model.name}', which only allows maximum batch size to be "
                         f"{model.max_batch_size}", step)
        for kind, mapping, tensors in (("input", step.input_map, model.inputs),
                                       ("output", step.output_map, model.outputs)):
            known = {t.name: t for t in tensors}
            for key, tensor in mapping.items():
                spec = known.get(key)
                if spec is None:
                    names = ", ".join(f"'{n}'" for n in known)
                    raise _error(config, f"{where}: ensemble tensor '{tensor}' is mapped "
                                 f"{'to' if kind == 'input' else 'from'} non-existing {kind} "
                                 f"'{key}' of model '{model.name}' (its {kind}s are {names})",
                                 step)
                _agree(config, step, where, tensor, nodes, _node(spec, model))
        for spec in model.inputs:
            if spec.name not in step.input_map and not spec.optional:
                raise _error(config, f"{where}: input '{spec.name}' of model '{model.name}' "
                             "is not mapped to any ensemble tensor", step)


def _node(spec: TensorConfig, model: ModelConfig) -> _Node:
    return _Node(spec.datatype, spec.dims, model.batching, f"'{model.name}'")


def _agree(config: ModelConfig, step: EnsembleStep, where: str, tensor: str,
           nodes: dict[str, _Node], node: _Node) -> None:
    seen = nodes.setdefault(tensor, node)
    if seen.datatype != node.datatype:
        raise _error(config, f"{where}: ensemble tensor '{tensor}': inconsistent data type: "
                     f"{seen.datatype.config} is inferred from model {seen.origin} while "
                     f"{node.datatype.config} is inferred from model {node.origin}", step)
    # a tensor may pass between a batching and a non-batching model when the
    # non-batching one's dims spell out the batch dimension (Triton's rule)
    if not _fits(seen.dims, node.dims) and not _fits(seen.full, node.full):
        raise _error(config, f"{where}: ensemble tensor '{tensor}': inconsistent shape: "
                     f"{_shape(seen.full)} is inferred from model {seen.origin} while "
                     f"{_shape(node.full)} is inferred from model {node.origin}", step)
