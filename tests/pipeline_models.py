"""An ensemble with a Python step, for the tests that push, build and deploy one: 'add'
(ONNX: OUTPUT0 = A + B) then 'tenfold' (Python: OUTPUT0 = INPUT0 * 10, with a
requirements.txt), as 'pipeline': OUT = (A + B) * 10."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ensemble_repos import BATCHING, ensemble_config, save_ensemble, step, tensor
from onnx_models import save, simple_graph
from python_models import save_python

if TYPE_CHECKING:
    from pathlib import Path

TENFOLD_CONFIG = """
backend: "python"
max_batch_size: 8
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }]
instance_group [{ kind: KIND_CPU }]
"""

TENFOLD = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() * 10)])
            for r in requests]
"""

PIPELINE = ensemble_config(
    [step("add", {"INPUT0": "A", "INPUT1": "B"}, {"OUTPUT0": "sum"}),
     step("tenfold", {"INPUT0": "sum"}, {"OUTPUT0": "OUT"})],
    [tensor("A"), tensor("B")], [tensor("OUT")])


def pipeline_repository(root: Path, requirements: str = "numpy\n", name: str = "pipeline"
                        ) -> Path:
    """'add', 'tenfold' (its requirements.txt beside model.py) and the ensemble ``name``."""
    save(root / "add", simple_graph(width=4), config=BATCHING)
    save_python(root / "tenfold", TENFOLD, TENFOLD_CONFIG)
    (root / "tenfold" / "1" / "requirements.txt").write_text(requirements)
    save_ensemble(root / name, PIPELINE)
    return root
