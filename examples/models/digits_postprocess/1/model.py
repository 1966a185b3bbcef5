"""digits_postprocess: the ``digits`` model's probabilities (FP32 [10] a row) -> TOP, the K
most likely digits of each row as BYTES ``b"digit:score"``, best first, the score with two
decimals (``b"7:0.93"``). K is TOP's size in config.pbtxt."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        """Called once, in this instance's process, before any request."""
        config = json.loads(args["model_config"])
        self.k = int(pb_utils.get_output_config_by_name(config, "TOP")["dims"][0])

    def execute(self, requests):
        """Called with the dynamic batcher's requests; one response each, in their order."""
        responses = []
        for request in requests:
            scores = pb_utils.get_input_tensor_by_name(request, "PROBABILITIES").as_numpy()
            best = np.argsort(-scores, axis=1, kind="stable")[:, :self.k]
            top = np.array([[f"{digit}:{row[digit]:.2f}".encode() for digit in order]
                            for row, order in zip(scores, best, strict=True)], dtype=object)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("TOP", top)]))
        return responses
