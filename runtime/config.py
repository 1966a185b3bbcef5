"""The model configuration: Triton's ``config.pbtxt`` fields that modelfn serves.

``parse_config`` reads protobuf text format (see ``pbtxt``) into these
dataclasses, refusing any field modelfn does not support with its file and
line. ``autocomplete`` fills what is missing from the model's own signature,
the way Triton's ONNX Runtime backend does, and ``ModelConfig.to_json`` gives
the completed config in Triton's JSON form for ``GET .../config``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, get_args

from modelfn.runtime import pbtxt
from modelfn.runtime.datatypes import BY_CONFIG, Datatype
from modelfn.runtime.errors import ConfigError

if TYPE_CHECKING:
    from pathlib import Path

    from modelfn.runtime.backends.base import Signature, TensorSpec

Platform = Literal["onnxruntime_onnx", "tensorrt_plan"]
InstanceKind = Literal["KIND_AUTO", "KIND_CPU", "KIND_GPU"]
TimeoutAction = Literal["REJECT", "DELAY"]
WarmupData = Literal["zero_data", "random_data", "input_data_file"]

#: platform name -> backend name, as Triton pairs them
BACKEND_OF_PLATFORM: dict[str, str] = {
    "onnxruntime_onnx": "onnxruntime",
    "tensorrt_plan": "tensorrt",
}
PLATFORM_OF_BACKEND: dict[str, str] = {v: k for k, v in BACKEND_OF_PLATFORM.items()}
DEFAULT_MODEL_FILENAME: dict[str, str] = {
    "onnxruntime_onnx": "model.onnx",
    "tensorrt_plan": "model.plan",
}


@dataclass
class TensorConfig:
    name: str
    datatype: Datatype
    #: shape without the implicit batch dimension when max_batch_size > 0; -1 is variable
    dims: tuple[int, ...]
    reshape: tuple[int, ...] | None = None
    optional: bool = False  # inputs only
    label_filename: str = ""  # outputs only


@dataclass
class QueuePolicy:
    max_queue_size: int = 0  # 0 = unlimited
    default_timeout_microseconds: int = 0  # 0 = no timeout
    timeout_action: TimeoutAction = "REJECT"
    allow_timeout_override: bool = False


@dataclass
class DynamicBatching:
    preferred_batch_size: tuple[int, ...] = ()
    max_queue_delay_microseconds: int = 0
    preserve_ordering: bool = False
    default_queue_policy: QueuePolicy = field(default_factory=QueuePolicy)


@dataclass
class InstanceGroup:
    count: int = 1
    kind: InstanceKind = "KIND_CPU"
    name: str = ""
    gpus: tuple[int, ...] = ()


@dataclass
class VersionPolicy:
    kind: Literal["latest", "all", "specific"] = "latest"
    num_versions: int = 1  # with kind "latest"
    versions: tuple[int, ...] = ()  # with kind "specific"


@dataclass
class WarmupInput:
    datatype: Datatype
    dims: tuple[int, ...]
    data: WarmupData = "zero_data"
    input_data_file: str = ""


@dataclass
class Warmup:
    name: str
    batch_size: int = 1
    count: int = 1
    inputs: dict[str, WarmupInput] = field(default_factory=dict)


@dataclass
class Accelerator:
    """An execution accelerator, e.g. ``tensorrt`` with its ``parameters``."""

    name: str
    parameters: dict[str, str] = field(default_factory=dict)


@dataclass
class Optimization:
    gpu_execution_accelerator: tuple[Accelerator, ...] = ()
    cpu_execution_accelerator: tuple[Accelerator, ...] = ()


@dataclass
class ModelConfig:
    name: str = ""
    platform: str = ""  # "onnxruntime_onnx" | "tensorrt_plan"; empty until completed
    backend: str = ""  # "onnxruntime" | "tensorrt"
    max_batch_size: int = 0
    inputs: list[TensorConfig] = field(default_factory=list)
    outputs: list[TensorConfig] = field(default_factory=list)
    version_policy: VersionPolicy = field(default_factory=VersionPolicy)
    instance_group: list[InstanceGroup] = field(default_factory=list)
    dynamic_batching: DynamicBatching | None = None
    model_warmup: list[Warmup] = field(default_factory=list)
    optimization: Optimization = field(default_factory=Optimization)
    parameters: dict[str, str] = field(default_factory=dict)
    default_model_filename: str = ""
    #: where the config came from, for error messages ("" when auto-completed)
    source: str = ""
    #: the fields the file set explicitly (top-level names), for auto-complete decisions
    explicit: frozenset[str] = frozenset()

    @property
    def batching(self) -> bool:
        return self.max_batch_size > 0

    @property
    def instance_count(self) -> int:
        return sum(g.count for g in self.instance_group) or 1

    @property
    def uses_gpu(self) -> bool:
        return any(g.kind == "KIND_GPU" for g in self.instance_group)

    def input(self, name: str) -> TensorConfig | None:
        return next((t for t in self.inputs if t.name == name), None)

    def output(self, name: str) -> TensorConfig | None:
        return next((t for t in self.outputs if t.name == name), None)

    def to_json(self) -> dict[str, Any]:
        """Triton's JSON form (``GET /v2/models/{m}/config``): proto field names, enums as
        strings, every scalar printed, and int64 fields as numbers as Triton fixes them up."""
        doc: dict[str, Any] = {
            "name": self.name,
            "platform": self.platform,
            "backend": self.backend,
            "version_policy": _version_policy_json(self.version_policy),
            "max_batch_size": self.max_batch_size,
            "input": [_tensor_json(t, is_input=True) for t in self.inputs],
            "output": [_tensor_json(t, is_input=False) for t in self.outputs],
            "optimization": {
                "execution_accelerators": {
                    "gpu_execution_accelerator": _accelerators_json(
                        self.optimization.gpu_execution_accelerator
                    ),
                    "cpu_execution_accelerator": _accelerators_json(
                        self.optimization.cpu_execution_accelerator
                    ),
                }
            },
        }
        if self.dynamic_batching is not None:
            doc["dynamic_batching"] = _dynamic_batching_json(self.dynamic_batching)
        doc |= {
            "instance_group": [
                {"name": g.name, "kind": g.kind, "count": g.count, "gpus": list(g.gpus)}
                for g in self.instance_group
            ],
            "default_model_filename": self.default_model_filename,
            "parameters": {k: {"string_value": v} for k, v in self.parameters.items()},
            "model_warmup": [_warmup_json(w) for w in self.model_warmup],
        }
        return doc


# --- JSON form ---------------------------------------------------------------------------


def _tensor_json(tensor: TensorConfig, is_input: bool) -> dict[str, Any]:
    """A tensor in proto field order, with the fields modelfn fixes at Triton's defaults."""
    doc: dict[str, Any] = {"name": tensor.name, "data_type": tensor.datatype.config}
    if is_input:
        doc["format"] = "FORMAT_NONE"
    doc["dims"] = list(tensor.dims)
    if tensor.reshape is not None:
        doc["reshape"] = {"shape": list(tensor.reshape)}
    if is_input:
        doc |= {"is_shape_tensor": False, "allow_ragged_batch": False, "optional": tensor.optional}
    else:
        doc |= {"label_filename": tensor.label_filename, "is_shape_tensor": False}
    return doc


def _version_policy_json(policy: VersionPolicy) -> dict[str, Any]:
    bodies: dict[str, dict[str, Any]] = {
        "latest": {"num_versions": policy.num_versions},
        "all": {},
        "specific": {"versions": list(policy.versions)},
    }
    return {policy.kind: bodies[policy.kind]}


def _dynamic_batching_json(batching: DynamicBatching) -> dict[str, Any]:
    policy = batching.default_queue_policy
    return {
        "preferred_batch_size": list(batching.preferred_batch_size),
        "max_queue_delay_microseconds": batching.max_queue_delay_microseconds,
        "preserve_ordering": batching.preserve_ordering,
        "default_queue_policy": {
            "timeout_action": policy.timeout_action,
            "default_timeout_microseconds": policy.default_timeout_microseconds,
            "allow_timeout_override": policy.allow_timeout_override,
            "max_queue_size": policy.max_queue_size,
        },
    }


def _accelerators_json(accelerators: tuple[Accelerator, ...]) -> list[dict[str, Any]]:
    return [{"name": a.name, "parameters": dict(a.parameters)} for a in accelerators]


def _warmup_json(warmup: Warmup) -> dict[str, Any]:
    inputs: dict[str, Any] = {}
    for name, spec in warmup.inputs.items():
        data: Any = spec.input_data_file if spec.data == "input_data_file" else True
        inputs[name] = {"data_type": spec.datatype.config, "dims": list(spec.dims), spec.data: data}
    return {
        "name": warmup.name,
        "batch_size": warmup.batch_size,
        "inputs": inputs,
        "count": warmup.count,
    }


# --- parsing -----------------------------------------------------------------------------

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
        "dynamic_batching model_warmup optimization parameters default_model_filename"
    ),
    "input": _names("name data_type dims reshape optional"),
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
}

#: fields Triton has that modelfn refuses: the error says "not supported", not "unknown"
_TRITON_ONLY: dict[str, frozenset[str]] = {
    "": _names(
        "runtime batch_input batch_output sequence_batching ensemble_scheduling "
        "cc_model_filenames metric_tags model_operations model_transaction_policy "
        "model_repository_agents response_cache model_metrics"
    ),
    "input": _names("format is_shape_tensor allow_ragged_batch is_non_linear_format_io"),
    "output": _names("is_shape_tensor is_non_linear_format_io"),
    "instance_group": _names("rate_limiter secondary_devices profile passive host_policy"),
    "dynamic_batching": _names("priority_levels default_priority_level priority_queue_policy"),
    "optimization": _names(
        "graph priority cuda input_pinned_memory output_pinned_memory "
        "gather_kernel_buffer_threshold eager_batching"
    ),
}

#: unsupported Triton fields that are harmless at their default value (configs exported
#: from Triton's JSON spell them out), accepted and ignored only with exactly that value
_NEUTRAL: dict[tuple[str, str], pbtxt.Scalar] = {
    ("input", "format"): pbtxt.Ident("FORMAT_NONE"),
    ("input", "is_shape_tensor"): pbtxt.Ident("false"),
    ("input", "allow_ragged_batch"): pbtxt.Ident("false"),
    ("output", "is_shape_tensor"): pbtxt.Ident("false"),
}
_SCHEMA = pbtxt.Schema(_FIELDS, _TRITON_ONLY, _NEUTRAL)

_KINDS: dict[str, InstanceKind] = {k: k for k in get_args(InstanceKind)}
_TIMEOUT_ACTIONS: dict[str, TimeoutAction] = {a: a for a in get_args(TimeoutAction)}
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
    return ModelConfig(
        name=root.string("name"),
        platform=root.choice("platform", BACKEND_OF_PLATFORM),
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
        source=path,
        explicit=frozenset(f.name for f in tree.fields),
    )


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
            timeout_action=body.enum("timeout_action", _TIMEOUT_ACTIONS, "REJECT"),
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


# --- auto-complete and validation --------------------------------------------------------


def autocomplete(
    config: ModelConfig | None,
    *,
    name: str,
    signature: Signature,
    platform: str = "onnxruntime_onnx",
    default_max_batch_size: int = 4,
    gpu_available: bool = False,
) -> ModelConfig:
    """Complete ``config`` (or none) from the model's signature as Triton's ORT backend does.

    ``name`` is the model directory's name; ``platform`` applies only when the config names
    neither platform nor backend. Returns a new config; contradictions are ``ConfigError``.
    """
    completed = copy.deepcopy(config) if config is not None else ModelConfig()
    where = completed.source or None
    if completed.name and completed.name != name:
        raise ConfigError(
            f"config name '{completed.name}' does not match the model directory '{name}'",
            path=where,
        )
    completed.name = name
    _complete_platform(completed, platform)
    if not completed.default_model_filename:
        completed.default_model_filename = DEFAULT_MODEL_FILENAME[completed.platform]
    _complete_batching(completed, signature, default_max_batch_size)
    _complete_tensors(completed, "input", completed.inputs, signature.inputs)
    _complete_tensors(completed, "output", completed.outputs, signature.outputs)
    _complete_instances(completed, gpu_available)
    _validate(completed)
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
