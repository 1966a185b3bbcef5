"""A candidate serving configuration, and how it is written into a model's ``config.pbtxt``.

A ``Candidate`` holds only what ``modelfn tune`` varies: the instance count, ONNX Runtime's
intra-op threads per instance, ``max_batch_size``, the dynamic batcher's delay and
preferred sizes and, for a model on a GPU, the batch sizes its sessions pad to. ``apply``
returns the user's config with those fields replaced and every other field kept, so a
candidate is served exactly as the tuned config would be.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from modelfn.runtime.autocomplete import DEFAULT_MAX_BATCH_SIZE, default_max_batch_size
from modelfn.runtime.config import PADDED_BATCH_SIZES as PADDED_PARAMETER
from modelfn.runtime.config import DynamicBatching, InstanceGroup
from modelfn.runtime.pbtxt_writer import config_to_pbtxt

if TYPE_CHECKING:
    from collections.abc import Mapping

    from modelfn.runtime.config import ModelConfig

#: the ONNX Runtime backend's parameter for intra-op threads per instance
THREADS_PARAMETER = "intra_op_thread_count"


@dataclass(frozen=True, slots=True)
class Candidate:
    """One configuration to measure. ``threads`` None keeps the backend's own choice
    (usable cores / instances); ``label`` names where it came from in tables."""

    instances: int = 1
    threads: int | None = None
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE
    delay_us: int = 0
    preferred: tuple[int, ...] = ()
    label: str = ""
    #: serve the model's config unchanged (the baseline); the fields above are then read
    #: back from what the server reports once it has completed the config
    as_is: bool = False
    #: its instances are KIND_GPU (as the server completed the config): threads then do
    #: not matter, and ``padded`` does
    gpu: bool = False
    #: ``padded_batch_sizes`` ("none", or sizes); None keeps the backend's default
    padded: str | None = None

    @property
    def key(self) -> tuple[int, int | None, int, int, tuple[int, ...], str | None]:
        """What the server sees: two candidates with the same key measure the same thing."""
        return (self.instances, self.threads, self.max_batch_size, self.delay_us, self.preferred,
                self.padded)

    def describe(self) -> str:
        if self.gpu:
            text = f"{self.instances} GPU instance{'s' if self.instances > 1 else ''}"
        else:
            threads = "auto" if self.threads is None else str(self.threads)
            text = f"{self.instances}x{threads} threads"
        text += f", batch {self.max_batch_size}"
        if self.delay_us:
            text += f", delay {self.delay_us} us"
        if self.preferred:
            text += f", preferred {list(self.preferred)}"
        if self.padded is not None:
            text += f", padded {self.padded}"
        return text

    def with_label(self, label: str) -> Candidate:
        return replace(self, label=label)


def from_config_json(doc: Mapping[str, Any], label: str = "current") -> Candidate:
    """The candidate a served config is, from its JSON form (``GET .../config``)."""
    groups = doc.get("instance_group") or []
    parameters = doc.get("parameters") or {}
    raw = str(parameters.get(THREADS_PARAMETER, {}).get("string_value", ""))
    padded = parameters.get(PADDED_PARAMETER, {}).get("string_value")
    batching = doc.get("dynamic_batching") or {}
    return Candidate(
        instances=sum(int(g.get("count", 1)) for g in groups) or 1,
        threads=int(raw) if raw.strip().isdigit() else None,
        max_batch_size=int(doc.get("max_batch_size", 0)),
        delay_us=int(batching.get("max_queue_delay_microseconds", 0)),
        preferred=tuple(int(n) for n in batching.get("preferred_batch_size", [])),
        label=label,
        gpu=any(g.get("kind") == "KIND_GPU" for g in groups),
        padded=None if padded is None else str(padded),
    )


def apply(config: ModelConfig, candidate: Candidate) -> ModelConfig:
    """A copy of ``config`` serving ``candidate``; every field tune does not vary is kept."""
    tuned = copy.deepcopy(config)
    tuned.max_batch_size = candidate.max_batch_size
    tuned.explicit = tuned.explicit | {"max_batch_size"}
    group = tuned.instance_group[0] if tuned.instance_group else InstanceGroup(kind="KIND_AUTO")
    tuned.instance_group = [replace(group, count=candidate.instances)]
    if candidate.threads is None:
        tuned.parameters.pop(THREADS_PARAMETER, None)
    else:
        tuned.parameters[THREADS_PARAMETER] = str(candidate.threads)
    if candidate.padded is None:
        tuned.parameters.pop(PADDED_PARAMETER, None)
    else:
        tuned.parameters[PADDED_PARAMETER] = candidate.padded
    if candidate.max_batch_size > 1:
        batching = copy.deepcopy(tuned.dynamic_batching or DynamicBatching())
        batching.max_queue_delay_microseconds = candidate.delay_us
        batching.preferred_batch_size = candidate.preferred
        tuned.dynamic_batching = batching
    else:
        tuned.dynamic_batching = None
    return tuned


def render(config: ModelConfig, comment: str = "") -> str:
    """``config.pbtxt`` text for ``config``, after ``comment`` lines (``#`` added)."""
    head = "".join(f"# {line}\n" if line else "#\n" for line in comment.splitlines())
    body = config_to_pbtxt(config.to_json())
    if config.max_batch_size == 0:  # the writer leaves zeros out; unset would mean "default"
        body = "max_batch_size: 0\n" + body
    return head + body


def current(config: ModelConfig | None) -> Candidate:
    """The user's config as the baseline candidate (``as_is``), before any server has served
    it: what its file sets, and auto-complete's defaults for what it leaves out. Once a
    server starts, the config it reports replaces these fields; a config that does not start
    is shown as its file says, not as defaults."""
    if config is None:
        return Candidate(label="current", as_is=True)
    written = from_config_json(config.to_json(), label="current")
    if "max_batch_size" not in config.explicit:  # auto-complete decides it
        written = replace(written, max_batch_size=default_max_batch_size(config))
    return replace(written, as_is=True)
