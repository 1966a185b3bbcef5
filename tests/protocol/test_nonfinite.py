"""NaN and ±Infinity in V2 JSON (runtime/nonfinite.py): read and written as Triton does."""

from __future__ import annotations

import json
import math

import numpy as np
import orjson
import pytest

from modelfn.protocol.nonfinite import json_data, loads_with_constants


def loads(document: bytes) -> object:
    try:
        return orjson.loads(document)
    except orjson.JSONDecodeError as refusal:
        return loads_with_constants(document, refusal)


def test_the_tokens_are_read_as_floats() -> None:
    doc = loads(b'{"data": [NaN, Infinity, -Infinity, 1, 2.5, "NaN"]}')
    assert isinstance(doc, dict)
    nan, inf, minus_inf, one, half, text = doc["data"]
    assert math.isnan(nan) and inf == math.inf and minus_inf == -math.inf
    assert (one, half, text) == (1, 2.5, "NaN")
    assert type(one) is int


@pytest.mark.parametrize(("document", "message"), [
    (b"[NaN, 1e400]", "number is infinity when parsed as double"),
    (b'[NaN, "\\ud800"]', "surrogates not allowed"),
    (b"[NaN,", "Expecting value"),
    (b"[nan]", "invalid literal"),  # orjson's own error: not a token Triton writes
    (b"[Inf]", "unexpected character"),
    (b'["a", "\xff", NaN]', "not valid UTF-8"),
])
def test_what_orjson_refuses_beside_the_tokens_stays_refused(document: bytes,
                                                             message: str) -> None:
    with pytest.raises(orjson.JSONDecodeError, match=message):
        loads(document)


def test_integers_beyond_64_bits_read_as_orjson_reads_them() -> None:
    big = b"123456789012345678901234567890"
    assert loads(b"[NaN, " + big + b"]")[1] == orjson.loads(b"[" + big + b"]")[0]  # type: ignore[index]
    assert loads(b"[NaN, 18446744073709551615]")[1] == 2**64 - 1  # type: ignore[index]


def test_a_finite_array_is_passed_to_orjson_as_it_is() -> None:
    flat = np.array([0.1, 2.0], dtype=np.float32)
    assert json_data(flat) is flat


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_non_finite_values_are_written_as_tokens(dtype: type) -> None:
    flat = np.array([0.1, np.inf, -np.inf, np.nan, -0.0], dtype=dtype)
    text = orjson.dumps({"data": json_data(flat)})
    values = json.loads(text)["data"]  # Python's json reads the tokens, as tritonclient does
    assert values[1:3] == [math.inf, -math.inf] and math.isnan(values[3])
    assert np.array(values, dtype=dtype)[0] == flat[0]  # the finite text keeps the value
    assert math.copysign(1, values[4]) == -1.0
    assert b"null" not in text
