from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx_models import DENORMAL_FP32, DENORMAL_FP64, denormal_graph, save, simple_graph

from modelfn.runtime.backends import denormals

if TYPE_CHECKING:
    from pathlib import Path


def test_denormal_weights_are_counted_and_only_they_are_zeroed(tmp_path: Path) -> None:
    path = save(tmp_path / "m", denormal_graph())
    assert denormals.count(path) == 3
    found = denormals.flushed(path)
    assert found.count == 3 and sorted(found.arrays) == ["B", "W"]
    weights = {t.name: onnx.numpy_helper.to_array(t)
               for t in onnx.load(str(path)).graph.initializer}
    for name, array in found.arrays.items():
        assert array.dtype == weights[name].dtype and array.shape == weights[name].shape
        changed = array != weights[name]
        assert np.all(weights[name][changed] != 0)
        assert np.all(np.abs(weights[name][changed]) < np.finfo(array.dtype).tiny)
        np.testing.assert_array_equal(array[~changed], weights[name][~changed])
    assert found.arrays["W"][0, 1] == 0 and found.arrays["W"][2, 0] == 0
    assert found.arrays["B"][1] == 0
    # the file is left as it was
    assert weights["W"][0, 1] == np.float32(DENORMAL_FP32) and weights["B"][1] == DENORMAL_FP64


def test_a_model_without_denormal_weights_has_nothing_to_flush(tmp_path: Path) -> None:
    path = save(tmp_path / "m", simple_graph())
    assert denormals.count(path) == 0
    assert denormals.flushed(path) == denormals.Flushed({}, 0)


def test_weights_in_external_data_are_counted_only_when_asked(tmp_path: Path) -> None:
    path = save(tmp_path / "m", denormal_graph())
    onnx.save_model(onnx.load(str(path)), str(path), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)
    assert denormals.count(path, external=False) == 0
    assert denormals.count(path) == 3
    assert denormals.flushed(path).count == 3
