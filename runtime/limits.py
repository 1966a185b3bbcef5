"""What a config may ask of this machine: bounds checked before anything is allocated.

A config is data a user (or an attacker with write access to a store) controls, so a
value the machine cannot hold must be a ``ConfigError`` naming the file, never a hang, a
crash in a native library or an OOM kill:

- instances: at most ``MAX_INSTANCES`` per group, and CPU instances at most
  ``INSTANCES_PER_CPU`` per usable CPU (each instance is a session with its own threads
  and memory arena);
- warmup: the inputs of the largest batch warmup will run, estimated from the config's
  dims and datatypes before any array exists, must fit in a fraction of the memory still
  available (outputs and the runtime's intermediates need the rest);
- thread counts: bounded by ``MAX_THREADS_PER_CPU`` per usable CPU.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from modelfn.runtime.errors import ConfigError
from modelfn.runtime.hardware import available_memory, usable_cpus

if TYPE_CHECKING:
    from modelfn.runtime.config import ModelConfig

MAX_INSTANCES = 64
INSTANCES_PER_CPU = 8
MAX_THREADS_PER_CPU = 16
#: the share of available memory a warmup batch's inputs may take
WARMUP_MEMORY_SHARE = 0.25
#: what one BYTES element is assumed to take in a warmup batch (warmup strings are short)
BYTES_ELEMENT = 64


def max_threads() -> int:
    return MAX_THREADS_PER_CPU * usable_cpus()


def check_instances(config: ModelConfig) -> None:
    for group in config.instance_group:
        if group.count > MAX_INSTANCES:
            raise ConfigError(f"instance_group count {group.count} is more than modelfn runs "
                              f"({MAX_INSTANCES}); one process is one function instance, and "
                              "the platform scales out by adding processes", path=config.source)
    cpus = usable_cpus()
    cpu_instances = sum(g.count for g in config.instance_group if g.kind != "KIND_GPU")
    if cpu_instances > INSTANCES_PER_CPU * cpus:
        raise ConfigError(f"{cpu_instances} CPU instances on {cpus} usable CPU(s) is more than "
                          f"{INSTANCES_PER_CPU} per CPU: each instance is a session with its "
                          "own threads and memory; use fewer", path=config.source)


def batch_input_bytes(config: ModelConfig, rows: int) -> int:
    """Bytes of the inputs of a batch of ``rows`` rows, variable dims counted as 1."""
    total = 0
    for tensor in config.inputs:
        dims = tensor.reshape if tensor.reshape is not None else tensor.dims
        elements = rows * math.prod(max(1, d) for d in dims)
        size = BYTES_ELEMENT if tensor.datatype.is_bytes else tensor.datatype.size
        total += elements * size
    return total


def check_warmup_memory(config: ModelConfig, rows: int) -> None:
    """Refuse a warmup whose largest batch's inputs alone would not fit."""
    need = batch_input_bytes(config, max(1, rows))
    available = available_memory()
    if available is None or need <= WARMUP_MEMORY_SHARE * available:
        return
    raise ConfigError(
        f"max_batch_size {config.max_batch_size}: the inputs of one full batch need "
        f"{need / 2**30:.2f} GiB, and {available / 2**30:.2f} GiB of memory is available "
        f"(a batch may use a quarter of it); lower max_batch_size or the dims",
        path=config.source)
