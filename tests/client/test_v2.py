"""Decoding V2 answers in the client: JSON and Triton's binary extension (raw little-endian
tensors, BYTES with 4-byte length prefixes), laid out as the protocol specifies them."""

from __future__ import annotations

import struct

import numpy as np
import orjson
import pytest

from modelfn.client.v2 import as_json, decode_response
from modelfn.runtime.errors import InvalidInput


def binary_answer(outputs: list[tuple[str, str, list[int], bytes]]) -> tuple[bytes, int]:
    header = orjson.dumps({"model_name": "m", "model_version": "3", "outputs": [
        {"name": n, "datatype": d, "shape": s, "parameters": {"binary_data_size": len(b)}}
        for n, d, s, b in outputs]})
    return header + b"".join(b for *_, b in outputs), len(header)


def test_binary_answers_with_numbers_and_strings() -> None:
    probabilities = np.arange(6, dtype=np.float32).reshape(2, 3)
    words = [b"hello", "wörld".encode()]
    strings = b"".join(struct.pack("<I", len(w)) + w for w in words)
    body, length = binary_answer([("p", "FP32", [2, 3], probabilities.tobytes()),
                                  ("s", "BYTES", [2, 1], strings)])
    header, outputs = decode_response(body, length)
    assert header["model_version"] == "3"
    np.testing.assert_array_equal(outputs[0].data, probabilities)
    assert outputs[1].data.ravel().tolist() == words and outputs[1].shape == [2, 1]
    doc = as_json(header, outputs)
    assert doc["outputs"][1]["data"] == ["hello", "wörld"]
    assert doc["outputs"][0]["data"] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_json_answers_flat_or_nested() -> None:
    body = orjson.dumps({"model_name": "m", "outputs": [
        {"name": "l", "datatype": "INT64", "shape": [2, 1], "data": [[2], [0]]},
        {"name": "b", "datatype": "BOOL", "shape": [2], "data": [True, False]}]})
    _, outputs = decode_response(body, None)
    assert outputs[0].data.dtype == np.int64 and outputs[0].data.tolist() == [[2], [0]]
    assert outputs[1].data.tolist() == [True, False]


@pytest.mark.parametrize(("outputs", "message"), [
    ([("p", "FP32", [2, 3], b"\0" * 20)], "values for shape"),
    ([("s", "BYTES", [1], b"\x09\0\0\0abc")], "does not match its element count"),
    ([("s", "BYTES", [2], b"\x03\0\0\0abc")], "ends inside a length prefix"),
    ([("x", "FP128", [1], b"")], "unknown datatype"),
    ([("p", "FP32", [2], b"\0" * 7)], "are not whole FP32 values"),
])
def test_malformed_answers_are_invalid(outputs: list[tuple[str, str, list[int], bytes]],
                                       message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        decode_response(*binary_answer(outputs))
