"""Auto-complete a model configuration from the model's signature, as Triton does.

Triton's ONNX Runtime backend fills ``max_batch_size``, inputs, outputs and
dynamic batching from the model file; modelfn does the same and checks what a
config does say against the model, naming the tensor and what differs.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

from modelfn.runtime.config import (
    BACKEND_OF_PLATFORM,
    DEFAULT_MODEL_FILENAME,
    PLATFORM_OF_BACKEND,
    DynamicBatching,
    InstanceGroup,
    InstanceKind,
    ModelConfig,
    TensorConfig,
)
from modelfn.runtime.errors import ConfigError

if TYPE_CHECKING:
    from modelfn.runtime.backends.base import Signature, TensorSpec

#: Triton's default_max_batch_size: what auto-complete gives a batching model whose config
#: leaves max_batch_size out (the config's own default_max_batch_size parameter overrides it)
DEFAULT_MAX_BATCH_SIZE = 4
#: the largest default_max_batch_size auto-complete may give (a config may still set more)
MAX_BATCH_SIZE = 1 << 16


def default_max_batch_size(config: ModelConfig) -> int:
    """The max_batch_size auto-complete gives a batching model whose ``config`` sets none."""
    return int(config.number("default_max_batch_size", DEFAULT_MAX_BATCH_SIZE, low=1,
                             high=MAX_BATCH_SIZE, integer=True))


def autocomplete(
    config: ModelConfig | None,
    *,
    name: str,
    signature: Signature,
    platform: str = "onnxruntime_onnx",
    default_max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
    gpu_available: bool = False,
) -> ModelConfig:
    """Complete ``config`` (or none) from the model's signature as Triton's ORT backend does.

    ``name`` is the model directory's name; ``platform`` applies only when the config names
    neither platform nor backend. Returns a new config; contradictions are ``ConfigError``.
    """
    completed = runtime_fields(config, name=name, platform=platform, gpu_available=gpu_available)
    _complete_batching(completed, signature, default_max_batch_size)
    _complete_tensors(completed, "input", completed.inputs, signature.inputs)
    _complete_tensors(completed, "output", completed.outputs, signature.outputs)
    _validate(completed)
    return completed


def runtime_fields(
    config: ModelConfig | None, *, name: str, platform: str = "onnxruntime_onnx",
    gpu_available: bool = False,
) -> ModelConfig:
    """A copy with what sessions need before the model is read: name, platform, backend,
    model file name and instance groups. ``autocomplete`` finishes it from the signature.
    """
    completed = copy.deepcopy(config) if config is not None else ModelConfig()
    if completed.name and completed.name != name:
        raise ConfigError(
            f"config name '{completed.name}' does not match the model directory '{name}'",
            path=completed.source or None,
        )
    completed.name = name
    _complete_platform(completed, platform)
    if not completed.default_model_filename:
        completed.default_model_filename = DEFAULT_MODEL_FILENAME[completed.platform]
    _complete_instances(completed, gpu_available)
    return completed


def _complete_platform(config: ModelConfig, default: str) -> None:
    if not config.platform and not config.backend:
        config.platform = default
    config.platform = config.platform or PLATFORM_OF_BACKEND[config.backend]
    implied = BACKEND_OF_PLATFORM[config.platform]
    if config.backend and config.backend != implied:
        raise ConfigError(
            f"platform '{config.platform}' runs on backend '{implied}', not '{config.backend}'",
            path=config.source or None,
        )
    config.backend = implied


def _can_batch(signature: Signature) -> bool:
    """Triton's rule: every input and output has a dynamic first dimension."""
    tensors = signature.inputs + signature.outputs
    return all(spec.shape[:1] == (-1,) for spec in tensors)


def _complete_batching(config: ModelConfig, signature: Signature, default: int) -> None:
    if signature.max_batch_size is not None:  # the model's own word (its config's included)
        config.max_batch_size = signature.max_batch_size
    can_batch = _can_batch(signature)
    if config.max_batch_size > 0 and not can_batch:
        fixed = [
            f"{spec.name} {list(spec.shape)}"
            for spec in signature.inputs + signature.outputs
            if spec.shape[:1] != (-1,)
        ]
        raise ConfigError(
            f"max_batch_size is {config.max_batch_size} but the model cannot batch: "
            f"{', '.join(fixed)} lack a variable first dimension; set max_batch_size: 0",
            path=config.source or None,
        )
    # Like Triton, a config that lists both inputs and outputs is taken as written; an
    # explicit max_batch_size (even 0) is kept, where Triton treats 0 as unset.
    complete_io = not (config.inputs and config.outputs)
    unset = config.max_batch_size == 0 and "max_batch_size" not in config.explicit
    if complete_io and can_batch and unset:
        config.max_batch_size = max(default, 0)
    if complete_io and config.max_batch_size > 1 and config.dynamic_batching is None:
        config.dynamic_batching = DynamicBatching()


def _model_dims(spec: TensorSpec, batching: bool) -> tuple[int, ...]:
    return spec.shape[1:] if batching else spec.shape


def _complete_tensors(
    config: ModelConfig,
    kind: str,
    tensors: list[TensorConfig],
    specs: tuple[TensorSpec, ...],
) -> None:
    where = config.source or None
    if not tensors:
        for spec in specs:
            dims = _model_dims(spec, config.batching)
            # a scalar per batch item is dims [1] reshaped to [] (Triton's convention)
            reshape = () if not dims and config.batching else None
            tensors.append(TensorConfig(spec.name, spec.datatype, dims or (1,), reshape))
        return
    by_name = {spec.name: spec for spec in specs}
    for tensor in tensors:
        found = by_name.get(tensor.name)
        if found is None:
            known = ", ".join(f"'{s.name}'" for s in specs) or "none"
            raise ConfigError(
                f"{kind} '{tensor.name}' is not in the model (the model's {kind}s: {known})",
                path=where,
            )
        problem = _mismatch(tensor, found, config.batching)
        if problem:
            raise ConfigError(f"{kind} '{tensor.name}': {problem}", path=where)
    if kind == "input":
        listed = {t.name for t in tensors}
        missing = [s.name for s in specs if s.name not in listed]
        if missing:
            raise ConfigError(
                f"the model's input '{missing[0]}' is missing from the config", path=where
            )


def _mismatch(tensor: TensorConfig, spec: TensorSpec, batching: bool) -> str:
    """What differs between a config tensor and the model's declaration, or ""."""
    if tensor.datatype != spec.datatype:
        return (
            f"config data_type {tensor.datatype.config} "
            f"but the model declares {spec.datatype.config}"
        )
    shape = tensor.reshape if tensor.reshape is not None else tensor.dims
    what = "reshape" if tensor.reshape is not None else "dims"
    if not spec.shape:
        if all(d == 1 for d in shape):
            return ""
        return f"config {what} {list(shape)} but the model declares a scalar (use dims [1])"
    model = _model_dims(spec, batching)
    if len(shape) == len(model) and all(m in (d, -1) for d, m in zip(shape, model, strict=True)):
        return ""
    declared = f"shape {list(spec.shape)}"
    if batching:
        declared += f" without its batch dimension {list(model)}"
    return f"config {what} {list(shape)} but the model declares {declared}"


def _complete_instances(config: ModelConfig, gpu_available: bool) -> None:
    resolved: InstanceKind = "KIND_GPU" if gpu_available else "KIND_CPU"
    if not config.instance_group:
        # Triton's ORT default is 2 CPU instances; a function gets few cores, and one
        # instance using all of them for intra-op threads is faster, so modelfn starts one.
        config.instance_group = [InstanceGroup(count=1, kind=resolved, name=config.name)]
    for index, group in enumerate(config.instance_group):
        group.name = group.name or f"{config.name}_{index}"
        if group.kind == "KIND_AUTO":
            group.kind = resolved


def _validate(config: ModelConfig) -> None:
    """Rules that span fields, checked once the config is complete."""
    problems = [
        *_instance_problems(config),
        *_batching_problems(config),
        *_warmup_problems(config),
    ]
    if problems:
        raise ConfigError(problems[0], path=config.source or None)


def _instance_problems(config: ModelConfig) -> list[str]:
    return [
        f"instance_group '{g.name}': count must be >= 1, got {g.count}"
        for g in config.instance_group
        if g.count < 1
    ]


def _batching_problems(config: ModelConfig) -> list[str]:
    problems = [
        f"input '{t.name}': optional inputs are not supported when max_batch_size > 0"
        for t in config.inputs
        if t.optional and config.batching
    ]
    problems += [
        f"{kind} '{t.name}': reshape [] (a scalar) needs max_batch_size > 0"
        for kind, tensors in (("input", config.inputs), ("output", config.outputs))
        for t in tensors
        if t.reshape == () and not config.batching
    ]
    batching = config.dynamic_batching
    if batching is None:
        return problems
    problems += [
        f"dynamic_batching: preferred_batch_size {size} must be between 1 and "
        f"max_batch_size ({config.max_batch_size})"
        for size in batching.preferred_batch_size
        if not 1 <= size <= config.max_batch_size
    ]
    policy = batching.default_queue_policy
    limits = (
        batching.max_queue_delay_microseconds,
        policy.max_queue_size,
        policy.default_timeout_microseconds,
    )
    if min(limits) < 0:
        problems.append(
            "dynamic_batching: max_queue_delay_microseconds, max_queue_size and "
            "default_timeout_microseconds must be >= 0"
        )
    if (
        batching.preserve_ordering
        and policy.timeout_action == "DELAY"
        and policy.default_timeout_microseconds > 0
    ):
        problems.append(
            "dynamic_batching: timeout_action DELAY cannot be used with preserve_ordering"
        )
    return problems


def _warmup_problems(config: ModelConfig) -> list[str]:
    problems: list[str] = []
    largest = max(config.max_batch_size, 1)
    for warmup in config.model_warmup:
        subject = f"model_warmup '{warmup.name}'"
        if not 1 <= warmup.batch_size <= largest:
            problems.append(
                f"{subject}: batch_size {warmup.batch_size} must be between 1 and {largest}"
                + ("" if config.batching else " (the model does not batch)")
            )
        for input_name, sample in warmup.inputs.items():
            tensor = config.input(input_name)
            if tensor is None:
                problems.append(f"{subject}: '{input_name}' is not an input of the model")
            elif sample.datatype != tensor.datatype:
                problems.append(
                    f"{subject} input '{input_name}': data_type {sample.datatype.config} "
                    f"but the input is {tensor.datatype.config}"
                )
            elif not _fits(sample.dims, tensor.dims):
                problems.append(
                    f"{subject} input '{input_name}': dims {list(sample.dims)} "
                    f"do not fit the input's dims {list(tensor.dims)}"
                )
        problems += [
            f"{subject}: no data for input '{t.name}'"
            for t in config.inputs
            if not t.optional and t.name not in warmup.inputs
        ]
    return problems


def _fits(dims: tuple[int, ...], pattern: tuple[int, ...]) -> bool:
    """Whether concrete ``dims`` match ``pattern``, where -1 matches any size."""
    return len(dims) == len(pattern) and all(
        p in (d, -1) for d, p in zip(dims, pattern, strict=True)
    )
