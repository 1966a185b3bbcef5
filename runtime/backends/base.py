"""The backend contract: load a model version, run numpy tensors through it.

A backend knows nothing of HTTP or batching. ``run`` receives whole batches
prepared by the batcher and is called from one worker thread per instance
(``instance`` says which), so instances never share a session concurrently.
A ``per_request`` backend (Triton's Python backend) gets ``run_requests`` instead: the
batch as its list of requests, each answered alone.
Backends register themselves by platform name in ``BACKENDS``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol

if TYPE_CHECKING:
    from pathlib import Path

    import numpy as np

    from modelfn.runtime.batch_request import RequestContext
    from modelfn.runtime.config import ModelConfig
    from modelfn.runtime.datatypes import Datatype
    from modelfn.runtime.model import ModelVersion


@dataclass(frozen=True)
class TensorSpec:
    """A tensor as the model file declares it; -1 marks a dynamic dimension."""

    name: str
    datatype: Datatype
    shape: tuple[int, ...]


@dataclass(frozen=True)
class Signature:
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    #: the max_batch_size the model itself declares (Triton's Python backend:
    #: ``auto_complete_config``); None when the model file does not say
    max_batch_size: int | None = None


class ModelLookup(Protocol):
    """The models a backend may call (Triton's BLS): the repository it is loaded in."""

    def get(self, name: str, version: str | None = None) -> ModelVersion: ...


class Backend(ABC):
    #: the config ``platform`` this backend serves, e.g. "onnxruntime_onnx"
    platform: ClassVar[str]
    #: BYTES tensors reach ``run`` as ``str`` (UTF-8 text, as ONNX ``tensor(string)`` is),
    #: not ``bytes``; the codec decodes them per request, so bad UTF-8 is that request's 400
    text_strings: ClassVar[bool] = False
    #: the batcher calls ``run_requests`` with the batch's requests rather than ``run`` with
    #: their inputs concatenated (Triton's Python backend: ``execute(requests)``)
    per_request: ClassVar[bool] = False
    #: the server warms it up with more than ``model_warmup`` asks for (every batch size the
    #: batcher forms, to time batches for ``inline_rows``); False: only ``model_warmup``, as
    #: Triton does
    implicit_warmup: ClassVar[bool] = True

    def __init__(self, config: ModelConfig, model_path: Path) -> None:
        self.config = config
        self.model_path = model_path

    @classmethod
    @abstractmethod
    def read_signature(cls, model_path: Path) -> Signature:
        """The model file's inputs and outputs, without creating a full session."""

    def attach(self, models: ModelLookup, model: ModelVersion) -> None:  # noqa: B027
        """Before ``load``: the repository's models, for a backend whose model calls
        others (Triton's BLS), and the model version this backend serves."""

    @abstractmethod
    def load(self) -> None:
        """Create one session per instance of ``config.instance_group``.

        Only the config's runtime fields (instance groups, optimization, parameters)
        are read here: the tensors are completed afterwards from ``signature()``.
        """

    @abstractmethod
    def signature(self) -> Signature:
        """The loaded model's inputs and outputs (after ``load``), as the session sees them."""

    @abstractmethod
    def run(self, instance: int, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run one batch on ``instance``; returns every output of the model."""

    def run_requests(self, instance: int,
                     requests: list[tuple[dict[str, np.ndarray], RequestContext | None]]
                     ) -> list[dict[str, np.ndarray] | Exception]:
        """Run one batch of requests on ``instance`` (``per_request`` backends): each
        request's outputs, or the exception that fails it alone, in the requests' order.
        An exception raised here fails the whole batch."""
        raise NotImplementedError(f"{type(self).__name__} runs concatenated batches")

    @property
    @abstractmethod
    def instance_count(self) -> int:
        """How many independent sessions ``run`` may be called on concurrently."""

    @property
    def warms_by_largest(self) -> bool:
        """Whether a new batch size costs only memory that a run of the largest batch has
        already allocated and touched, so that warming the smallest and the largest batch
        covers every size (see ``modelfn.runtime.warmup``). False unless measured."""
        return False

    @property
    def padded_batch_sizes(self) -> tuple[int, ...]:
        """The batch sizes the backend runs, ascending, when it runs only those; () when it
        runs any. The batcher builds each batch at the smallest that holds it, zero-padded,
        so ``run`` gets it whole and the padding costs no second copy of the batch."""
        return ()

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release sessions and device memory."""


BACKENDS: dict[str, type[Backend]] = {}


def register(cls: type[Backend]) -> type[Backend]:
    BACKENDS[cls.platform] = cls
    return cls
