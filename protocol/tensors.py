"""A model's tensors as every wire format checks them: shapes, datatypes, BYTES, outputs.

``ModelTensors`` is built once per model from its completed config and resolves
everything the config decides (datatypes, numpy dtypes, expected shapes with the
batch dimension, reshapes, required inputs, class labels). The wire codecs
(``protocol.ModelCodec`` for REST, ``grpc.codec`` for gRPC) only take tensors off
their own wire and hand them here, so a request is judged the same whichever
protocol carried it, with the same messages.

BYTES travel as 4-byte little-endian length prefixes, each followed by its bytes,
in Triton's binary extension and in gRPC's raw contents alike.
"""

from __future__ import annotations

import math
import struct
from contextlib import nullcontext
from dataclasses import dataclass, field
from itertools import chain
from typing import TYPE_CHECKING, Any

import numpy as np

from modelfn.runtime.datatypes import BY_V2
from modelfn.runtime.errors import BackendError, InvalidInput, ModelfnError, Unsupported

if TYPE_CHECKING:
    from collections.abc import Iterator

    import numpy.typing as npt

    from modelfn.runtime.config import ModelConfig, TensorConfig
    from modelfn.runtime.datatypes import Datatype

    Array = npt.NDArray[Any]

BYTES = BY_V2["BYTES"]
_PREFIX = struct.Struct("<I")
_INT = frozenset({int})
_BYTES_TYPES = frozenset({bytes})

#: numpy kind -> how a classification entry shows its value (C++ std::to_string, like Triton)
_CLASS_FORMAT: dict[str, str] = {"f": "{:f}:{}", "i": "{:d}:{}", "u": "{:d}:{}", "b": "{:d}:{}"}


@dataclass(frozen=True, slots=True)
class RequestedOutput:
    name: str
    binary: bool | None = None  # None: follow the request's binary_data_output
    classification: int = 0  # top-N classification; 0 = off


@dataclass(slots=True)
class InferRequest:
    inputs: dict[str, Array]
    batch_size: int = 1  # rows along the batch dimension when the model batches, else 1
    id: str | None = None
    outputs: list[RequestedOutput] | None = None  # None = all, in config order
    parameters: dict[str, Any] = field(default_factory=dict)
    binary_output: bool = False  # request-level binary_data_output
    timeout_us: int | None = None  # schedule_policy ``timeout``


def fmt(shape: Any) -> str:
    return "[" + ",".join(map(str, shape)) + "]"


def short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def bad(name: str, problem: str, kind: str = "input") -> InvalidInput:
    return InvalidInput(f"{kind} '{name}' {problem}")


def timeout_of(params: dict[str, Any]) -> int | None:
    """The ``timeout`` request parameter (schedule_policy, microseconds; 0 is none)."""
    timeout = params.get("timeout")
    if timeout is not None and (type(timeout) is not int or timeout < 0):
        raise InvalidInput(
            f"'timeout' must be a non-negative integer of microseconds, not {short(timeout)}"
        )
    return timeout or None


class ServedTensor:
    """One config input or output with everything the hot path needs resolved."""

    def __init__(self, tc: TensorConfig, model: str, max_batch_size: int,
                 text: bool = False, kind: str = "input") -> None:
        self.name, self.model, self.max_batch_size = tc.name, model, max_batch_size
        self.kind = kind  # "input", or "output" when reading a function's response
        #: BYTES elements go to the backend as str (decoded UTF-8) rather than bytes
        self.text = text and tc.datatype.is_bytes
        self.datatype, self.dtype, self.itemsize = tc.datatype, tc.datatype.numpy, tc.datatype.size
        self.is_bytes = tc.datatype.is_bytes
        self.lead = int(max_batch_size > 0)  # 1 when the first dimension is the batch
        self.dims = tuple(tc.dims)
        #: expected full shape including the batch dimension; -1 matches anything
        self.shape: tuple[int, ...] = (-1,) * self.lead + self.dims
        #: the dims as a list when none is variable, for a one-comparison shape check
        self.fixed = None if -1 in self.dims else list(self.dims)
        self.reshape = None if tc.reshape is None else tuple(tc.reshape)
        #: the shape the backend sees (without batch): ``reshape`` when configured, else ``dims``
        self.model_dims = self.dims if tc.reshape is None else tuple(tc.reshape)
        self.check_bool = self.dtype.kind == "b"
        #: only FP32 can overflow from JSON numbers (too large for FP64 raises anyway)
        self.guard_overflow = tc.datatype.v2 == "FP32"

    def bad(self, problem: str) -> InvalidInput:
        return bad(self.name, problem, self.kind)

    def check_shape(self, shape: Any) -> tuple[list[int], int]:
        """The request shape, validated against the config, and its element count."""
        if (
            type(shape) is not list
            or not set(map(type, shape)) <= _INT
            or min(shape, default=0) < 0
        ):
            raise self.bad(
                f"'shape' must be a list of non-negative integers, not {short(shape)}"
            )
        expected = self.shape
        if len(shape) != len(expected) or (
            shape[self.lead :] != self.fixed
            if self.fixed is not None
            else any(w != -1 and g != w for g, w in zip(shape, expected, strict=True))
        ):
            raise InvalidInput(
                f"unexpected shape for {self.kind} '{self.name}' for model '{self.model}': "
                f"expected {fmt(expected)}, got {fmt(shape)}"
            )
        if self.lead and not 1 <= shape[0] <= self.max_batch_size:
            raise self.bad(
                f"has batch size {shape[0]}; the model takes 1 to {self.max_batch_size}"
            )
        return shape, math.prod(shape)

    def check_datatype(self, datatype: Any) -> None:
        if datatype != self.datatype.v2:
            shown = datatype if type(datatype) is str and len(datatype) < 20 else short(datatype)
            raise self.bad(f"has datatype {shown} but the model expects {self.datatype.v2}")

    def from_blob(self, blob: memoryview | bytes, shape: list[int], count: int) -> Array:
        """The tensor from its binary form: little-endian, row-major, BYTES length-prefixed."""
        if self.is_bytes:
            items: list[Any] = split_bytes(blob, self.name, count, self.kind)
            if self.text:
                items = self.decode_text(items)
            return object_array(items).reshape(shape)
        need = count * self.itemsize
        if len(blob) != need:
            raise self.bad(
                f"has {len(blob)} bytes of binary data but shape "
                f"{fmt(shape)} of {self.datatype.v2} needs {need}",
            )
        if self.check_bool and count and np.frombuffer(blob, np.uint8).max() > 1:
            raise self.bad("has BOOL bytes other than 0 and 1")
        return np.frombuffer(blob, self.dtype).reshape(shape)

    def from_values(self, values: Any, shape: list[int], count: int, where: str) -> Array:
        """The tensor from a flat sequence of scalars the wire format already typed (JSON
        numbers checked by the caller, gRPC's typed contents); ``where`` names the field."""
        if len(values) != count:
            raise self.bad(
                f"has {len(values)} elements in {where} but shape {fmt(shape)} needs {count}",
            )
        if self.is_bytes:
            return object_array(values).reshape(shape)
        try:
            with np.errstate(over="raise") if self.guard_overflow else nullcontext():
                array = np.array(values, dtype=self.dtype)
        except (OverflowError, FloatingPointError) as exc:
            if self.dtype.kind in "iu":
                bounds = np.iinfo(self.dtype.name)
                why = f"outside {bounds.min} to {bounds.max}"
            else:
                why = str(exc)
            raise self.bad(f"has a value that does not fit {self.datatype.v2}: {why}") from None
        return array.reshape(shape)

    def decode_text(self, items: list[bytes]) -> list[str]:
        """BYTES elements as the text a string model takes; bad UTF-8 is the request's 400."""
        try:
            return [item.decode() for item in items]
        except UnicodeDecodeError:
            bad_at = next(i for i, item in enumerate(items) if not _utf8(item))
            raise self.bad(
                f"BYTES element {bad_at} is not valid UTF-8, and model '{self.model}' takes "
                "text (an ONNX string tensor)",
            ) from None

    def to_backend(self, array: Array) -> Array:
        """An input as the backend takes it: config ``reshape`` applied."""
        return reshape(
            array, self.lead, self.dims, self.model_dims, f"input '{self.name}'", InvalidInput
        )

    def from_backend(self, array: Array) -> Array:
        """An output as the client sees it: back from the config ``reshape`` to ``dims``."""
        return reshape(
            array, self.lead, self.model_dims, self.dims, f"output '{self.name}'", BackendError
        )


def _utf8(item: bytes) -> bool:
    try:
        item.decode()
    except UnicodeDecodeError:
        return False
    return True


def object_array(items: list[Any]) -> Array:
    array = np.empty(len(items), dtype=object)
    array[:] = items
    return array


def split_bytes(blob: memoryview | bytes, name: str, count: int, kind: str = "input"
                ) -> list[bytes]:
    """BYTES elements from 4-byte little-endian length prefixes, exactly ``count`` of them."""
    size = len(blob)
    if size < 4 * count:
        raise bad(name, f"has {size} bytes of binary data, too few for {count} BYTES "
                  "elements", kind)
    raw = blob if isinstance(blob, bytes) else blob.tobytes()
    items: list[bytes] = []
    append, unpack = items.append, _PREFIX.unpack_from
    offset = length = start = 0
    try:
        for _ in range(count):
            (length,) = unpack(raw, offset)
            start = offset + 4
            offset = start + length
            append(raw[start:offset])
    except struct.error:
        if offset <= size:
            raise bad(name, f"binary data ends before BYTES element {len(items)}",
                      kind) from None
    if offset > size:
        element = len(items) - 1
        raise bad(name, f"BYTES element {element} claims {length} bytes; {size - start} "
                  "remain", kind)
    if offset != size:
        raise bad(name, f"has {size - offset} bytes of binary data after its {count} "
                  "elements", kind)
    return items


def bytes_blob(items: list[Any]) -> bytes:
    """BYTES elements as 4-byte little-endian length prefixes, each followed by its bytes."""
    if not set(map(type, items)) <= _BYTES_TYPES:
        items = [x if isinstance(x, bytes) else str(x).encode() for x in items]
    return b"".join(
        chain.from_iterable(zip(map(_PREFIX.pack, map(len, items)), items, strict=True))
    )


def blob_of(datatype: Datatype, array: Array) -> bytes | memoryview:
    """A tensor's binary form: a view of its bytes, or length-prefixed BYTES."""
    if datatype.is_bytes:
        return bytes_blob(array.ravel().tolist())
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8).data


def reshape(
    array: Array,
    lead: int,
    src: tuple[int, ...],
    dst: tuple[int, ...],
    what: str,
    error: type[ModelfnError],
) -> Array:
    """Reshape ``array`` (config shape ``src``) to config shape ``dst``; -1s map in order."""
    head, body = array.shape[:lead], array.shape[lead:]
    if -1 in dst:
        free = iter([n for n, d in zip(body, src, strict=False) if d == -1])
        dst = tuple(next(free, -1) if d == -1 else d for d in dst)
    try:
        return array.reshape(head + dst)
    except ValueError:
        raise error(
            f"cannot reshape {what} of shape {fmt(array.shape)} to {fmt(head + dst)}"
        ) from None


def classify(array: Array, top: int, batching: bool, labels: list[str] | None = None) -> Array:
    """Triton's classification extension: the top ``top`` "value:index" entries per row,
    "value:index:label" when the output has a label file."""
    rows = array.reshape(array.shape[0] if batching else 1, -1)
    width = rows.shape[1]
    keep = min(top, width)
    # stable descending order with ties broken by lower index first
    order = (width - 1) - np.argsort(rows[:, ::-1], axis=1, kind="stable")[:, ::-1][:, :keep]
    values = np.take_along_axis(rows, order, axis=1)
    fmt_entry = _CLASS_FORMAT[rows.dtype.kind].format
    entries = [
        fmt_entry(v, i) if labels is None or i >= len(labels)
        else f"{fmt_entry(v, i)}:{labels[i]}"
        for vrow, irow in zip(values.tolist(), order.tolist(), strict=True)
        for v, i in zip(vrow, irow, strict=True)
    ]
    return object_array(entries).reshape((rows.shape[0], keep) if batching else (keep,))


class ModelTensors:
    """One model's inputs and outputs, and the checks every wire codec shares."""

    def __init__(self, config: ModelConfig, labels: dict[str, list[str]] | None = None,
                 *, text_strings: bool = False) -> None:
        """``labels``: an output's class labels (its ``label_filename``), for classification;
        ``text_strings``: the backend takes BYTES inputs as ``str`` (``Backend.text_strings``).
        """
        self.name = config.name
        self.labels = labels or {}
        self.batching = config.max_batch_size > 0
        self.inputs = {
            t.name: ServedTensor(t, self.name, config.max_batch_size, text_strings)
            for t in config.inputs
        }
        self.outputs = {
            t.name: ServedTensor(t, self.name, config.max_batch_size, kind="output")
            for t in config.outputs
        }
        self.required = tuple(t.name for t in config.inputs if not t.optional)
        self.input_names = ", ".join(f"'{t.name}'" for t in config.inputs)
        self.output_names = ", ".join(f"'{t.name}'" for t in config.outputs)
        self.all_outputs = [RequestedOutput(t.name) for t in config.outputs]
        #: the one input of a single-input model (raw binary requests), else None
        self.single = next(iter(self.inputs.values())) if len(self.inputs) == 1 else None

    def input(self, name: Any) -> ServedTensor:
        return self._named(name, "input", self.inputs, self.input_names)

    def output(self, name: Any) -> ServedTensor:
        return self._named(name, "output", self.outputs, self.output_names)

    def _named(self, name: Any, kind: str, table: dict[str, ServedTensor], names: str
               ) -> ServedTensor:
        if type(name) is not str or (spec := table.get(name)) is None:
            raise InvalidInput(
                f"unexpected inference {kind} {short(name)} for model "
                f"'{self.name}'; its {kind}s are {names}"
            )
        return spec

    def join_batch(self, name: str, shape: list[int], batch: int) -> int:
        """The request's batch size once input ``name`` of ``shape`` joins it (0: none yet)."""
        if not self.batching:
            return batch
        if batch and shape[0] != batch:
            raise InvalidInput(
                f"all inputs must have the same batch size: input '{name}' "
                f"has {shape[0]} but an earlier input has {batch}"
            )
        return shape[0]

    def check_complete(self, inputs: dict[str, Array]) -> None:
        """Every required input is there."""
        if len(inputs) != len(self.inputs):
            missing = ", ".join(repr(n) for n in self.required if n not in inputs)
            if missing:
                raise InvalidInput(
                    f"model '{self.name}' expects input(s) {self.input_names} "
                    f"but the request is missing required input(s) {missing}"
                )

    def requested_output(self, name: Any, taken: dict[str, RequestedOutput],
                         params: dict[str, Any], binary: bool | None = None
                         ) -> RequestedOutput:
        """One entry of a request's ``outputs``, with its parameters, checked; ``taken``
        holds the entries before it."""
        spec = self.output(name)
        if spec.name in taken:
            raise InvalidInput(f"output '{spec.name}' is requested more than once")
        if "shared_memory_region" in params:
            raise Unsupported(f"output '{spec.name}' uses shared memory, which is not supported")
        top = params.get("classification", 0)
        if type(top) is not int or top < 0:
            raise InvalidInput(
                f"output '{spec.name}' classification must be a non-negative "
                f"integer, not {short(top)}"
            )
        if top and spec.is_bytes:
            raise InvalidInput(f"output '{spec.name}' is BYTES and cannot be classified")
        return RequestedOutput(spec.name, binary, top)

    def output_arrays(self, request: InferRequest, outputs: dict[str, Array]
                      ) -> Iterator[tuple[RequestedOutput, Datatype, Array]]:
        """The outputs ``request`` asked for, as the client sees them: config ``dims``,
        classification applied, the config's dtype; with the datatype each goes out as.
        A request that names none gets every output the model produced (a Python model may
        leave some out, as Triton's may); one it names and did not get is the model's error."""
        asked = request.outputs
        everything = asked is None
        for wanted in self.all_outputs if asked is None else asked:
            name = wanted.name
            spec = self.outputs[name]
            array = outputs.get(name)
            if array is None:
                if everything:
                    continue
                raise BackendError(f"model '{self.name}' did not produce output '{name}'")
            if spec.reshape is not None:
                array = spec.from_backend(array)
            datatype = spec.datatype
            if wanted.classification:
                array = classify(array, wanted.classification, self.batching,
                                 self.labels.get(name))
                datatype = BYTES
            elif not spec.is_bytes and array.dtype != spec.dtype:
                array = array.astype(spec.dtype)
            yield wanted, datatype, array
