from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np
import pytest
from onnx import TensorProto
from onnx_models import (
    DENORMAL_FP32,
    DENORMAL_FP64,
    denormal_graph,
    identity_graph,
    save,
    simple_graph,
)

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
    ("flush_denormal_weights", "yes please", "must be 1 or 0"),
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


def _denormal_config(**parameters: str) -> ModelConfig:
    return _config(inputs=[], outputs=[], instance_group=[InstanceGroup(count=2)],
                   parameters=parameters)


def test_denormal_weights_are_kept_unless_flushing_is_asked(tmp_path: Path) -> None:
    """A large input makes a denormal weight's product a normal number: the answer shows
    which weights the model ran with."""
    path = save(tmp_path / "m", denormal_graph())
    x = np.array([[1e30, 0.0, 0.0, 0.0], [0.0, 0.0, 1e30, 0.0]], dtype=np.float32)
    x64 = np.array([[1.0, 1e300, 1.0]] * 2)
    kept = OnnxRuntimeBackend(_denormal_config(), path)
    kept.load()
    out = kept.run(0, {"X": x, "X64": x64})
    product = np.float32(DENORMAL_FP32) * np.float32(1e30)  # about 1e-9
    np.testing.assert_allclose(out["Y"], [[1e30, product], [-product, 2e30]], rtol=1e-6)
    assert out["Y64"][0, 1] == DENORMAL_FP64 * 1e300


def test_flushed_denormal_weights_reach_every_session(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = save(tmp_path / "m", denormal_graph())
    x = np.array([[1e30, 0.0, 0.0, 0.0], [0.0, 0.0, 1e30, 0.0], [2.0, 4.0, 0.0, 8.0]],
                 dtype=np.float32)
    x64 = np.array([[1.0, 1e300, 1.0], [2.0, 2.0, 2.0], [1.0, 1.0, 1.0]])
    backend = OnnxRuntimeBackend(_denormal_config(flush_denormal_weights="1"), path)
    with caplog.at_level(logging.INFO, logger="modelfn.onnxruntime"):
        backend.load()
    assert "model simple: 3 denormal weights in 2 initializers flushed to zero" in caplog.text
    for instance in range(2):
        out = backend.run(instance, {"X": x, "X64": x64})
        np.testing.assert_array_equal(
            out["Y"], np.array([[1e30, 0.0], [0.0, 2e30], [4.0, 2.0]], dtype=np.float32))
        np.testing.assert_array_equal(out["Y64"], [[1.0, 0.0, 3.0], [2.0, 0.0, 6.0],
                                                   [1.0, 0.0, 3.0]])
    # the process's own arithmetic keeps its denormals (no flush-to-zero mode was set)
    assert np.float32(DENORMAL_FP32) * np.float32(0.5) != 0
    assert np.array([DENORMAL_FP32]).astype(np.float32)[0] != 0


def test_flushing_a_model_that_cannot_be_read_is_a_backend_error(tmp_path: Path) -> None:
    path = tmp_path / "1" / "model.onnx"
    path.parent.mkdir()
    path.write_bytes(b"\x00not an onnx model")
    backend = OnnxRuntimeBackend(_denormal_config(flush_denormal_weights="1"), path)
    with pytest.raises(BackendError, match="cannot read .* to flush its denormal weights"):
        backend.load()


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


def _sizes(max_batch: int = 8, kind: str = "KIND_CPU", **parameters: str) -> tuple[int, ...]:
    config = _config(max_batch_size=max_batch, parameters=parameters,
                     instance_group=[InstanceGroup(count=1, kind=kind)])
    return session_settings(config, cpus=2).padded_batch_sizes


def test_gpu_sessions_pad_to_one_row_or_the_largest_batch_by_default() -> None:
    assert _sizes(kind="KIND_GPU") == (1, 8)
    assert _sizes(max_batch=1, kind="KIND_GPU") == ()  # nothing to pad
    assert _sizes() == ()  # the CPU provider plans per run: no padding
    assert _sizes(kind="KIND_GPU", padded_batch_sizes="none") == ()
    assert _sizes(padded_batch_sizes="4, 2") == (2, 4, 8)  # max_batch_size always added


def test_tensorrt_sessions_are_not_padded_unless_asked() -> None:
    """A TensorRT engine takes any shape in its profile, and padded sessions would keep
    their engines in one cache directory; the user may still ask for sizes."""
    def sizes(**parameters: str) -> tuple[int, ...]:
        config = _config(optimization=_trt(), parameters=parameters,
                         instance_group=[InstanceGroup(count=1, kind="KIND_GPU")])
        return session_settings(config, cpus=2).padded_batch_sizes

    assert sizes() == ()
    assert sizes(padded_batch_sizes="8") == (8,)


@pytest.mark.parametrize("value", ["0", "9", "a", "1,,2", ""])
def test_padded_batch_sizes_are_checked(value: str) -> None:
    with pytest.raises(ConfigError) as info:
        _sizes(padded_batch_sizes=value)
    assert "must be 'none' or batch sizes from 1 to max_batch_size (8)" in info.value.message


def test_padding_needs_a_batch_dimension() -> None:
    with pytest.raises(ConfigError) as info:
        _sizes(max_batch=0, padded_batch_sizes="1")
    assert "needs max_batch_size > 0" in info.value.message


@pytest.mark.parametrize("rows", [1, 2, 3, 5, 8])
def test_a_padded_batch_answers_with_its_own_rows(tmp_path: Path, rows: int) -> None:
    """Batches run on the session of the smallest size that holds them, padded with
    zeros; the answer has the batch's rows and their values only."""
    config = _config(parameters={"padded_batch_sizes": "1,4"})
    backend = OnnxRuntimeBackend(config, save(tmp_path / "m", simple_graph()))
    backend.load()
    a = np.random.default_rng(rows).standard_normal((rows, 16), dtype=np.float32)
    out = backend.run(0, {"INPUT0": a, "INPUT1": a})
    assert out["OUTPUT0"].shape == (rows, 16)
    np.testing.assert_array_equal(out["OUTPUT0"], 2 * a)
    np.testing.assert_array_equal(out["OUTPUT1"], np.zeros_like(a))


def test_the_batcher_is_told_the_padded_sizes(tmp_path: Path) -> None:
    """What the batcher builds batches at: the padded sizes when there are sessions for
    them, none otherwise."""
    padded = OnnxRuntimeBackend(_config(parameters={"padded_batch_sizes": "1,4"}),
                                save(tmp_path / "p", simple_graph()))
    padded.load()
    assert padded.padded_batch_sizes == (1, 4, 8)
    plain = OnnxRuntimeBackend(_config(), save(tmp_path / "u", simple_graph()))
    plain.load()
    assert plain.padded_batch_sizes == ()


def test_string_batches_are_padded_with_empty_strings(tmp_path: Path) -> None:
    config = _config(parameters={"padded_batch_sizes": "4"}, inputs=[], outputs=[])
    backend = OnnxRuntimeBackend(
        config, save(tmp_path / "m", identity_graph(TensorProto.STRING, ["N", 2])))
    backend.load()
    words = np.array([["a", "b"], ["c", "d"], ["e", "f"]], dtype=object)
    (out,) = backend.run(0, {"IN": words}).values()
    np.testing.assert_array_equal(out, words)


def _gpu(**kw: object) -> ModelConfig:
    return _config(instance_group=[InstanceGroup(count=1, kind="KIND_GPU")], **kw)


@pytest.mark.gpu
@pytest.mark.parametrize(("elem", "dtype"), [
    (TensorProto.FLOAT16, np.float16), (TensorProto.INT64, np.int64),
    (TensorProto.BOOL, np.bool_), (TensorProto.UINT8, np.uint8), (TensorProto.STRING, np.object_),
])
def test_io_binding_keeps_every_datatype_on_a_gpu_instance(
    tmp_path: Path, elem: int, dtype: type
) -> None:
    """IO binding copies each input from host memory and each output back, any datatype
    (a string Identity runs on the CPU provider inside the same CUDA session)."""
    backend = OnnxRuntimeBackend(_gpu(), save(tmp_path / "m", identity_graph(elem, ["N", 3])))
    backend.load()
    assert backend.settings.io_binding and backend.providers[0] == CUDA
    values = np.arange(12).reshape(4, 3)
    array = (values.astype(str).astype(object) if dtype is np.object_
             else (values % 2).astype(dtype) if dtype is np.bool_ else values.astype(dtype))
    (out,) = backend.run(0, {"IN": array}).values()
    assert out.dtype == array.dtype
    np.testing.assert_array_equal(out, array)


@pytest.mark.gpu
def test_each_gpu_run_answers_its_own_inputs(tmp_path: Path) -> None:
    """Back-to-back runs of one session, of different batch sizes, from several threads:
    no answer is another run's (a bound buffer reused too early would show here)."""
    from concurrent.futures import ThreadPoolExecutor

    backend = OnnxRuntimeBackend(
        _config(instance_group=[InstanceGroup(count=2, kind="KIND_GPU")]),
        save(tmp_path / "m", simple_graph()))
    backend.load()
    rng = np.random.default_rng(3)

    def one(i: int) -> None:
        a = rng.standard_normal((1 + i % 8, 16), dtype=np.float32)
        b = np.full_like(a, float(i))
        out = backend.run(i % 2, {"INPUT0": a, "INPUT1": b})
        np.testing.assert_allclose(out["OUTPUT0"], a + b, rtol=1e-6)
        np.testing.assert_allclose(out["OUTPUT1"], a - b, rtol=1e-6)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(200)))


@pytest.mark.gpu
def test_cuda_accelerator_options_reach_the_provider(tmp_path: Path) -> None:
    cuda = Optimization(gpu_execution_accelerator=(Accelerator("cuda", {
        "cudnn_conv_algo_search": "HEURISTIC", "use_tf32": "0",
        "arena_extend_strategy": "kSameAsRequested"}),))
    backend = OnnxRuntimeBackend(_gpu(optimization=cuda), save(tmp_path / "m", simple_graph()))
    backend.load()
    taken = backend.sessions[0].get_provider_options()[CUDA]
    assert taken["device_id"] == "0"
    assert taken["cudnn_conv_algo_search"] == "HEURISTIC"
    assert taken["use_tf32"] == "0"
    assert taken["arena_extend_strategy"] == "kSameAsRequested"


def test_cuda_graphs_are_refused_with_the_reason() -> None:
    """ORT replays a captured graph at fixed device addresses; modelfn binds each batch from
    host memory at its own size. On a GPU (an H200, ORT 1.31) such a session crashed the
    process, so the option is refused when the config is read."""
    cuda = Optimization(gpu_execution_accelerator=(Accelerator("cuda", {
        "enable_cuda_graph": "1"}),))
    with pytest.raises(ConfigError) as info:
        session_settings(_gpu(optimization=cuda))
    assert "'enable_cuda_graph' is not supported" in info.value.message
    assert "fixed device addresses" in info.value.message


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
