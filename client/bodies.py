"""Infer request bodies: the inputs (random ones from a model's metadata, or read from a
``.json`` V2 request or a ``.npy`` array) and the one serialised request a load run sends
(``prepare_request``: V2 JSON or Triton's binary tensor extension), built once before it."""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from modelfn.client.endpoint import is_shape, json_kind, typed_array
from modelfn.protocol.nonfinite import json_data
from modelfn.runtime.datatypes import BY_V2, from_numpy
from modelfn.runtime.errors import ModelfnError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

_JSON_OPTIONS = orjson.OPT_SERIALIZE_NUMPY
#: V2 datatypes that JSON cannot carry: they travel only as binary data
NO_JSON_FORM = frozenset({"FP16", "BF16"})


class LoadgenError(ModelfnError):
    """A problem with the target or the input that stops the run before it starts."""

    status_code = 400



@dataclass(frozen=True, slots=True)
class PreparedRequest:
    """One serialised infer request: the same bytes are sent by every worker."""

    body: bytes
    headers: Mapping[str, str]
    rows: int
    binary: bool


def _encode_bytes_tensor(array: np.ndarray) -> bytes:
    parts = []
    for item in array.ravel():
        raw = item.encode() if isinstance(item, str) else bytes(item)
        parts.append(struct.pack("<I", len(raw)) + raw)
    return b"".join(parts)


def _json_data(array: np.ndarray) -> Any:
    if from_numpy(array.dtype).is_bytes:
        return [v.decode() if isinstance(v, bytes) else str(v) for v in array.ravel()]
    flat = np.ascontiguousarray(array).ravel()
    return json_data(flat) if flat.dtype.kind == "f" else flat


def prepare_request(
    inputs: Mapping[str, np.ndarray],
    *,
    binary: bool = False,
    outputs: Sequence[str] | None = None,
    fields: Mapping[str, Any] | None = None,
) -> PreparedRequest:
    """Serialise a V2 infer request, as JSON or with the binary tensor extension.
    ``fields``: the request's own ``id``, ``parameters`` and ``outputs`` (``request_fields``
    of a V2 document), sent as they are (binary adds ``binary_data_output`` unless the
    parameters say otherwise).

    ``rows`` is the first dimension of the first input (1 for a scalar input), which is the
    number of inferences the request asks for when the model batches.
    """
    if not inputs:
        raise LoadgenError("the request has no inputs")
    tensors: list[dict[str, Any]] = []
    blobs: list[bytes] = []
    for name, array in inputs.items():
        datatype = from_numpy(array.dtype)
        if not binary and datatype.v2 in NO_JSON_FORM:
            raise LoadgenError(f"input '{name}' is {datatype.v2}, which has no JSON form in "
                               "V2: send it as binary data (--binary)")
        tensor: dict[str, Any] = {
            "name": name,
            "shape": list(array.shape),
            "datatype": datatype.v2,
        }
        if binary:
            if datatype.is_bytes:
                blob = _encode_bytes_tensor(array)
            else:
                blob = np.ascontiguousarray(array, dtype=datatype.numpy).tobytes()
            tensor["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            tensor["data"] = _json_data(array)
        tensors.append(tensor)
    header: dict[str, Any] = {**(fields or {}), "inputs": tensors}
    if outputs:
        header["outputs"] = [{"name": o} for o in outputs]
    rows = request_rows(inputs)
    if not binary:
        body = orjson.dumps(header, option=_JSON_OPTIONS)
        return PreparedRequest(body, {"Content-Type": "application/json"}, rows, False)
    header["parameters"] = {"binary_data_output": True, **(header.get("parameters") or {})}
    head = orjson.dumps(header)
    headers = {
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(len(head)),
    }
    return PreparedRequest(head + b"".join(blobs), headers, rows, True)


def request_rows(inputs: Mapping[str, np.ndarray]) -> int:
    """The rows a request of ``inputs`` carries: its first input's first dimension (1 for a
    scalar), the number of inferences it asks for when the model batches."""
    first = next(iter(inputs.values()))
    return int(first.shape[0]) if first.ndim else 1


def random_inputs(metadata: Mapping[str, Any], seed: int = 0, *,
                  rows: int = 1) -> dict[str, np.ndarray]:
    """Inputs built from V2 model metadata: ``rows`` rows in the first dimension, which must
    be variable (-1) for more than one, and every other variable dimension set to 1.

    Floating-point values are rounded to two decimals so a JSON body stays close to the size
    a real client would send.
    """
    rng = np.random.default_rng(seed)
    arrays: dict[str, np.ndarray] = {}
    for spec in metadata.get("inputs", []):
        dims = [int(d) for d in spec["shape"]]
        if rows > 1 and (not dims or dims[0] >= 0):
            raise LoadgenError(
                f"input '{spec['name']}' has shape {dims}: its first dimension is not a "
                f"batch dimension (-1), so a request cannot carry {rows} rows; the model "
                "does not batch")
        shape = tuple(rows if i == 0 and d < 0 else 1 if d < 0 else d
                      for i, d in enumerate(dims))
        datatype = BY_V2.get(spec["datatype"])
        if datatype is None:
            raise LoadgenError(f"input '{spec['name']}' has unsupported datatype {spec!r}")
        kind = datatype.numpy.kind
        if datatype.is_bytes:
            array = np.full(shape, b"modelfn", dtype=object)
        elif kind == "f":
            array = np.round(rng.standard_normal(shape), 2).astype(datatype.numpy)
        elif kind == "b":
            array = rng.integers(0, 2, shape).astype(bool)
        else:
            array = rng.integers(0, 10, shape).astype(datatype.numpy)
        arrays[spec["name"]] = array
    if not arrays:
        raise LoadgenError("the model metadata lists no inputs")
    return arrays


#: the request-level fields of a V2 infer request that a client carries as they are
REQUEST_FIELDS = ("id", "parameters", "outputs")


def request_fields(request: object) -> dict[str, Any]:
    """A V2 request document's ``id``, ``parameters`` and ``outputs``: what shapes its
    answer beside the inputs (the server checks them)."""
    if not isinstance(request, dict):
        return {}
    return {k: request[k] for k in REQUEST_FIELDS if k in request}


def inputs_from_v2_json(request: object) -> dict[str, np.ndarray]:
    """The input arrays of a V2 infer request document (flat or nested ``data``)."""
    tensors = request.get("inputs") if isinstance(request, dict) else None
    if not isinstance(tensors, list):
        raise LoadgenError('expected a V2 request, {"inputs": [{"name": ..., "datatype": ..., '
                           '"shape": [...], "data": [...]}, ...]}')
    arrays = dict(_input_tensor(tensor, i) for i, tensor in enumerate(tensors))
    if not arrays:
        raise LoadgenError("the request has no inputs")
    return arrays


def _input_tensor(tensor: object, index: int) -> tuple[str, np.ndarray]:
    if not isinstance(tensor, dict):
        raise LoadgenError(f"inputs[{index}] is {json_kind(tensor)}, not an object")
    name = tensor.get("name")
    if not isinstance(name, str) or not name:
        raise LoadgenError(f"inputs[{index}] has no name")
    missing = [f for f in ("datatype", "shape", "data") if f not in tensor]
    if missing:
        raise LoadgenError(f"input '{name}' has no {', '.join(missing)}")
    named, shape = tensor["datatype"], tensor["shape"]
    datatype = BY_V2.get(named) if isinstance(named, str) else None
    if datatype is None:
        raise LoadgenError(f"input '{name}' has unknown datatype {named!r}; expected one of "
                           f"{', '.join(BY_V2)}")
    if not is_shape(shape, variable=False):
        raise LoadgenError(f"input '{name}' has shape {shape!r}, not a list of dimensions")
    try:
        flat = typed_array(tensor["data"], datatype)
    except ValueError as exc:
        raise LoadgenError(f"input '{name}': {exc}") from None
    if flat.size != math.prod(shape):
        raise LoadgenError(f"input '{name}' has {flat.size} values for shape {shape}")
    return name, flat.reshape(shape)


def input_file_rows(path: Path) -> int:
    """The rows each request of the input file ``path`` carries (``request_rows``)."""
    try:
        if path.suffix == ".npy":
            array = np.load(path, mmap_mode="r", allow_pickle=False)
            return int(array.shape[0]) if array.ndim else 1
        return request_rows(load_inputs(path, None))
    except (OSError, ValueError) as exc:  # not an array, unreadable
        raise LoadgenError(f"{path.name}: cannot read the inputs: {exc}") from exc


def load_inputs(path: Path, metadata: Mapping[str, Any] | None) -> dict[str, np.ndarray]:
    """Inputs from a V2 request ``.json`` file or a ``.npy`` array (for a one-input model
    whose ``metadata`` has passed ``checked_metadata``)."""
    if path.suffix == ".json":
        try:
            doc = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise LoadgenError(f"{path.name}: cannot read the inputs: not JSON: {exc}") from None
        except (OSError, ValueError) as exc:  # unreadable, not UTF-8
            raise LoadgenError(f"{path.name}: cannot read the inputs: {exc}") from None
        try:
            return inputs_from_v2_json(doc)
        except LoadgenError as exc:
            raise LoadgenError(f"{path.name}: {exc.message}") from None
    if path.suffix == ".npy":
        try:
            array = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:  # not an array; an object array (pickles)
            raise LoadgenError(f"{path.name}: cannot read the inputs: {exc}") from None
        specs = (metadata or {}).get("inputs", [])
        if len(specs) != 1:
            raise LoadgenError(f"{path.name}: a .npy input needs a model with exactly one "
                               f"input; its metadata lists {len(specs)}")
        spec = specs[0]
        datatype = BY_V2.get(spec["datatype"])
        if datatype is None:
            raise LoadgenError(f"input '{spec['name']}' has unsupported datatype "
                               f"{spec['datatype']}")
        try:
            return {spec["name"]: array.astype(datatype.numpy, copy=False)}
        except (TypeError, ValueError) as exc:
            raise LoadgenError(f"{path.name}: its {array.dtype} values are not "
                               f"{datatype.v2} values: {exc}") from None
    raise LoadgenError(f"{path.name}: expected a .json V2 request or a .npy array")
