"""TensorRT backend: serialized ``model.plan`` engines through the TensorRT runtime.

GPU only. Each instance owns an execution context, a CUDA stream and device
buffers that grow to the largest batch seen, so a steady load allocates
nothing. Host<->device copies go through cuda-python's runtime API. Engines
are tied to the GPU's compute capability and TensorRT version; a mismatch is
reported as a load error, not a crash.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from modelfn.runtime.backends.base import Backend, Signature, TensorSpec, register
from modelfn.runtime.datatypes import from_numpy
from modelfn.runtime.errors import BackendError, ConfigError

if TYPE_CHECKING:
    from pathlib import Path

    from modelfn.runtime.config import ModelConfig


def _import_trt() -> Any:
    try:
        import tensorrt
    except ImportError as exc:
        raise BackendError(
            "the tensorrt_plan platform needs the 'tensorrt' package: "
            "pip install 'modelfn[gpu]' on a machine with an NVIDIA GPU"
        ) from exc
    return tensorrt


def _import_cudart() -> Any:
    try:
        from cuda.bindings import runtime as cudart  # cuda-python >= 12.6
    except ImportError:
        try:
            from cuda import cudart  # older cuda-python
        except ImportError as exc:
            raise BackendError(
                "the tensorrt_plan platform needs 'cuda-python': pip install 'modelfn[gpu]'"
            ) from exc
    return cudart


def _check(result: tuple[Any, ...], what: str) -> Any:
    """cuda-python returns (error, *values); raise on any error."""
    err, *values = result
    if int(err) != 0:
        raise BackendError(f"CUDA {what} failed with error {int(err)}")
    return values[0] if len(values) == 1 else values


def _engine(trt: Any, path: Path) -> Any:
    logger = trt.Logger(trt.Logger.WARNING)
    runtime = trt.Runtime(logger)
    engine = runtime.deserialize_cuda_engine(path.read_bytes())
    if engine is None:
        raise BackendError(
            f"TensorRT could not deserialize {path}: an engine only runs on the GPU "
            f"architecture and TensorRT version ({trt.__version__}) it was built with"
        )
    return engine


def _signature(trt: Any, engine: Any) -> Signature:
    inputs: list[TensorSpec] = []
    outputs: list[TensorSpec] = []
    for i in range(engine.num_io_tensors):
        name = engine.get_tensor_name(i)
        dtype = np.dtype(trt.nptype(engine.get_tensor_dtype(name)))
        spec = TensorSpec(name, from_numpy(dtype), tuple(engine.get_tensor_shape(name)))
        (inputs if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT else outputs).append(
            spec
        )
    return Signature(tuple(inputs), tuple(outputs))


@dataclass
class _Instance:
    context: Any
    stream: Any
    buffers: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (ptr, bytes)


@register
class TensorRTBackend(Backend):
    platform = "tensorrt_plan"

    def __init__(self, config: ModelConfig, model_path: Path) -> None:
        super().__init__(config, model_path)
        if not config.uses_gpu:
            raise ConfigError(
                "tensorrt_plan models run on GPU instances only: set instance_group kind KIND_GPU",
                path=config.source,
            )
        self._instances: list[_Instance] = []

    @classmethod
    def read_signature(cls, model_path: Path) -> Signature:
        trt = _import_trt()
        return _signature(trt, _engine(trt, model_path))

    def load(self) -> None:
        trt = _import_trt()
        self._cudart = _import_cudart()
        gpus = next((g.gpus for g in self.config.instance_group if g.kind == "KIND_GPU"), ())
        _check(self._cudart.cudaSetDevice(gpus[0] if gpus else 0), "cudaSetDevice")
        self._engine = _engine(trt, self.model_path)
        sig = _signature(trt, self._engine)
        self._inputs = [s.name for s in sig.inputs]
        self._outputs = {s.name: s for s in sig.outputs}
        for _ in range(self.config.instance_count):
            context = self._engine.create_execution_context()
            if context is None:
                raise BackendError("TensorRT could not create an execution context (GPU memory?)")
            stream = _check(self._cudart.cudaStreamCreate(), "cudaStreamCreate")
            self._instances.append(_Instance(context, stream))

    def signature(self) -> Signature:
        return _signature(_import_trt(), self._engine)

    @property
    def instance_count(self) -> int:
        return len(self._instances)

    def _buffer(self, inst: _Instance, name: str, nbytes: int) -> int:
        ptr, size = inst.buffers.get(name, (0, 0))
        if size < nbytes:
            if ptr:
                _check(self._cudart.cudaFree(ptr), "cudaFree")
            ptr = _check(self._cudart.cudaMalloc(max(nbytes, 1)), "cudaMalloc")
            inst.buffers[name] = (ptr, nbytes)
            inst.context.set_tensor_address(name, ptr)
        return int(ptr)

    def run(self, instance: int, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        cudart = self._cudart
        inst = self._instances[instance]
        h2d = cudart.cudaMemcpyKind.cudaMemcpyHostToDevice
        d2h = cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost
        for name in self._inputs:
            array = np.ascontiguousarray(inputs[name])
            if not inst.context.set_input_shape(name, array.shape):
                raise BackendError(f"TensorRT rejected shape {list(array.shape)} for '{name}' "
                                   "(outside the engine's optimization profile)")
            ptr = self._buffer(inst, name, array.nbytes)
            _check(cudart.cudaMemcpyAsync(ptr, array.ctypes.data, array.nbytes, h2d, inst.stream),
                   "cudaMemcpyAsync")
        results: dict[str, np.ndarray] = {}
        for name, spec in self._outputs.items():
            shape = tuple(inst.context.get_tensor_shape(name))
            out = np.empty(shape, dtype=spec.datatype.numpy)
            self._buffer(inst, name, out.nbytes)
            results[name] = out
        if not inst.context.execute_async_v3(inst.stream):
            raise BackendError("TensorRT execution failed")
        for name, out in results.items():
            ptr = inst.buffers[name][0]
            _check(cudart.cudaMemcpyAsync(out.ctypes.data, ptr, out.nbytes, d2h, inst.stream),
                   "cudaMemcpyAsync")
        _check(cudart.cudaStreamSynchronize(inst.stream), "cudaStreamSynchronize")
        return results

    def close(self) -> None:
        if not self._instances:
            return
        for inst in self._instances:
            for ptr, _ in inst.buffers.values():
                self._cudart.cudaFree(ptr)
            self._cudart.cudaStreamDestroy(inst.stream)
        self._instances.clear()
