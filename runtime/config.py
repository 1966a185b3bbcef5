"""The model configuration: Triton's ``config.pbtxt`` fields that modelfn serves.

``config_file.parse_config`` reads a ``config.pbtxt`` into these dataclasses, refusing
any field modelfn does not support with its file and line, and ``ModelConfig.to_json``
gives the completed config in Triton's JSON form for ``GET .../config``;
``config_from_json`` reads that form back (the serving facts only: tensors and batching),
as the gateway does from a function.
``autocomplete`` (its own module) fills what is missing from the model's signature.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from modelfn.runtime.datatypes import BY_CONFIG, Datatype
from modelfn.runtime.errors import ConfigError

Platform = Literal["onnxruntime_onnx", "tensorrt_plan"]
InstanceKind = Literal["KIND_AUTO", "KIND_CPU", "KIND_GPU"]
TimeoutAction = Literal["REJECT", "DELAY"]
WarmupData = Literal["zero_data", "random_data", "input_data_file"]
#: an input's image layout, for clients that prepare images (Triton's image_client reads it);
#: the server passes tensors as they are whatever it says
TensorFormat = Literal["FORMAT_NONE", "FORMAT_NHWC", "FORMAT_NCHW"]
TIMEOUT_ACTIONS: dict[str, TimeoutAction] = {a: a for a in get_args(TimeoutAction)}

#: platform name -> backend name, as Triton pairs them
BACKEND_OF_PLATFORM: dict[str, str] = {
    "onnxruntime_onnx": "onnxruntime",
    "tensorrt_plan": "tensorrt",
    "python": "python",  # modelfn's key for it; Triton's config names only the backend
}
PLATFORM_OF_BACKEND: dict[str, str] = {v: k for k, v in BACKEND_OF_PLATFORM.items()}
DEFAULT_MODEL_FILENAME: dict[str, str] = {
    "onnxruntime_onnx": "model.onnx",
    "tensorrt_plan": "model.plan",
    "python": "model.py",
}
#: backends Triton gives no platform: their config's JSON form leaves ``platform`` empty
#: (the model metadata's ``platform`` is then the backend's name, as Triton's is)
BACKEND_ONLY = frozenset({"python"})
#: the ``parameters`` entry naming the batch sizes an ONNX Runtime session pads to
PADDED_BATCH_SIZES = "padded_batch_sizes"
#: the platform of a model whose steps are other models (``ensemble_scheduling``)
ENSEMBLE = "ensemble"


@dataclass
class TensorConfig:
    name: str
    datatype: Datatype
    #: shape without the implicit batch dimension when max_batch_size > 0; -1 is variable
    dims: tuple[int, ...]
    reshape: tuple[int, ...] | None = None
    optional: bool = False  # inputs only
    label_filename: str = ""  # outputs only
    format: TensorFormat = "FORMAT_NONE"  # inputs only


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
class EnsembleStep:
    """One step of ``ensemble_scheduling``: a composing model and how its tensors map to
    the ensemble's (``input_map``: the model's input -> ensemble tensor; ``output_map``:
    the model's output -> ensemble tensor)."""

    model_name: str
    model_version: int = -1  # -1: the newest ready version
    input_map: dict[str, str] = field(default_factory=dict)
    output_map: dict[str, str] = field(default_factory=dict)
    #: the step's line in its config.pbtxt, for error messages (None when not from a file)
    line: int | None = field(default=None, compare=False)


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
    #: ``ensemble_scheduling``'s steps (platform "ensemble" only)
    ensemble_steps: list[EnsembleStep] = field(default_factory=list)
    #: where the config came from, for error messages ("" when auto-completed)
    source: str = ""
    #: the fields the file set explicitly (top-level names), for auto-complete decisions
    explicit: frozenset[str] = frozenset()

    @property
    def batching(self) -> bool:
        return self.max_batch_size > 0

    @property
    def is_ensemble(self) -> bool:
        return self.platform == ENSEMBLE

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
            "platform": "" if self.platform in BACKEND_ONLY else self.platform,
            "backend": self.backend,
            "version_policy": _version_policy_json(self.version_policy),
            "max_batch_size": self.max_batch_size,
            "input": [_tensor_json(t, is_input=True) for t in self.inputs],
            "output": [_tensor_json(t, is_input=False) for t in self.outputs],
        }
        if self.is_ensemble:  # an ensemble has no optimization and no instances of its own
            doc["ensemble_scheduling"] = {"step": [_step_json(s) for s in self.ensemble_steps]}
        else:
            doc["optimization"] = {
                "execution_accelerators": {
                    "gpu_execution_accelerator": _accelerators_json(
                        self.optimization.gpu_execution_accelerator
                    ),
                    "cpu_execution_accelerator": _accelerators_json(
                        self.optimization.cpu_execution_accelerator
                    ),
                }
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
        doc["format"] = tensor.format
    doc["dims"] = list(tensor.dims)
    if tensor.reshape is not None:
        doc["reshape"] = {"shape": list(tensor.reshape)}
    if is_input:
        doc |= {"is_shape_tensor": False, "allow_ragged_batch": False, "optional": tensor.optional}
    else:
        doc |= {"label_filename": tensor.label_filename, "is_shape_tensor": False}
    return doc


def _step_json(step: EnsembleStep) -> dict[str, Any]:
    return {
        "model_name": step.model_name,
        "model_version": step.model_version,
        "input_map": dict(step.input_map),
        "output_map": dict(step.output_map),
        "model_namespace": "",
    }


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
        format=_FORMAT_OF_JSON.get(doc.get("format", "FORMAT_NONE"), "FORMAT_NONE"),
    )


_FORMAT_OF_JSON: dict[Any, TensorFormat] = {f: f for f in get_args(TensorFormat)}


def _batching_from_json(doc: dict[str, Any]) -> DynamicBatching:
    policy = doc.get("default_queue_policy") or {}
    action = policy.get("timeout_action", "REJECT")
    if action not in TIMEOUT_ACTIONS:
        raise ValueError(f"unknown timeout_action {action!r}")
    return DynamicBatching(
        preferred_batch_size=tuple(_json_int(n) for n in doc.get("preferred_batch_size", [])),
        max_queue_delay_microseconds=_json_int(doc.get("max_queue_delay_microseconds", 0)),
        preserve_ordering=bool(doc.get("preserve_ordering", False)),
        default_queue_policy=QueuePolicy(
            max_queue_size=_json_int(policy.get("max_queue_size", 0)),
            default_timeout_microseconds=_json_int(policy.get("default_timeout_microseconds", 0)),
            timeout_action=TIMEOUT_ACTIONS[action],
            allow_timeout_override=bool(policy.get("allow_timeout_override", False)),
        ),
    )
