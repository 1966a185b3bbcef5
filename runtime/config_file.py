"""Reading ``config.pbtxt``: ``parse_config`` and ``load_config``.

The text is parsed as protobuf text format (see ``pbtxt``) against the fields modelfn
serves from Triton's ``model_config.proto``; any other field is a ``ConfigError`` with its
file and line ("not supported" for a Triton field modelfn refuses, "unknown" otherwise).
The result is a ``ModelConfig`` (``config``).
"""

from __future__ import annotations

from pathlib import PurePath
from typing import TYPE_CHECKING, get_args

from modelfn.runtime import pbtxt
from modelfn.runtime.config import (
    BACKEND_OF_PLATFORM,
    ENSEMBLE,
    PLATFORM_OF_BACKEND,
    TIMEOUT_ACTIONS,
    Accelerator,
    DynamicBatching,
    EnsembleStep,
    InstanceGroup,
    InstanceKind,
    ModelConfig,
    Optimization,
    QueuePolicy,
    TensorConfig,
    TensorFormat,
    VersionPolicy,
    Warmup,
    WarmupData,
    WarmupInput,
)
from modelfn.runtime.datatypes import BY_CONFIG, Datatype
from modelfn.runtime.ensemble_graph import check_flow
from modelfn.runtime.errors import ConfigError

if TYPE_CHECKING:
    from pathlib import Path

_INT32 = (-(2**31), 2**31 - 1)
_UINT32 = (0, 2**32 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_UINT64 = (0, 2**64 - 1)
_POSITIVE_INT32 = (1, _INT32[1])
_POSITIVE_INT64 = (1, _INT64[1])


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


#: the fields modelfn reads, per message of Triton's model_config.proto ("" is the top)
_FIELDS: dict[str, frozenset[str]] = {
    "": _names(
        "name platform backend max_batch_size input output version_policy instance_group "
        "dynamic_batching model_warmup optimization parameters default_model_filename "
        "ensemble_scheduling"
    ),
    "input": _names("name data_type format dims reshape optional"),
    "output": _names("name data_type dims reshape label_filename"),
    "reshape": _names("shape"),
    "version_policy": _names("latest all specific"),
    "version_policy.latest": _names("num_versions"),
    "version_policy.all": _names(""),
    "version_policy.specific": _names("versions"),
    "instance_group": _names("name count kind gpus"),
    "dynamic_batching": _names(
        "preferred_batch_size max_queue_delay_microseconds preserve_ordering default_queue_policy"
    ),
    "dynamic_batching.default_queue_policy": _names(
        "timeout_action default_timeout_microseconds allow_timeout_override max_queue_size"
    ),
    "model_warmup": _names("name batch_size count inputs"),
    "model_warmup.inputs.value": _names("data_type dims zero_data random_data input_data_file"),
    "optimization": _names("execution_accelerators"),
    "optimization.execution_accelerators": _names(
        "gpu_execution_accelerator cpu_execution_accelerator"
    ),
    "accelerator": _names("name parameters"),
    "map": _names("key value"),
    "parameters.value": _names("string_value"),
    "ensemble_scheduling": _names("step"),
    "ensemble_scheduling.step": _names("model_name model_version input_map output_map"),
}

#: fields Triton has that modelfn refuses: the error says "not supported", not "unknown"
_TRITON_ONLY: dict[str, frozenset[str]] = {
    "": _names(
        "runtime batch_input batch_output sequence_batching "
        "cc_model_filenames metric_tags model_operations model_transaction_policy "
        "model_repository_agents response_cache model_metrics"
    ),
    "input": _names("is_shape_tensor allow_ragged_batch is_non_linear_format_io"),
    "output": _names("is_shape_tensor is_non_linear_format_io"),
    "instance_group": _names("rate_limiter secondary_devices profile passive host_policy"),
    "dynamic_batching": _names("priority_levels default_priority_level priority_queue_policy"),
    "ensemble_scheduling": _names("max_inflight_requests"),
    "ensemble_scheduling.step": _names("model_namespace"),
    "optimization": _names(
        "graph priority cuda input_pinned_memory output_pinned_memory "
        "gather_kernel_buffer_threshold eager_batching"
    ),
}

#: unsupported Triton fields that are harmless at their default value (configs exported
#: from Triton's JSON spell them out), accepted and ignored only with exactly that value
_NEUTRAL: dict[tuple[str, str], pbtxt.Scalar] = {
    ("input", "is_shape_tensor"): pbtxt.Ident("false"),
    ("input", "allow_ragged_batch"): pbtxt.Ident("false"),
    ("output", "is_shape_tensor"): pbtxt.Ident("false"),
}
_SCHEMA = pbtxt.Schema(_FIELDS, _TRITON_ONLY, _NEUTRAL)

_KINDS: dict[str, InstanceKind] = {k: k for k in get_args(InstanceKind)}
_FORMATS: dict[str, TensorFormat] = {f: f for f in get_args(TensorFormat)}
_WARMUP_DATA: tuple[WarmupData, ...] = get_args(WarmupData)


def parse_config(text: str, path: str = "config.pbtxt") -> ModelConfig:
    """Parse a ``config.pbtxt``; any field modelfn does not serve is a ``ConfigError``."""
    tree = pbtxt.parse(text, path)
    root = pbtxt.Reader(tree, "", path, _SCHEMA)
    inputs = [_tensor(r, "input") for r in root.messages("input", "input")]
    outputs = [_tensor(r, "output") for r in root.messages("output", "output")]
    for kind, tensors in (("input", inputs), ("output", outputs)):
        seen: set[str] = set()
        for tensor, f in zip(tensors, root.many(kind), strict=True):
            if tensor.name in seen:
                raise root.error(f"{kind} '{tensor.name}' is declared more than once", f)
            seen.add(tensor.name)
    policy = root.message("version_policy", "version_policy")
    batching = root.message("dynamic_batching", "dynamic_batching")
    optimization = root.message("optimization", "optimization")
    groups = root.messages("instance_group", "instance_group")
    config = ModelConfig(
        name=root.string("name"),
        platform=root.choice("platform", [*BACKEND_OF_PLATFORM, ENSEMBLE]),
        backend=root.choice("backend", PLATFORM_OF_BACKEND),
        max_batch_size=root.integer("max_batch_size", 0, (0, _INT32[1])),
        inputs=inputs,
        outputs=outputs,
        version_policy=VersionPolicy() if policy is None else _version_policy(policy),
        instance_group=[_instance_group(r) for r in groups],
        dynamic_batching=None if batching is None else _dynamic_batching(batching),
        model_warmup=[_warmup(r) for r in root.messages("model_warmup", "model_warmup")],
        optimization=Optimization() if optimization is None else _optimization(optimization),
        parameters=_parameters(root),
        default_model_filename=root.string("default_model_filename"),
        ensemble_steps=_ensemble_steps(root),
        source=path,
        explicit=frozenset(f.name for f in tree.fields),
    )
    if config.is_ensemble or root.one("ensemble_scheduling") is not None:
        _check_ensemble(config, root)
    return config


def _ensemble_steps(root: pbtxt.Reader) -> list[EnsembleStep]:
    body = root.message("ensemble_scheduling", "ensemble_scheduling")
    if body is None:
        return []
    steps = []
    for step in body.messages("step", "ensemble_scheduling.step"):
        steps.append(EnsembleStep(
            model_name=step.string("model_name"),
            model_version=step.integer("model_version", -1, _INT64),
            input_map=step.string_map("input_map"),
            output_map=step.string_map("output_map"),
            line=step.tree.line,
        ))
    return steps


#: what an ensemble must not set: it has no instances, sessions or queue of its own
_NOT_FOR_ENSEMBLES = {
    "instance_group": "instance group should not be specified",
    "optimization": "optimization should not be specified",
    "model_warmup": "model_warmup can not be specified",
    "dynamic_batching": "dynamic_batching can not be specified (its steps' models batch)",
    "backend": "backend can not be specified",
}


def _check_ensemble(config: ModelConfig, root: pbtxt.Reader) -> None:
    """Triton's rules for an ensemble's own config (its steps against their models are
    checked when it loads: ``ensemble_graph.bind``)."""
    name = config.name or PurePath(config.source).parent.name
    if not config.is_ensemble:
        raise root.error(f"ensemble scheduling cannot be set for model '{name}' whose "
                         f'platform is not "{ENSEMBLE}"', root.one("ensemble_scheduling"))
    if root.one("ensemble_scheduling") is None:
        raise root.error(f"ensemble '{name}' must set ensemble_scheduling (its steps)",
                         root.one("platform"))
    for field, problem in _NOT_FOR_ENSEMBLES.items():
        if (found := root.one(field)) is not None:
            raise root.error(f"{problem} for ensemble '{name}'", found)
    for kind, tensors in (("input", config.inputs), ("output", config.outputs)):
        if not tensors:
            raise root.error(f"ensemble '{name}' must list its {kind}s: an ensemble's config "
                             "is not completed from a model file")
    check_flow(config, name)


def _datatype(reader: pbtxt.Reader) -> Datatype:
    if reader.one("data_type") is None:
        raise reader.error("must specify 'data_type'")
    return reader.enum("data_type", BY_CONFIG, BY_CONFIG["TYPE_FP32"])


def _dims(reader: pbtxt.Reader, name: str, *, concrete: bool = False) -> tuple[int, ...]:
    dims = reader.integers(name, _INT64)
    for f, dim in zip(reader.many(name), dims, strict=True):
        if dim < 1 and (concrete or dim != -1):
            allowed = "an integer >= 1" if concrete else "an integer >= 1, or -1 for variable size"
            raise reader.error(f"field '{reader.qualify(name)}' must be {allowed}, got {dim}", f)
    return dims


def _tensor(reader: pbtxt.Reader, kind: str) -> TensorConfig:
    name = reader.string("name")
    if not name:
        raise reader.error(f"{kind} must specify 'name'")
    reader.about(f"{kind} '{name}'")
    datatype = _datatype(reader)
    dims = _dims(reader, "dims")
    if not dims:
        raise reader.error("must specify 'dims'")
    layout: TensorFormat = "FORMAT_NONE"
    if kind == "input":
        layout = reader.enum("format", _FORMATS, "FORMAT_NONE")
        if layout != "FORMAT_NONE" and len(dims) != 3:
            # Triton's rule: an image layout names three dimensions (C, H, W in some order)
            raise reader.error(f"format {layout} requires 3 dims (without the batch "
                               f"dimension), not {list(dims)}", reader.one("format"))
    reshape = None
    reshape_reader = reader.message("reshape", "reshape")
    if reshape_reader is not None:
        reshape = _dims(reshape_reader, "shape")
        if _segments(dims) != _segments(reshape):
            raise reader.error(
                f"dims {list(dims)} and reshape {list(reshape)} have different element counts",
                reshape_reader.tree,
            )
    return TensorConfig(
        name=name,
        datatype=datatype,
        dims=dims,
        reshape=reshape,
        optional=reader.boolean("optional"),
        label_filename=reader.string("label_filename"),
        format=layout,
    )


def _segments(shape: tuple[int, ...]) -> list[int]:
    """Element counts between variable dims: equal lists mean a valid reshape (Triton's rule)."""
    counts = [1]
    for dim in shape:
        if dim == -1:
            counts.append(1)
        else:
            counts[-1] *= dim
    return counts


def _version_policy(reader: pbtxt.Reader) -> VersionPolicy:
    if len(reader.tree.fields) != 1:
        raise reader.error("version_policy must set exactly one of latest, all, specific")
    (choice,) = reader.tree.fields
    body = reader.child(choice, f"version_policy.{choice.name}")
    if choice.name == "latest":
        return VersionPolicy(
            "latest", num_versions=body.integer("num_versions", 1, (1, _UINT32[1]))
        )
    if choice.name == "all":
        return VersionPolicy("all")
    versions = body.integers("versions", _POSITIVE_INT64)
    if not versions:
        raise body.error("version_policy.specific must list at least one version")
    return VersionPolicy("specific", versions=versions)


def _instance_group(reader: pbtxt.Reader) -> InstanceGroup:
    group = InstanceGroup(
        name=reader.string("name"),
        count=reader.integer("count", 1, _POSITIVE_INT32),
        kind=reader.enum("kind", _KINDS, "KIND_AUTO"),
        gpus=reader.integers("gpus", (0, _INT32[1])),
    )
    if group.kind == "KIND_CPU" and group.gpus:
        raise reader.error("instance_group of kind KIND_CPU must not list gpus")
    return group


def _dynamic_batching(reader: pbtxt.Reader) -> DynamicBatching:
    body = reader.message("default_queue_policy", "dynamic_batching.default_queue_policy")
    policy = QueuePolicy()
    if body is not None:
        policy = QueuePolicy(
            max_queue_size=body.integer("max_queue_size", 0, _UINT32),
            default_timeout_microseconds=body.integer("default_timeout_microseconds", 0, _UINT64),
            timeout_action=body.enum("timeout_action", TIMEOUT_ACTIONS, "REJECT"),
            allow_timeout_override=body.boolean("allow_timeout_override"),
        )
    return DynamicBatching(
        preferred_batch_size=reader.integers("preferred_batch_size", _POSITIVE_INT32),
        max_queue_delay_microseconds=reader.integer("max_queue_delay_microseconds", 0, _UINT64),
        preserve_ordering=reader.boolean("preserve_ordering"),
        default_queue_policy=policy,
    )


def _warmup(reader: pbtxt.Reader) -> Warmup:
    name = reader.string("name")
    reader.about(f"model_warmup '{name}'")
    inputs: dict[str, WarmupInput] = {}
    for input_name, (entry, value) in reader.entries("inputs").items():
        body = entry.child(value, "model_warmup.inputs.value")
        body.about(f"model_warmup '{name}' input '{input_name}'")
        modes = [m for m in _WARMUP_DATA if body.one(m) is not None]
        if len(modes) != 1:
            extra = body.one(modes[1]) if modes else None
            raise body.error(f"must set exactly one of {', '.join(_WARMUP_DATA)}", extra)
        (mode,) = modes
        if mode != "input_data_file":
            body.boolean(mode)  # the oneof picks the mode; the value must still be a bool
        inputs[input_name] = WarmupInput(
            datatype=_datatype(body),
            dims=_dims(body, "dims", concrete=True),
            data=mode,
            input_data_file=body.string("input_data_file"),
        )
    return Warmup(
        name=name,
        batch_size=reader.integer("batch_size", 1, (1, _UINT32[1])),
        count=max(reader.integer("count", 1, _UINT32), 1),  # Triton runs count 0 once
        inputs=inputs,
    )


def _optimization(reader: pbtxt.Reader) -> Optimization:
    body = reader.message("execution_accelerators", "optimization.execution_accelerators")
    if body is None:
        return Optimization()
    return Optimization(
        gpu_execution_accelerator=_accelerators(body, "gpu_execution_accelerator"),
        cpu_execution_accelerator=_accelerators(body, "cpu_execution_accelerator"),
    )


def _accelerators(reader: pbtxt.Reader, name: str) -> tuple[Accelerator, ...]:
    found: list[Accelerator] = []
    for body in reader.messages(name, "accelerator"):
        accelerator = Accelerator(body.string("name"), body.string_map("parameters"))
        if not accelerator.name:
            raise body.error(f"field '{body.label}' must specify 'name'")
        found.append(accelerator)
    return tuple(found)


def _parameters(root: pbtxt.Reader) -> dict[str, str]:
    values: dict[str, str] = {}
    for key, (entry, value) in root.entries("parameters").items():
        body = entry.child(value, "parameters.value")
        values[key] = body.string("string_value")
    return values


def load_config(model_dir: Path) -> ModelConfig | None:
    """The parsed ``<model_dir>/config.pbtxt``, or None when the model has none."""
    path = model_dir / "config.pbtxt"
    if not path.is_file():
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text: {exc}", path=str(path)) from exc
    return parse_config(text, str(path))
