from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np
import pytest
from onnx import TensorProto
from onnx_models import identity_graph, save, simple_graph

from modelfn.runtime.backends.onnxruntime import (
    CPU,
    CUDA,
    TENSORRT,
    OnnxRuntimeBackend,
    session_settings,
)
from modelfn.runtime.config import (
    Accelerator,
    InstanceGroup,
    ModelConfig,
    Optimization,
    TensorConfig,
)
from modelfn.runtime.datatypes import BY_V2
from modelfn.runtime.errors import BackendError, ConfigError

if TYPE_CHECKING:
    from pathlib import Path


def _config(**kw: object) -> ModelConfig:
    fp32 = BY_V2["FP32"]
    base: dict[str, object] = {
        "name": "simple",
        "platform": "onnxruntime_onnx",
        "backend": "onnxruntime",
        "max_batch_size": 8,
        "inputs": [TensorConfig("INPUT0", fp32, (16,)), TensorConfig("INPUT1", fp32, (16,))],
        "outputs": [TensorConfig("OUTPUT0", fp32, (16,)), TensorConfig("OUTPUT1", fp32, (16,))],
        "instance_group": [InstanceGroup(count=1, kind="KIND_CPU")],
    }
    base.update(kw)
    return ModelConfig(**base)  # type: ignore[arg-type]


def _trt(**params: str) -> Optimization:
    return Optimization(gpu_execution_accelerator=(Accelerator("tensorrt", params),))


def test_cpu_settings_split_usable_cores_between_instances() -> None:
    settings = session_settings(_config(instance_group=[InstanceGroup(count=2)]), cpus=8)
    assert settings.providers == [(CPU, {})]
    assert settings.intra_op_threads == 4
    assert settings.allow_spinning is False
    assert settings.io_binding is False


def test_thread_count_never_drops_below_one() -> None:
    assert session_settings(_config(instance_group=[InstanceGroup(count=4)]), cpus=2
                            ).intra_op_threads == 1


def test_parameters_override_threads_and_spinning() -> None:
    config = _config(parameters={"intra_op_thread_count": "3", "allow_spinning": "true",
                                 "warmup_budget_s": "2"})
    settings = session_settings(config, cpus=8)
    assert settings.intra_op_threads == 3
    assert settings.allow_spinning is True


def test_unknown_parameter_is_an_error_naming_it() -> None:
    with pytest.raises(ConfigError, match="parameter 'intra_op_threads' is not supported"):
        session_settings(_config(parameters={"intra_op_threads": "2"}), cpus=2)


@pytest.mark.parametrize(("key", "value", "rule"), [
    ("intra_op_thread_count", "two", "must be a whole number from 1 to"),
    ("intra_op_thread_count", "100000", "must be a whole number from 1 to"),
    ("inter_op_thread_count", "0", "must be a whole number from 1 to"),
    ("graph_optimization_level", "-1", "must be one of 0, 1, 2 or 99"),
    ("graph_optimization_level", "3", "must be one of 0, 1, 2 or 99"),
    ("allow_spinning", "maybe", "must be 1 or 0"),
    ("io_binding", "", "must be 1 or 0"),
])
def test_bad_parameter_values_are_errors_naming_the_rule(key: str, value: str,
                                                         rule: str) -> None:
    with pytest.raises(ConfigError, match=f"parameter '{key}' {rule}.*not '{value}'"):
        session_settings(_config(parameters={key: value}), cpus=2)


def test_gpu_kind_asks_for_cuda_then_cpu_with_the_device_id() -> None:
    config = _config(instance_group=[InstanceGroup(count=1, kind="KIND_GPU", gpus=(1,))])
    settings = session_settings(config, cpus=4)
    assert [name for name, _ in settings.providers] == [CUDA, CPU]
    assert settings.providers[0][1]["device_id"] == "1"
    assert settings.io_binding is True


def test_tensorrt_accelerator_comes_first_with_translated_options() -> None:
    config = _config(
        instance_group=[InstanceGroup(kind="KIND_GPU")],
        optimization=_trt(precision_mode="FP16", max_workspace_size_bytes="1073741824",
                          trt_engine_cache_enable="1", trt_engine_cache_path="/cache",
                          trt_timing_cache_enable="1", trt_timing_cache_path="/cache"),
    )
    providers = session_settings(config, cpus=4).providers
    assert [name for name, _ in providers] == [TENSORRT, CUDA, CPU]
    trt = providers[0][1]
    assert trt == {
        "device_id": "0",
        "trt_fp16_enable": "True",
        "trt_max_workspace_size": "1073741824",
        "trt_engine_cache_enable": "1",
        "trt_engine_cache_path": "/cache",
        "trt_timing_cache_enable": "1",
        "trt_timing_cache_path": "/cache",
    }


def test_int8_precision_enables_fp16_fallback() -> None:
    config = _config(instance_group=[InstanceGroup(kind="KIND_GPU")],
                     optimization=_trt(precision_mode="INT8"))
    trt = session_settings(config, cpus=1).providers[0][1]
    assert trt["trt_int8_enable"] == "True" and trt["trt_fp16_enable"] == "True"


@pytest.mark.parametrize(
    ("optimization", "message"),
    [
        (_trt(precision_mode="FP8"), "precision_mode 'FP8' is not one of"),
        (_trt(trt_magic="1"), "tensorrt accelerator parameter 'trt_magic' is not supported"),
        (Optimization(gpu_execution_accelerator=(Accelerator("openvino"),)),
         "gpu execution accelerator 'openvino' is not supported"),
        (Optimization(cpu_execution_accelerator=(Accelerator("openvino"),)),
         "cpu execution accelerator 'openvino' is not supported"),
    ],
)
def test_unsupported_accelerators_are_errors(optimization: Optimization, message: str) -> None:
    config = _config(instance_group=[InstanceGroup(kind="KIND_GPU")], optimization=optimization)
    with pytest.raises(ConfigError, match=message):
        session_settings(config, cpus=1)


def test_gpu_accelerator_without_gpu_instances_is_an_error() -> None:
    with pytest.raises(ConfigError, match="no instance_group has KIND_GPU"):
        session_settings(_config(optimization=_trt()), cpus=1)


def test_read_signature_marks_symbolic_dims_dynamic(tmp_path: Path) -> None:
    path = save(tmp_path / "m", simple_graph(batch="N", width=16))
    sig = OnnxRuntimeBackend.read_signature(path)
    assert [(t.name, t.datatype.v2, t.shape) for t in sig.inputs] == [
        ("INPUT0", "FP32", (-1, 16)), ("INPUT1", "FP32", (-1, 16))]
    assert [t.name for t in sig.outputs] == ["OUTPUT0", "OUTPUT1"]


def test_read_signature_of_a_corrupt_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx"
    path.write_bytes(b"\x00not an onnx model")
    with pytest.raises(ConfigError, match="cannot read ONNX model"):
        OnnxRuntimeBackend.read_signature(path)


@pytest.mark.parametrize("io_binding", ["0", "1"])
def test_run_on_every_instance_matches_numpy(tmp_path: Path, io_binding: str) -> None:
    path = save(tmp_path / "m", simple_graph())
    config = _config(instance_group=[InstanceGroup(count=2)],
                     parameters={"io_binding": io_binding})
    backend = OnnxRuntimeBackend(config, path)
    backend.load()
    assert backend.instance_count == 2
    assert backend.providers == [CPU]
    a = np.arange(48, dtype=np.float32).reshape(3, 16)
    b = np.ones((3, 16), dtype=np.float32)
    for instance in range(2):
        out = backend.run(instance, {"INPUT0": a, "INPUT1": b})
        np.testing.assert_array_equal(out["OUTPUT0"], a + b)
        np.testing.assert_array_equal(out["OUTPUT1"], a - b)
    backend.close()


def test_run_failure_is_a_backend_error(tmp_path: Path) -> None:
    path = save(tmp_path / "m", identity_graph(TensorProto.FLOAT, ["N", 4]))
    config = _config(inputs=[], outputs=[])
    backend = OnnxRuntimeBackend(config, path)
    backend.load()
    with pytest.raises(BackendError, match="onnxruntime failed"):
        backend.run(0, {"IN": np.zeros((2, 5), dtype=np.float32)})


def test_gpu_config_on_a_cpu_build_falls_back_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = save(tmp_path / "m", simple_graph())
    backend = OnnxRuntimeBackend(_config(instance_group=[InstanceGroup(kind="KIND_GPU")]), path)
    with caplog.at_level(logging.WARNING, logger="modelfn.onnxruntime"):
        backend.load()
    if CUDA in backend.providers:
        pytest.skip("this machine really has CUDA")
    assert backend.providers == [CPU]
    assert "CUDAExecutionProvider" in caplog.text


@pytest.mark.gpu
def test_cuda_session_runs_on_the_gpu(tmp_path: Path) -> None:
    path = save(tmp_path / "m", simple_graph())
    backend = OnnxRuntimeBackend(_config(instance_group=[InstanceGroup(kind="KIND_GPU")]), path)
    backend.load()
    assert backend.providers[0] == CUDA
    a = np.ones((4, 16), dtype=np.float32)
    out = backend.run(0, {"INPUT0": a, "INPUT1": a})
    np.testing.assert_array_equal(out["OUTPUT0"], 2 * a)


def test_a_zipmap_output_says_how_to_convert_without_it(tmp_path: Path) -> None:
    import warnings

    from skl2onnx import to_onnx
    from sklearn.linear_model import LogisticRegression

    from modelfn.runtime.repository import Repository

    rows = np.random.default_rng(0).random((20, 4), dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = LogisticRegression().fit(rows, (rows[:, 0] > 0.5).astype(int))
        converted = to_onnx(model, rows[:1])  # skl2onnx's default: a ZipMap output
    (tmp_path / "clf" / "1").mkdir(parents=True)
    (tmp_path / "clf" / "1" / "model.onnx").write_bytes(converted.SerializeToString())
    with pytest.raises(ConfigError) as info:
        Repository(tmp_path).load()
    assert "tensor 'output_probability'" in info.value.message
    assert "{'zipmap': False}" in info.value.message
