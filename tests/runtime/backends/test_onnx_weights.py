"""The wire-format reader against the onnx package's own, on every way ONNX stores a weight."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx_models import denormal_graph, save

from modelfn.runtime.backends.onnx_weights import WeightsError, float_weights

if TYPE_CHECKING:
    from pathlib import Path


def _model(path: Path, initializers: list[TensorProto]) -> Path:
    """A model whose graph holds ``initializers`` (an Identity keeps it valid)."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["X"], ["Y"])], "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1])], initializers)
    return save(path, graph)


def _theirs(path: Path) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer
            if t.data_type in (TensorProto.FLOAT, TensorProto.DOUBLE)}


def test_raw_typed_and_scalar_weights_read_as_onnx_reads_them(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 5)).astype(np.float32)
    d = rng.standard_normal((2, 2, 2))
    path = _model(tmp_path / "m", [
        numpy_helper.from_array(a, "raw32"),  # raw_data
        numpy_helper.from_array(d, "raw64"),
        helper.make_tensor("typed32", TensorProto.FLOAT, [3, 5], a.ravel().tolist()),
        helper.make_tensor("typed64", TensorProto.DOUBLE, [8], d.ravel().tolist()),
        helper.make_tensor("scalar", TensorProto.FLOAT, [], [2.5]),
        helper.make_tensor("empty", TensorProto.FLOAT, [0, 4], []),
        helper.make_tensor("ints", TensorProto.INT64, [2], [1, 2]),  # not a float: left out
        helper.make_tensor("half", TensorProto.FLOAT16, [1], [np.float16(1.0)]),
    ])
    ours = dict(float_weights(path))
    theirs = _theirs(path)
    assert sorted(ours) == sorted(theirs) == ["empty", "raw32", "raw64", "scalar", "typed32",
                                              "typed64"]
    for name, array in theirs.items():
        assert ours[name].dtype == array.dtype and ours[name].shape == array.shape, name
        np.testing.assert_array_equal(ours[name], array)


def test_external_data_is_read_from_the_models_directory(tmp_path: Path) -> None:
    path = save(tmp_path / "m", denormal_graph())
    onnx.save_model(onnx.load(str(path)), str(path), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)
    theirs = _theirs(path)
    ours = dict(float_weights(path))
    assert sorted(ours) == sorted(theirs) == ["B", "W"]
    for name, array in theirs.items():
        np.testing.assert_array_equal(ours[name], array)
    assert dict(float_weights(path, external=False)) == {}


def test_external_data_outside_the_models_directory_is_refused(tmp_path: Path) -> None:
    weight = numpy_helper.from_array(np.ones(4, np.float32), "W")
    weight.data_location = TensorProto.EXTERNAL
    weight.ClearField("raw_data")
    entry = weight.external_data.add()
    entry.key, entry.value = "location", "../secret.bin"
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "secret.bin").write_bytes(bytes(16))
    path = _model(tmp_path / "m", [weight])
    with pytest.raises(WeightsError, match="outside the model's directory"):
        list(float_weights(path))


@pytest.mark.parametrize("kept", [0.3, 0.6, 0.9])
def test_a_file_cut_inside_its_graph_is_a_weights_error(tmp_path: Path, kept: float) -> None:
    path = save(tmp_path / "m", denormal_graph())
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * kept)])
    with pytest.raises(WeightsError):
        list(float_weights(path))


def test_a_file_that_is_not_onnx_is_a_weights_error(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx"
    path.write_bytes(b"\x00not an onnx model")
    with pytest.raises(WeightsError):
        list(float_weights(path))


def _len_field(number: int, payload: bytes) -> bytes:
    assert len(payload) < 128
    return bytes([number << 3 | 2, len(payload)]) + payload


def test_float_values_written_one_by_one_are_read(tmp_path: Path) -> None:
    """protobuf parsers take a repeated float written unpacked (a tag per value) as well as
    packed, so a writer other than onnx's may send it so."""
    tensor = bytes([1 << 3, 3])  # dims: [3]
    tensor += bytes([2 << 3, TensorProto.FLOAT])
    for value in (1.5, -2.0, 1e-39):
        tensor += bytes([4 << 3 | 5]) + np.float32(value).tobytes()
    tensor += _len_field(8, b"w")
    path = tmp_path / "model.onnx"
    path.write_bytes(_len_field(7, _len_field(5, tensor)))
    [(name, array)] = float_weights(path)
    assert name == "w" and array.dtype == np.float32
    np.testing.assert_array_equal(array, np.array([1.5, -2.0, 1e-39], np.float32))


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = b""
    while n >= 0x80:
        out, n = out + bytes([n & 0x7F | 0x80]), n >> 7
    return out + bytes([n])


def _weight(dims: tuple[int, ...], data: bytes) -> bytes:
    """A FLOAT TensorProto named w with ``data`` (whole fields) after its dims."""
    head = b"".join(bytes([1 << 3]) + _varint(d) for d in dims)
    return head + bytes([2 << 3, TensorProto.FLOAT]) + bytes([8 << 3 | 2, 1]) + b"w" + data


@pytest.mark.parametrize(("dims", "data", "message"), [
    ((-1,), bytes([9 << 3 | 2, 4]) + bytes(4), r"1 values for dims \[-1\]"),
    ((1 << 32, 1 << 32), bytes([9 << 3 | 2, 0]), r"0 values for dims \[4294967296, 4294967296\]"),
    ((0, 1 << 62), bytes([9 << 3 | 2, 0]), "has dims"),
    ((1,), bytes([4 << 3 | 2, 5]) + bytes(5), "packed float32 values of 5 bytes"),
    ((1,), bytes([4 << 3]) + _varint(1 << 40), "cannot be read"),
])
def test_a_malformed_weight_is_a_weights_error(tmp_path: Path, dims: tuple[int, ...],
                                               data: bytes, message: str) -> None:
    tensor = _weight(dims, data)
    path = tmp_path / "model.onnx"
    graph = bytes([5 << 3 | 2]) + _varint(len(tensor)) + tensor
    path.write_bytes(bytes([7 << 3 | 2]) + _varint(len(graph)) + graph)
    with pytest.raises(WeightsError, match=message):
        list(float_weights(path))


def test_external_data_with_a_bad_offset_is_a_weights_error(tmp_path: Path) -> None:
    weight = numpy_helper.from_array(np.ones(4, np.float32), "W")
    weight.data_location = TensorProto.EXTERNAL
    weight.ClearField("raw_data")
    for key, value in (("location", "w.bin"), ("offset", "abc")):
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "w.bin").write_bytes(bytes(16))
    path = _model(tmp_path / "m", [weight])
    with pytest.raises(WeightsError, match="cannot read the external data of initializer 'W'"):
        list(float_weights(path))
