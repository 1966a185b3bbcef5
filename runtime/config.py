"""The model configuration: Triton's ``config.pbtxt`` fields that modelfn serves.

``parse_config`` reads protobuf text format (see ``pbtxt``) into these
dataclasses, refusing any field modelfn does not support with its file and
line. ``autocomplete`` fills what is missing from the model's own signature,
the way Triton's ONNX Runtime backend does, and ``ModelConfig.to_json`` gives
the completed config in Triton's JSON form for ``GET .../config``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from modelfn.runtime.datatypes import Datatype

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
        from modelfn.runtime.config_json import config_to_json

        return config_to_json(self)
