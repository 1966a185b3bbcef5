"""``ModelInferRequest`` in, ``ModelInferResponse`` out, judged by the model's tensors.

The wire format's own work only; shapes, datatypes, BYTES, reshapes, required inputs
and requested outputs are checked by ``tensors.ModelTensors``, as for REST.

- Inputs come either all in ``raw_input_contents`` (one entry per input, in order;
  BYTES elements 4-byte length-prefixed) or each in its typed ``contents`` field, the
  one that matches its datatype (``Datatype.contents``). Raw inputs are zero-copy,
  read-only numpy views of the received bytes. FP16 has no typed field: send it raw.
- Outputs always go back in ``raw_output_contents``, as Triton sends them.
- Parameters become their Python values; ``timeout`` (microseconds) bounds the queue
  wait as over REST, ``classification`` on an output works as over REST, and
  ``binary_data`` is meaningless here and ignored. Shared memory is refused (501).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from modelfn.protocol.grpc import inference_pb2 as pb
from modelfn.protocol.tensors import (
    InferRequest,
    RequestedOutput,
    bad,
    blob_of,
    timeout_of,
)
from modelfn.runtime.errors import InvalidInput, Unsupported

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    import numpy as np

    from modelfn.protocol.tensors import ModelTensors, ServedTensor

_SHARED_MEMORY = "shared_memory_region"


def parameters(entries: Mapping[str, pb.InferParameter]) -> dict[str, Any]:
    """A parameters map as plain values (an entry with no value set is left out)."""
    values: dict[str, Any] = {}
    for key, parameter in entries.items():
        kind = parameter.WhichOneof("parameter_choice")
        if kind is not None:
            values[key] = getattr(parameter, kind)
    return values


def _from_contents(spec: ServedTensor, item: pb.ModelInferRequest.InferInputTensor,
                   shape: list[int], count: int) -> np.ndarray:
    datatype = spec.datatype
    field = datatype.contents
    if not field:
        raise bad(spec.name, f"is {datatype.v2}, which has no typed contents field; send it "
                             "in raw_input_contents")
    contents = item.contents
    for other, _ in contents.ListFields():
        if other.name != field:
            raise bad(spec.name, f"of datatype {datatype.v2} has its elements in "
                                 f"{other.name}; {datatype.v2} elements go in {field}")
    values: list[Any] = list(getattr(contents, field))
    if spec.text:
        values = spec.decode_text(values)
    return spec.from_values(values, shape, count, f"contents.{field}")


def decode(tensors: ModelTensors, message: pb.ModelInferRequest) -> InferRequest:
    """The request for the batcher, or ``InvalidInput`` saying what is wrong with it."""
    raw = message.raw_input_contents
    items = message.inputs
    for item in items:  # first: no other complaint about such a request is useful
        if _SHARED_MEMORY in item.parameters:
            raise Unsupported(f"input '{item.name}' uses shared memory, which is not supported")
    if raw and len(raw) != len(items):
        raise InvalidInput(f"raw_input_contents has {len(raw)} entries but the request has "
                           f"{len(items)} inputs: give one entry per input, in order")
    inputs: dict[str, np.ndarray] = {}
    batch = 0
    for index, item in enumerate(items):
        spec = tensors.input(item.name)
        name = spec.name
        if name in inputs:
            raise bad(name, "is given more than once")
        spec.check_datatype(item.datatype)
        shape, count = spec.check_shape(list(item.shape))
        if raw:
            if item.HasField("contents"):
                raise bad(name, "has contents, which must not be given when the request uses "
                                "raw_input_contents")
            array = spec.from_blob(raw[index], shape, count)
        else:
            array = _from_contents(spec, item, shape, count)
        batch = tensors.join_batch(name, shape, batch)
        inputs[name] = array if spec.reshape is None else spec.to_backend(array)
    tensors.check_complete(inputs)
    params = parameters(message.parameters)
    return InferRequest(inputs, batch or 1, message.id or None,
                        _requested(tensors, message.outputs), params,
                        timeout_us=timeout_of(params))


def _requested(tensors: ModelTensors,
               items: Iterable[pb.ModelInferRequest.InferRequestedOutputTensor]
               ) -> list[RequestedOutput] | None:
    requested: dict[str, RequestedOutput] = {}
    for item in items:
        wanted = tensors.requested_output(item.name, requested, parameters(item.parameters))
        requested[wanted.name] = wanted
    return list(requested.values()) or None  # none named: all outputs


def encode(tensors: ModelTensors, request: InferRequest, outputs: dict[str, np.ndarray],
           model_version: str) -> pb.ModelInferResponse:
    """The response to ``request``: the outputs it asked for, raw."""
    response = pb.ModelInferResponse(model_name=tensors.name, model_version=model_version,
                                     id=request.id or "")
    entries, raw = response.outputs, response.raw_output_contents
    for wanted, datatype, array in tensors.output_arrays(request, outputs):
        entries.add(name=wanted.name, datatype=datatype.v2, shape=array.shape)
        blob = blob_of(datatype, array)
        raw.append(blob if isinstance(blob, bytes) else blob.tobytes())
    return response
