"""Real Python models (``model.py`` with ``TritonPythonModel``) for tests, written into
Triton-style repositories as Triton's python_backend examples lay them out."""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path


def save_python(model_dir: Path, source: str, config: str | None = None, version: int = 1,
                filename: str = "model.py") -> Path:
    """Write ``source`` as ``<model_dir>/<version>/model.py`` (and config.pbtxt if given)."""
    path = model_dir / str(version) / filename
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source))
    if config is not None:
        (model_dir / "config.pbtxt").write_text(textwrap.dedent(config))
    return path


#: python_backend's examples/add_sub config: FP32 [4] in, sum and difference out
ADD_SUB_CONFIG = """
name: "add_sub"
backend: "python"
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
instance_group [{ kind: KIND_CPU }]
"""

#: the add_sub model as python_backend's example has it: output dtypes from the config
ADD_SUB = """
import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.model_config = config = json.loads(args["model_config"])
        self.dtype0 = pb_utils.triton_string_to_numpy(
            pb_utils.get_output_config_by_name(config, "OUTPUT0")["data_type"])
        self.dtype1 = pb_utils.triton_string_to_numpy(
            pb_utils.get_output_config_by_name(config, "OUTPUT1")["data_type"])

    def execute(self, requests):
        responses = []
        for request in requests:
            in0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            in1 = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", (in0 + in1).astype(self.dtype0)),
                pb_utils.Tensor("OUTPUT1", (in0 - in1).astype(self.dtype1)),
            ]))
        return responses

    def finalize(self):
        print("Cleaning up...")
"""

#: python_backend's examples/auto_complete batch model: no config.pbtxt at all
AUTO_COMPLETE = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        config = auto_complete_model_config.as_dict()
        have = {t["name"] for t in config["input"] + config["output"]}
        for name in ("INPUT0", "INPUT1"):
            if name not in have:
                auto_complete_model_config.add_input(
                    {"name": name, "data_type": "TYPE_FP32", "dims": [4]})
        for name in ("OUTPUT0", "OUTPUT1"):
            if name not in have:
                auto_complete_model_config.add_output(
                    {"name": name, "data_type": "TYPE_FP32", "dims": [4]})
        auto_complete_model_config.set_max_batch_size(4)
        auto_complete_model_config.set_dynamic_batching()
        return auto_complete_model_config

    def execute(self, requests):
        responses = []
        for request in requests:
            in0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            in1 = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", in0 + in1), pb_utils.Tensor("OUTPUT1", in0 - in1)]))
        return responses
"""

#: every request alone (max_batch_size 0), two instances; TEXT in, and what the model saw
ECHO_CONFIG = """
backend: "python"
input [ { name: "TEXT" data_type: TYPE_STRING dims: [ -1 ] } ]
output [
  { name: "UPPER" data_type: TYPE_STRING dims: [ -1 ] },
  { name: "SEEN" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "PID" data_type: TYPE_INT64 dims: [ 1 ] }
]
instance_group [{ count: 2 kind: KIND_CPU }]
"""

#: SEEN is the request's id, parameters and requested outputs as JSON; the parameter
#: "do" makes it misbehave: "raise", "error" (an INVALID_ARG response), "exit" (os._exit),
#: "hang" (writes its pid to the file "pidfile" names, then sleeps), "float64", "omit",
#: "extra"
ECHO = """
import json
import os
import sys
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.args = args
        print(f"initialized {args['model_instance_name']}; "
              f"onnxruntime imported: {'onnxruntime' in sys.modules}")
        pb_utils.Logger.log_warn(f"echo logs through pb_utils from {os.getpid()}")

    def execute(self, requests):
        responses = []
        for request in requests:
            params = json.loads(request.parameters())
            do = params.get("do", "")
            if do == "raise":
                raise pb_utils.TritonModelException("echo was told to raise")
            if do == "exit":
                print("echo exits now")
                os._exit(7)
            if do == "hang":
                with open(params["pidfile"], "w") as f:
                    f.write(str(os.getpid()))
                time.sleep(3600)
            if do == "error":
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("echo refuses this one",
                                               pb_utils.TritonError.INVALID_ARG)))
                continue
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
            assert text.dtype == np.object_ and all(isinstance(t, bytes) for t in text)
            seen = json.dumps({"id": request.request_id(), "parameters": params,
                               "outputs": request.requested_output_names(),
                               "instance": self.args["model_instance_name"],
                               "files": os.listdir(os.path.join(self.args["model_repository"],
                                                                self.args["model_version"]))})
            upper = np.array([t.upper() for t in text], dtype=np.object_)
            outputs = [pb_utils.Tensor("UPPER", upper),
                       pb_utils.Tensor("SEEN", np.array([seen.encode()], dtype=np.object_)),
                       pb_utils.Tensor("PID", np.array([os.getpid()], dtype=np.int64))]
            if do == "float64":
                outputs[2] = pb_utils.Tensor("PID", np.array([1.0]))
            if do == "omit":
                outputs.pop()
            if do == "extra":
                outputs.append(pb_utils.Tensor("NOPE", np.zeros(1, np.int64)))
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses

    def finalize(self):
        print(f"echo {self.args['model_instance_name']} finalized")
"""

#: batches of up to 8 rows, formed when 4 requests wait (a long delay otherwise)
BATCHED_CONFIG = """
backend: "python"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [
  { name: "Y" data_type: TYPE_FP32 dims: [ 2 ] },
  { name: "REQUESTS" data_type: TYPE_INT32 dims: [ 1 ] }
]
dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 60000000 }
"""

#: Y = 2 X; REQUESTS = how many requests its execute got; X[0] == -1 fails that one alone
BATCHED = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            if x[0, 0] == -1:
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("row starts with -1")))
                continue
            count = np.full((len(x), 1), len(requests), dtype=np.int32)
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("Y", x * 2), pb_utils.Tensor("REQUESTS", count)]))
        return responses
"""

#: initialize fails
FAILING_INIT = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        raise ValueError("the tokenizer file is missing")

    def execute(self, requests):
        return []
"""

FAILING_INIT_CONFIG = """
backend: "python"
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""

#: python_backend's examples/bls sync model: calls the model MODEL_NAME names
BLS_SYNC_CONFIG = """
name: "bls_sync"
backend: "python"
input [
  { name: "MODEL_NAME" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
instance_group [{ kind: KIND_CPU }]
"""

BLS_SYNC = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            in0 = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            in1 = pb_utils.get_input_tensor_by_name(request, "INPUT1")
            name = pb_utils.get_input_tensor_by_name(request, "MODEL_NAME").as_numpy()[0]
            response = pb_utils.InferenceRequest(
                model_name=name, requested_output_names=["OUTPUT0", "OUTPUT1"],
                inputs=[in0, in1]).exec()
            if response.has_error():
                raise pb_utils.TritonModelException(response.error().message())
            responses.append(pb_utils.InferenceResponse(
                output_tensors=response.output_tensors()))
        return responses
"""

#: python_backend's examples/bls async model, with an ONNX model where it has "pytorch":
#: both calls in flight at once, OUTPUT0 from the first and OUTPUT1 from the second
BLS_ASYNC_CONFIG = BLS_SYNC_CONFIG.replace('"bls_sync"', '"bls_async"').replace(
    '  { name: "MODEL_NAME" data_type: TYPE_STRING dims: [ 1 ] },\n', "")

BLS_ASYNC = """
import asyncio

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            in0 = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            in1 = pb_utils.get_input_tensor_by_name(request, "INPUT1")
            calls = [pb_utils.InferenceRequest(
                model_name=name, requested_output_names=["OUTPUT0", "OUTPUT1"],
                inputs=[in0, in1]).async_exec() for name in ("onnx_add_sub", "add_sub")]
            answers = await asyncio.gather(*calls)
            for answer in answers:
                if answer.has_error():
                    raise pb_utils.TritonModelException(answer.error().message())
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.get_output_tensor_by_name(answers[0], "OUTPUT0"),
                pb_utils.get_output_tensor_by_name(answers[1], "OUTPUT1")]))
        return responses
"""

#: an ONNX add_sub beside them (tests/onnx_models.py's add_sub_graph), FP32 [4], no batching
ONNX_ADD_SUB_CONFIG = """
platform: "onnxruntime_onnx"
max_batch_size: 0
"""
