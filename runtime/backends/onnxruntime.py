"""ONNX Runtime backend: one InferenceSession per instance, providers from the config.

Provider choice follows Triton's onnxruntime backend: ``KIND_GPU`` asks for the
CUDA execution provider, a ``tensorrt`` GPU execution accelerator asks for the
TensorRT provider in front of it, and the CPU provider always closes the list.
After load the providers ORT really took are compared with the ones asked for,
so a silent fallback to CPU is reported, never hidden.

On a GPU the batch dimension is held to a few sizes (``padded_batch_sizes``). ORT's CUDA
provider re-plans every convolution whenever a session's input shape differs from its
previous run's, and a CNN whose batch sizes alternate, as dynamic batching makes them do,
runs many times slower than at a steady shape, whatever the algorithm search
(``bench/RESULTS.md``, measured on an H200). So each size in the list gets
a session of its own per instance, and a batch runs on the session of the smallest size
that holds it, zero-padded to that size, its outputs cut back to its rows. The default,
``1`` and ``max_batch_size``, keeps a lone request unpadded and every larger batch at one
shape, for the memory of the weights twice.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from modelfn.runtime.backends.base import Backend, Signature, TensorSpec, register
from modelfn.runtime.config import PADDED_BATCH_SIZES as PADDED
from modelfn.runtime.datatypes import BY_ONNX
from modelfn.runtime.errors import BackendError, ConfigError, ModelfnError
from modelfn.runtime.hardware import usable_cpus
from modelfn.runtime.limits import max_threads

if TYPE_CHECKING:
    from pathlib import Path

    import numpy as np
    import onnxruntime as ort

    from modelfn.runtime.config import Accelerator, ModelConfig

log = logging.getLogger("modelfn.onnxruntime")

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
TENSORRT = "TensorrtExecutionProvider"

#: config accelerator parameter -> TensorRT EP option (Triton's names on the left)
_TRT_OPTIONS: dict[str, str] = {
    "max_workspace_size_bytes": "trt_max_workspace_size",
    "trt_engine_cache_enable": "trt_engine_cache_enable",
    "trt_engine_cache_path": "trt_engine_cache_path",
    "trt_timing_cache_enable": "trt_timing_cache_enable",
    "trt_timing_cache_path": "trt_timing_cache_path",
    "trt_profile_min_shapes": "trt_profile_min_shapes",
    "trt_profile_opt_shapes": "trt_profile_opt_shapes",
    "trt_profile_max_shapes": "trt_profile_max_shapes",
    "trt_layer_norm_fp32_fallback": "trt_layer_norm_fp32_fallback",
    "trt_build_heuristics_enable": "trt_build_heuristics_enable",
    "trt_sparsity_enable": "trt_sparsity_enable",
    "trt_max_partition_iterations": "trt_max_partition_iterations",
    "trt_min_subgraph_size": "trt_min_subgraph_size",
    "trt_builder_optimization_level": "trt_builder_optimization_level",
    "trt_dla_enable": "trt_dla_enable",
    "trt_dla_core": "trt_dla_core",
}
#: precision_mode -> the TensorRT EP flags it turns on
_TRT_PRECISION: dict[str, dict[str, str]] = {
    "FP32": {},
    "FP16": {"trt_fp16_enable": "True"},
    "BF16": {"trt_bf16_enable": "True"},
    "INT8": {"trt_int8_enable": "True", "trt_fp16_enable": "True"},
}
#: cuda accelerator parameters passed through to the CUDA EP
_CUDA_OPTIONS = frozenset({
    "cudnn_conv_algo_search", "arena_extend_strategy", "gpu_mem_limit",
    "do_copy_in_default_stream", "cudnn_conv_use_max_workspace", "use_tf32",
})
#: cuda accelerator parameters refused, with the reason
_CUDA_REFUSED = {
    "enable_cuda_graph": (
        "a captured CUDA graph replays fixed device addresses, but modelfn feeds each batch "
        "from host memory at its own size (dynamic batching), so the graph would read stale "
        "inputs; onnxruntime crashes the process on it"),
}


@dataclass(frozen=True)
class SessionSettings:
    """Everything that shapes a session, derived once from the config."""

    providers: list[tuple[str, dict[str, str]]]
    intra_op_threads: int
    inter_op_threads: int = 1
    allow_spinning: bool = False
    graph_optimization_level: int = 99
    enable_mem_arena: bool = True
    enable_mem_pattern: bool = True
    io_binding: bool = False
    #: zero the weights' denormal values at load (``denormals.py``)
    flush_denormal_weights: bool = False
    #: batch sizes with a session each; a batch is padded to the smallest that holds it
    #: (empty: one session, every batch at its own size)
    padded_batch_sizes: tuple[int, ...] = ()
    extra: dict[str, str] = field(default_factory=dict)


def _flag(value: str) -> bool:
    word = value.strip().lower()
    if word not in _FLAGS:
        raise ValueError("must be 1 or 0 (true or false)")
    return _FLAGS[word]


def _threads(value: str) -> int:
    count = int(value) if value.strip().isdigit() else -1
    top = max_threads()
    if not 1 <= count <= top:
        raise ValueError(f"must be a whole number from 1 to {top} (16 per usable CPU)")
    return count


def _optimization_level(value: str) -> int:
    level = int(value) if value.strip().isdigit() else -1
    if level not in _LEVELS:
        raise ValueError("must be one of 0, 1, 2 or 99")
    return level


_FLAGS = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}
_LEVELS = (0, 1, 2, 99)
# parameter name -> (SessionSettings field, converter raising ValueError with the rule)
_PARAMETERS: dict[str, tuple[str, Any]] = {
    "intra_op_thread_count": ("intra_op_threads", _threads),
    "inter_op_thread_count": ("inter_op_threads", _threads),
    "allow_spinning": ("allow_spinning", _flag),
    "graph_optimization_level": ("graph_optimization_level", _optimization_level),
    "enable_mem_arena": ("enable_mem_arena", _flag),
    "enable_mem_pattern": ("enable_mem_pattern", _flag),
    "io_binding": ("io_binding", _flag),
    "flush_denormal_weights": ("flush_denormal_weights", _flag),
}
#: parameters read by the runtime around the backend, accepted here without effect
RUNTIME_PARAMETERS = frozenset({"warmup_budget_s", "default_max_batch_size", "inline_max_us"})


def _accelerator_providers(
    accelerators: tuple[Accelerator, ...], device_id: int, source: str
) -> list[tuple[str, dict[str, str]]]:
    providers: list[tuple[str, dict[str, str]]] = []
    cuda_options: dict[str, str] = {"device_id": str(device_id)}
    for acc in accelerators:
        if acc.name == "tensorrt":
            options = {"device_id": str(device_id)}
            for key, value in acc.parameters.items():
                if key == "precision_mode":
                    if value not in _TRT_PRECISION:
                        raise ConfigError(
                            f"tensorrt precision_mode '{value}' is not one of "
                            f"{', '.join(_TRT_PRECISION)}",
                            path=source,
                        )
                    options.update(_TRT_PRECISION[value])
                elif key in _TRT_OPTIONS:
                    options[_TRT_OPTIONS[key]] = value
                else:
                    raise ConfigError(
                        f"tensorrt accelerator parameter '{key}' is not supported", path=source
                    )
            providers.append((TENSORRT, options))
        elif acc.name == "cuda":
            for key, value in acc.parameters.items():
                if key in _CUDA_REFUSED:
                    raise ConfigError(f"cuda accelerator parameter '{key}' is not supported: "
                                      f"{_CUDA_REFUSED[key]}", path=source)
                if key not in _CUDA_OPTIONS:
                    raise ConfigError(
                        f"cuda accelerator parameter '{key}' is not supported", path=source
                    )
                cuda_options[key] = value
        else:
            raise ConfigError(
                f"gpu execution accelerator '{acc.name}' is not supported "
                "(modelfn supports 'tensorrt' and 'cuda')",
                path=source,
            )
    providers.append((CUDA, cuda_options))
    return providers


def session_settings(config: ModelConfig, cpus: int | None = None) -> SessionSettings:
    """Providers, thread counts and options for this model, checked against the config."""
    if config.optimization.cpu_execution_accelerator:
        names = ", ".join(a.name for a in config.optimization.cpu_execution_accelerator)
        raise ConfigError(
            f"cpu execution accelerator '{names}' is not supported by modelfn",
            path=config.source,
        )
    providers: list[tuple[str, dict[str, str]]] = []
    if config.uses_gpu:
        gpus = next((g.gpus for g in config.instance_group if g.kind == "KIND_GPU"), ())
        device_id = gpus[0] if gpus else 0
        providers = _accelerator_providers(
            config.optimization.gpu_execution_accelerator, device_id, config.source
        )
    elif config.optimization.gpu_execution_accelerator:
        raise ConfigError(
            "a gpu execution accelerator is configured but no instance_group has KIND_GPU",
            path=config.source,
        )
    providers.append((CPU, {}))

    available = cpus if cpus is not None else usable_cpus()
    values: dict[str, Any] = {
        "intra_op_threads": max(1, available // config.instance_count),
        # GPU sessions copy through pinned memory with IO binding
        "io_binding": config.uses_gpu,
    }
    for key, raw in config.parameters.items():
        if key in RUNTIME_PARAMETERS or key == PADDED:
            continue
        if key not in _PARAMETERS:
            raise ConfigError(
                f"parameter '{key}' is not supported by the onnxruntime backend "
                f"(supported: {', '.join(sorted([*_PARAMETERS, PADDED]))})",
                path=config.source,
            )
        name, convert = _PARAMETERS[key]
        try:
            values[name] = convert(raw)
        except ValueError as exc:
            raise ConfigError(f"parameter '{key}' {exc}, not '{raw}'",
                              path=config.source) from None
    values["padded_batch_sizes"] = _padded_sizes(config)
    return SessionSettings(providers=providers, **values)


def _padded_sizes(config: ModelConfig) -> tuple[int, ...]:
    """``padded_batch_sizes`` from the config ("none", or sizes up to ``max_batch_size``,
    which is always added), by default ``1`` and ``max_batch_size`` on the CUDA provider.

    Not by default in front of TensorRT, whose path has not run on a GPU here: an engine
    takes any shape within its optimization profile, and sessions of one model padded to
    different sizes would keep their engines in the one cache directory, where a session
    whose shape falls outside a cached engine's profile rebuilds it.
    """
    top = config.max_batch_size
    raw = config.parameters.get(PADDED)
    if raw is None:
        tensorrt = any(a.name == "tensorrt"
                       for a in config.optimization.gpu_execution_accelerator)
        return (1, top) if config.uses_gpu and top > 1 and not tensorrt else ()
    if raw.strip().lower() == "none":
        return ()
    if top < 1:
        raise ConfigError(f"parameter '{PADDED}' needs max_batch_size > 0: a model that "
                          "does not batch has no batch dimension to pad", path=config.source)
    words = [w.strip() for w in raw.split(",")]
    if not all(w.isdigit() and 1 <= int(w) <= top for w in words):
        raise ConfigError(f"parameter '{PADDED}' must be 'none' or batch sizes from 1 to "
                          f"max_batch_size ({top}) separated by commas, not '{raw}'",
                          path=config.source)
    return tuple(sorted({*map(int, words), top}))


def _session_options(settings: SessionSettings) -> ort.SessionOptions:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = settings.intra_op_threads
    options.inter_op_num_threads = settings.inter_op_threads
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel(
        settings.graph_optimization_level
    )
    options.enable_cpu_mem_arena = settings.enable_mem_arena
    options.enable_mem_pattern = settings.enable_mem_pattern
    # Idle intra-op threads spin by default and steal the CPU the HTTP layer needs.
    options.add_session_config_entry(
        "session.intra_op.allow_spinning", "1" if settings.allow_spinning else "0"
    )
    options.add_session_config_entry(
        "session.inter_op.allow_spinning", "1" if settings.allow_spinning else "0"
    )
    options.log_severity_level = 3
    return options


def _dims(value_info: Any) -> tuple[int, ...]:
    shape = value_info.type.tensor_type.shape
    return tuple(d.dim_value if d.HasField("dim_value") else -1 for d in shape.dim)


#: the hint for ONNX values that are not tensors (sequences, maps)
_NOT_A_TENSOR = (
    "V2 carries only tensors. A scikit-learn classifier converted by skl2onnx gets a "
    "sequence of maps from its ZipMap operator: convert it with "
    "options={id(model): {'zipmap': False}} for a tensor of probabilities"
)


def _not_a_tensor(name: str, kind: str) -> ConfigError:
    return ConfigError(f"tensor '{name}' is {kind}, not a tensor; {_NOT_A_TENSOR}")


def _spec(value_info: Any) -> TensorSpec:
    from onnx import TensorProto

    for field_name, kind in (("sequence_type", "a sequence"), ("map_type", "a map"),
                             ("optional_type", "an optional value")):
        if value_info.type.HasField(field_name):
            raise _not_a_tensor(value_info.name, kind)
    elem = value_info.type.tensor_type.elem_type
    onnx_name = TensorProto.DataType.Name(elem).lower()
    # ONNX's enum names lower-cased are ORT's type strings: FLOAT -> tensor(float)
    datatype = BY_ONNX.get(f"tensor({onnx_name})")
    if datatype is None:
        raise ConfigError(f"tensor '{value_info.name}' has ONNX type {onnx_name}, "
                          "which modelfn cannot serve")
    return TensorSpec(value_info.name, datatype, _dims(value_info))


def _node_spec(node: Any) -> TensorSpec:
    """A session's NodeArg: type 'tensor(float)', shape of ints and names/None for dynamic."""
    datatype = BY_ONNX.get(node.type)
    if datatype is None and not str(node.type).startswith("tensor("):
        raise _not_a_tensor(node.name, f"of type {node.type}")
    if datatype is None:
        raise ConfigError(f"tensor '{node.name}' has type {node.type}, which modelfn cannot serve")
    return TensorSpec(node.name, datatype,
                      tuple(d if isinstance(d, int) and d >= 0 else -1 for d in node.shape or ()))


@register
class OnnxRuntimeBackend(Backend):
    platform = "onnxruntime_onnx"
    text_strings = True  # ORT str()s a bytes element: b"x" would reach the model as "b'x'"

    def __init__(self, config: ModelConfig, model_path: Path) -> None:
        super().__init__(config, model_path)
        self.settings = session_settings(config)
        self.sessions: list[ort.InferenceSession] = []
        self.providers: list[str] = []
        self._output_names: list[str] = []
        self._bound = False
        #: flushed weights the sessions read (``add_initializer`` does not copy them)
        self._initializers: list[ort.OrtValue] = []
        #: with padded_batch_sizes, per instance: (size, session) from the smallest size up
        self._padded: list[list[tuple[int, ort.InferenceSession]]] = []

    @classmethod
    def read_signature(cls, model_path: Path) -> Signature:
        import onnx

        try:
            model = onnx.load(str(model_path), load_external_data=False)
        except Exception as exc:  # onnx raises DecodeError, OSError, ...
            raise ConfigError(f"cannot read ONNX model: {exc}", path=str(model_path)) from exc
        graph = model.graph
        initializers = {i.name for i in graph.initializer}
        inputs = tuple(_spec(i) for i in graph.input if i.name not in initializers)
        return Signature(inputs=inputs, outputs=tuple(_spec(o) for o in graph.output))

    def load(self) -> None:
        import onnxruntime as ort

        options = _session_options(self.settings)
        if self.settings.flush_denormal_weights:
            self._flush_denormals(options)
        available = set(ort.get_available_providers())
        asked = [name for name, _ in self.settings.providers]
        missing = [name for name in asked if name not in available]
        if missing:
            log.warning(
                "model %s asks for %s but this onnxruntime build has only %s; "
                "running on the providers that exist",
                self.config.name, ", ".join(missing), ", ".join(sorted(available)),
            )
        providers = [(n, o) for n, o in self.settings.providers if n in available]
        sizes = self.settings.padded_batch_sizes
        for _ in range(self.config.instance_count):
            if sizes:
                self._padded.append([(n, self._session(options, providers)) for n in sizes])
                self.sessions.append(self._padded[-1][-1][1])
            else:
                self.sessions.append(self._session(options, providers))
        if sizes:
            log.info("model %s: batches padded to %s rows, a session for each",
                     self.config.name, list(sizes))
        got = self.sessions[0].get_providers()
        log.info("model %s: onnxruntime runs it on %s", self.config.name, got)
        fallback = [name for name in asked if name not in got]
        if fallback:
            log.warning(
                "model %s: asked for providers %s, onnxruntime is using %s (fell back from %s)",
                self.config.name, asked, got, fallback,
            )
        self.providers = got
        self._output_names = [o.name for o in self.sessions[0].get_outputs()]
        # IO binding takes numeric tensors only: a model with a string tensor is fed by
        # session.run, which copies to the device just the same
        nodes = (*self.sessions[0].get_inputs(), *self.sessions[0].get_outputs())
        self._bound = self.settings.io_binding and all(n.type != "tensor(string)" for n in nodes)

    def _flush_denormals(self, options: ort.SessionOptions) -> None:
        """Give every session the model's weights with their denormals zeroed."""
        from modelfn.runtime.backends import denormals
        from modelfn.runtime.backends.onnx_weights import WeightsError

        try:
            found, values = denormals.add_flushed(options, self.model_path)
        except (OSError, WeightsError) as exc:
            raise BackendError(f"cannot read {self.model_path} to flush its denormal "
                               f"weights: {exc}") from exc
        self._initializers += values
        log.info("model %s: %d denormal weights in %d initializers flushed to zero",
                 self.config.name, found.count, len(found.arrays))

    def _session(self, options: ort.SessionOptions,
                 providers: list[tuple[str, dict[str, str]]]) -> ort.InferenceSession:
        import onnxruntime as ort

        try:
            return ort.InferenceSession(
                str(self.model_path),
                sess_options=options,
                providers=[n for n, _ in providers],
                provider_options=[o for _, o in providers],
            )
        except Exception as exc:  # ORT raises its own Fail/InvalidGraph types
            raise BackendError(f"onnxruntime could not load {self.model_path}: {exc}") from exc

    def signature(self) -> Signature:
        session = self.sessions[0]
        return Signature(
            inputs=tuple(_node_spec(n) for n in session.get_inputs()),
            outputs=tuple(_node_spec(n) for n in session.get_outputs()),
        )

    @property
    def instance_count(self) -> int:
        return len(self.sessions)

    @property
    def warms_by_largest(self) -> bool:
        """On the CPU provider a new shape costs allocation and first-touched memory, which
        the largest batch leaves in the arena for every smaller one (bench/
        warmup_penalty.py); the CUDA provider searches cuDNN algorithms per shape."""
        return bool(self.providers) and all(name == CPU for name in self.providers)

    @property
    def padded_batch_sizes(self) -> tuple[int, ...]:
        return self.settings.padded_batch_sizes if self._padded else ()

    def run(self, instance: int, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        session, rows, size = self.sessions[instance], 0, 0
        if self._padded:
            sized = self._padded[instance]
            rows = len(next(iter(inputs.values())))
            size, session = next(((n, s) for n, s in sized if n >= rows), sized[-1])
            if size > rows:
                inputs = _padded(inputs, size)
        try:
            if self._bound:
                outputs = self._run_bound(session, inputs)
            else:
                outputs = dict(zip(self._output_names,
                                   session.run(self._output_names, inputs), strict=True))
        except ModelfnError:
            raise
        except Exception as exc:
            raise BackendError(f"onnxruntime failed: {exc}") from exc
        if size > rows:
            return {name: value[:rows] if value.ndim and value.shape[0] == size else value
                    for name, value in outputs.items()}
        return outputs

    def _run_bound(
        self, session: ort.InferenceSession, inputs: dict[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        """IO binding: inputs are copied to the device once, outputs land in host memory."""
        binding = session.io_binding()
        for name, array in inputs.items():
            binding.bind_cpu_input(name, array)
        for name in self._output_names:
            binding.bind_output(name, "cpu")
        session.run_with_iobinding(binding)
        return dict(zip(self._output_names, binding.copy_outputs_to_cpu(), strict=True))

    def close(self) -> None:
        self.sessions.clear()
        self._padded.clear()


def _padded(inputs: dict[str, np.ndarray], size: int) -> dict[str, np.ndarray]:
    """Each input grown to ``size`` rows: its own, then zeros (empty strings). The batcher
    pads its batches itself (``padded_batch_sizes``); this is for a direct ``run``
    (warmup)."""
    from modelfn.runtime.batch_assembly import padded_batch

    return {name: padded_batch([array], size) for name, array in inputs.items()}
