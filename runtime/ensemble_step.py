"""One step of a loaded ensemble: its composing model version and how tensors pass.

Built once at load (``make_steps``), so running a step is gathering its inputs from the
request's ensemble tensors (by reference: no copy) and keeping its outputs there. Only
where the composing model needs another form is an array changed: its config's
``reshape`` (ensemble tensors have the composing models' ``dims``, as in Triton), and
BYTES elements as ``str`` for a model that takes text (ONNX Runtime) or ``bytes`` for
one that does not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from modelfn.runtime.batch_request import RequestContext
from modelfn.runtime.errors import BackendError, ConfigError, InvalidInput

if TYPE_CHECKING:
    from collections.abc import Callable

    from modelfn.runtime.config import EnsembleStep, ModelConfig, TensorConfig
    from modelfn.runtime.model import ModelVersion
    from modelfn.runtime.stats import ComputeTimes

    Convert = Callable[[np.ndarray], np.ndarray]

Arrays = dict[str, np.ndarray]


@dataclass(frozen=True, slots=True, eq=False)
class Step:
    index: int
    #: "ensemble 'e' step 1 (model 'm' version 2)", for errors
    label: str
    model: ModelVersion
    #: (the model's input, the ensemble tensor it reads, a conversion or None)
    reads: tuple[tuple[str, str, Convert | None], ...]
    #: (the model's output, the ensemble tensor it writes, a conversion or None)
    writes: tuple[tuple[str, str, Convert | None], ...]
    #: the outputs the step asks its model for (those its output_map names)
    outputs: tuple[str, ...]
    #: the composing model batches, and the ensemble does not: the step's batch size is its
    #: inputs' first dimension (when both batch, it is the request's)
    rows_of_inputs: bool

    def inputs(self, tensors: Arrays) -> Arrays:
        """The step's inputs from the ensemble's tensors (an optional input the request
        left out stays out)."""
        found: Arrays = {}
        for key, tensor, convert in self.reads:
            array = tensors.get(tensor)
            if array is not None:
                found[key] = array if convert is None else convert(array)
        return found

    def rows(self, inputs: Arrays, rows: int) -> int:
        """The step's batch size: the request's, or its inputs' first dimension when only
        the step's model batches (an ensemble that does not batch may hold a batch in its
        tensors' dims)."""
        if not self.rows_of_inputs or not inputs:
            return rows
        return int(next(iter(inputs.values())).shape[0])

    def keep(self, outputs: Arrays, tensors: Arrays) -> None:
        """Put the step's outputs among the ensemble's tensors."""
        for key, tensor, convert in self.writes:
            array = outputs.get(key)
            if array is None:
                raise BackendError(f"model '{self.model.name}' did not produce output '{key}'")
            tensors[tensor] = array if convert is None else convert(array)

    def context(self, context: RequestContext | None, times: ComputeTimes) -> RequestContext:
        """The step's own context: the request's id and parameters, the step's outputs,
        and where its batch's compute durations go."""
        if context is None:
            return RequestContext(outputs=self.outputs, times=times)
        return RequestContext(context.id, context.parameters, self.outputs, times)


def make_steps(config: ModelConfig, name: str, composing: list[ModelVersion]) -> list[Step]:
    """The ensemble's steps, in config order, bound to their composing model versions."""
    steps = []
    for index, (step, model) in enumerate(zip(config.ensemble_steps, composing, strict=True)):
        label = (f"ensemble '{name}' step {index} (model '{model.name}' "
                 f"version {model.version})")
        lead = 1 if model.config.batching else 0
        reads = tuple((key, tensor, _into(_spec(model.config.input(key), config, step),
                                          lead, model.text_strings, label))
                      for key, tensor in step.input_map.items())
        writes = tuple((key, tensor, _out_of(_spec(model.config.output(key), config, step), lead))
                       for key, tensor in step.output_map.items())
        steps.append(Step(index, label, model, reads, writes, tuple(step.output_map),
                          model.config.batching and not config.batching))
    return steps


def _spec(spec: TensorConfig | None, config: ModelConfig, step: EnsembleStep) -> TensorConfig:
    if spec is None:  # ensemble_graph.bind checked every mapped name
        raise ConfigError(f"step model '{step.model_name}' lacks a mapped tensor",
                          path=config.source or None, line=step.line)
    return spec


def _into(spec: TensorConfig, lead: int, text: bool, label: str) -> Convert | None:
    """How an ensemble tensor becomes the model's input: its reshape, its strings' form."""
    shape = None if spec.reshape is None else _reshaper(lead, spec.dims, spec.reshape)
    strings = None
    if spec.datatype.is_bytes:
        strings = _as_text(f"{label} input '{spec.name}'") if text else _as_bytes
    if shape is None or strings is None:
        return shape or strings
    return lambda array: shape(strings(array))


def _out_of(spec: TensorConfig, lead: int) -> Convert | None:
    """How the model's output becomes an ensemble tensor: back from its reshape."""
    return None if spec.reshape is None else _reshaper(lead, spec.reshape, spec.dims)


def _reshaper(lead: int, src: tuple[int, ...], dst: tuple[int, ...]) -> Convert:
    """Reshape from config shape ``src`` to ``dst`` (after ``lead`` batch dims); the sizes
    of ``src``'s variable dims fill ``dst``'s in order, as the codec's reshape does."""
    if -1 not in dst:
        return lambda array: array.reshape(array.shape[:lead] + dst)

    def variable(array: np.ndarray) -> np.ndarray:
        body = array.shape[lead:]
        free = iter([n for n, d in zip(body, src, strict=False) if d == -1])
        return array.reshape(array.shape[:lead]
                             + tuple(next(free, -1) if d == -1 else d for d in dst))
    return variable


def _objects(items: list[object], shape: tuple[int, ...]) -> np.ndarray:
    array = np.empty(len(items), dtype=object)
    array[:] = items
    return array.reshape(shape)


def _as_text(what: str) -> Convert:
    def convert(array: np.ndarray) -> np.ndarray:
        if not array.size or type(array.flat[0]) is str:
            return array
        items = array.ravel().tolist()
        try:
            return _objects([x.decode() if isinstance(x, bytes) else x for x in items],
                            array.shape)
        except UnicodeDecodeError:
            bad = next(i for i, x in enumerate(items) if isinstance(x, bytes) and not _utf8(x))
            raise InvalidInput(f"{what}: BYTES element {bad} is not valid UTF-8, and the "
                               "model takes text (an ONNX string tensor)") from None
    return convert


def _as_bytes(array: np.ndarray) -> np.ndarray:
    if not array.size or type(array.flat[0]) is bytes:
        return array
    return _objects([x.encode() if isinstance(x, str) else x for x in array.ravel().tolist()],
                    array.shape)


def _utf8(item: bytes) -> bool:
    try:
        item.decode()
    except UnicodeDecodeError:
        return False
    return True
