"""The model configuration: Triton's ``config.pbtxt`` fields that modelfn serves.

``parse_config`` reads protobuf text format (see ``pbtxt``) into these
dataclasses, refusing any field modelfn does not support with its file and
line, and ``ModelConfig.to_json`` gives the completed config in Triton's JSON
form for ``GET .../config``; ``config_from_json`` reads that form back (the
serving facts only: tensors and batching), as the gateway does from a function.
``autocomplete`` (its own module) fills what is missing from the model's signature.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, get_args

from modelfn.runtime import pbtxt
from modelfn.runtime.datatypes import BY_CONFIG, Datatype
from modelfn.runtime.errors import ConfigError

if TYPE_CHECKING:
    from pathlib import Path

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

    def number(self, key: str, default: float, *, low: float | None = None,
               high: float | None = None, integer: bool = False) -> float:
        """A numeric ``parameters`` entry within [``low``, ``high``] (a whole number when
        ``integer``), or ``default`` when the config does not set it."""
        raw = self.parameters.get(key)
        if raw is None:
            return default
        kind = "a whole number" if integer else "a number"
        bounds = (f" from {low:g}" if low is not None else "") + (
            f" to {high:g}" if high is not None else "")
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if (not math.isfinite(value) or (integer and not value.is_integer())
                or (low is not None and value < low) or (high is not None and value > high)):
            raise ConfigError(f"parameter '{key}' must be {kind}{bounds}, not '{raw}'",
                              path=self.source or None)
        return value

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


def config_from_json(doc: Any, source: str = "") -> ModelConfig:
    """The serving facts of a config in Triton's JSON form (``GET .../config``): name,
    ``max_batch_size``, inputs and outputs, ``dynamic_batching``; everything else keeps its
    default. A document that is not such a config is a ``ConfigError`` naming ``source``."""
    try:
        if not isinstance(doc, dict):
            raise TypeError(f"a JSON object is expected, not {type(doc).__name__}")
        batching = doc.get("dynamic_batching")
        return ModelConfig(
            name=str(doc["name"]),
            platform=str(doc.get("platform", "")),
            backend=str(doc.get("backend", "")),
            max_batch_size=_json_int(doc.get("max_batch_size", 0)),
            inputs=[_tensor_from_json(t) for t in doc.get("input", [])],
            outputs=[_tensor_from_json(t) for t in doc.get("output", [])],
            dynamic_batching=None if batching is None else _batching_from_json(batching),
            source=source,
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(f"not a model configuration in Triton's JSON form: {exc}",
                          path=source or None) from None


def _json_int(value: Any) -> int:
    """An integer field; proto3 JSON may spell 64-bit ones as strings."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise TypeError(f"an integer is expected, not {value!r}")
    return int(value)


def _tensor_from_json(doc: dict[str, Any]) -> TensorConfig:
    datatype = BY_CONFIG.get(doc["data_type"])
    if datatype is None:
        raise ValueError(f"unknown data_type {doc['data_type']!r}")
    reshape = doc.get("reshape")
    return TensorConfig(
        name=str(doc["name"]),
        datatype=datatype,
        dims=tuple(_json_int(d) for d in doc["dims"]),
        reshape=None if reshape is None else tuple(_json_int(d) for d in reshape["shape"]),
        optional=bool(doc.get("optional", False)),
        label_filename=str(doc.get("label_filename", "")),
    )


def _batching_from_json(doc: dict[str, Any]) -> DynamicBatching:
    policy = doc.get("default_queue_policy") or {}
    action = policy.get("timeout_action", "REJECT")
    if action not in _TIMEOUT_ACTIONS:
        raise ValueError(f"unknown timeout_action {action!r}")
    return DynamicBatching(
        preferred_batch_size=tuple(_json_int(n) for n in doc.get("preferred_batch_size", [])),
        max_queue_delay_microseconds=_json_int(doc.get("max_queue_delay_microseconds", 0)),
        preserve_ordering=bool(doc.get("preserve_ordering", False)),
        default_queue_policy=QueuePolicy(
            max_queue_size=_json_int(policy.get("max_queue_size", 0)),
            default_timeout_microseconds=_json_int(policy.get("default_timeout_microseconds", 0)),
            timeout_action=_TIMEOUT_ACTIONS[action],
            allow_timeout_override=bool(policy.get("allow_timeout_override", False)),
        ),
    )


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
