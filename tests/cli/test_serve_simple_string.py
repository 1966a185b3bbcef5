"""Triton's simple_string (as ONNX: decimal strings cast to int32 and back) served by `modelfn
serve` beside another model, neither with a model_warmup: it loads although modelfn's own
warmup of empty strings fails, answers tritonclient's simple_http_string_infer_client
request, and the other model serves too."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import tritonclient.http as triton
from onnx import TensorProto
from onnx_models import add_sub_graph, save, simple_graph
from servers import serving

if TYPE_CHECKING:
    from pathlib import Path

#: Triton's docs/examples/model_repository/simple_string/config.pbtxt, on ONNX Runtime
CONFIG = """name: "simple_string"
platform: "onnxruntime_onnx"
max_batch_size: 8
version_policy: { latest { num_versions: 1 }}
input [
  { name: "INPUT0" data_type: TYPE_STRING dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_STRING dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_STRING dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_STRING dims: [ 16 ] }
]
"""


def test_simple_string_serves_beside_another_model(tmp_path: Path) -> None:
    save(tmp_path / "simple_string",
         add_sub_graph(TensorProto.STRING, ["N", 16], TensorProto.INT32), config=CONFIG)
    save(tmp_path / "simple", simple_graph())
    with serving(tmp_path) as srv:
        client = triton.InferenceServerClient(srv.url)
        assert client.is_model_ready("simple_string") and client.is_model_ready("simple")
        # as simple_http_string_infer_client.py asks it
        in0 = np.arange(16, dtype=np.int32).reshape(1, 16)
        in1 = np.ones((1, 16), dtype=np.int32)
        inputs = [triton.InferInput("INPUT0", [1, 16], "BYTES"),
                  triton.InferInput("INPUT1", [1, 16], "BYTES")]
        inputs[0].set_data_from_numpy(np.array([str(x).encode() for x in in0.flat],
                                               dtype=np.object_).reshape(1, 16))
        inputs[1].set_data_from_numpy(np.array([str(x).encode() for x in in1.flat],
                                               dtype=np.object_).reshape(1, 16),
                                      binary_data=False)
        outputs = [triton.InferRequestedOutput("OUTPUT0", binary_data=True),
                   triton.InferRequestedOutput("OUTPUT1", binary_data=False)]
        result = client.infer("simple_string", inputs, outputs=outputs)
        assert [int(v) for v in result.as_numpy("OUTPUT0")[0]] == list(in0[0] + in1[0])
        assert [int(v) for v in result.as_numpy("OUTPUT1")[0]] == list(in0[0] - in1[0])
        x = np.ones((1, 16), np.float32)
        floats = [triton.InferInput("INPUT0", [1, 16], "FP32"),
                  triton.InferInput("INPUT1", [1, 16], "FP32")]
        for inp in floats:
            inp.set_data_from_numpy(x)
        assert client.infer("simple", floats).as_numpy("OUTPUT0").tolist() == [[2.0] * 16]
        log = srv.proc.tail()
    assert "model simple_string: modelfn's own warmup" in log
    assert "Traceback" not in log
