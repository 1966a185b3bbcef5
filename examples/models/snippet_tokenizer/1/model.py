"""snippet_tokenizer: each request's lines of text (BYTES, UTF-8) become the token ids the
``snippet_classifier`` takes (INT64 [64], padded with 0), with the vocabulary that
``make_snippet.py`` wrote beside this file. A request with text that is not UTF-8 fails
alone (INVALID_ARG, HTTP 400) with the row it is in."""

import json
from pathlib import Path

import triton_python_backend_utils as pb_utils
from tokenizer import LENGTH, ids, read_vocabulary  # beside this file, as in Triton


class TritonPythonModel:
    def initialize(self, args):
        """Called once, in this instance's process, before any request: read the
        vocabulary, and check the config's TOKENS size is the tokenizer's."""
        self.vocabulary = read_vocabulary(Path(__file__).with_name("vocab.txt"))
        config = json.loads(args["model_config"])
        size = pb_utils.get_output_config_by_name(config, "TOKENS")["dims"]
        if list(size) != [LENGTH]:
            raise pb_utils.TritonModelException(
                f"TOKENS must have dims [{LENGTH}], the tokenizer's length, not {size}")

    def execute(self, requests):
        """Called with the dynamic batcher's requests; one response each, in their order."""
        responses = []
        for request in requests:
            rows = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy().reshape(-1)
            texts = []
            for index, row in enumerate(rows):
                try:
                    texts.append(bytes(row).decode("utf-8"))
                except UnicodeDecodeError as exc:
                    texts = None
                    error = pb_utils.TritonError(f"TEXT row {index} is not UTF-8: {exc}",
                                                 pb_utils.TritonError.INVALID_ARG)
                    break
            if texts is None:
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            tokens = pb_utils.Tensor("TOKENS", ids(texts, self.vocabulary))
            responses.append(pb_utils.InferenceResponse([tokens]))
        return responses
