"""digits_preprocess: each request's encoded images (BYTES, one PNG or JPEG a row) become
the ``digits`` model's input rows (FP32 [64], in [0, 1]), as ``digit_image.to_row`` makes
them. A request with an image Pillow cannot decode fails alone (INVALID_ARG, HTTP 400)
with the row it is in; the others of the batch are answered."""

import numpy as np
import triton_python_backend_utils as pb_utils
from digit_image import NotAnImage, to_row  # beside this file, on sys.path as in Triton


def pixels(images):
    """One row of pixels per image; NotAnImage names the row that is not one."""
    rows = []
    for index, image in enumerate(images.reshape(-1)):
        try:
            rows.append(to_row(bytes(image)))
        except NotAnImage as exc:
            raise NotAnImage(f"IMAGE row {index}: {exc}") from None
    return np.stack(rows)


class TritonPythonModel:
    def execute(self, requests):
        """Called with the dynamic batcher's requests; one response each, in their order."""
        responses = []
        for request in requests:
            images = pb_utils.get_input_tensor_by_name(request, "IMAGE").as_numpy()
            try:
                tensor = pb_utils.Tensor("PIXELS", pixels(images))
            except NotAnImage as exc:
                error = pb_utils.TritonError(str(exc), pb_utils.TritonError.INVALID_ARG)
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            responses.append(pb_utils.InferenceResponse([tensor]))
        return responses
