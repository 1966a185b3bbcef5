"""NaN and ±Infinity in V2 JSON, read and written as Triton does.

JSON has no token for them, and orjson follows the standard: it refuses ``NaN`` and
``Infinity`` when parsing and writes non-finite floats as ``null``, which a client reads
back as NaN, so +Infinity would silently become NaN. Triton reads and writes the tokens
``NaN``, ``Infinity`` and ``-Infinity`` (rapidjson's NaN-and-Inf flags), tritonclient's
JSON does the same, and a model may well take NaN (a tree ensemble's missing value) or
answer ±Infinity.

Both directions keep orjson on the fast path and pay only when such a value is there:

- ``loads`` parses with orjson; ``loads_with_constants`` is called after orjson refused a
  document: when the refusal is
  at one of the tokens, Python's json (which takes them) reads the document instead, with
  orjson's other strictness kept (a number too large for a double, a lone surrogate);
  otherwise orjson's own error stands.
- ``json_data`` is a float tensor's ``data`` for orjson: the flat array itself, or, when it
  holds a non-finite value, its JSON text with the tokens in place.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

if TYPE_CHECKING:
    import numpy.typing as npt

#: where orjson stops at the tokens (for -Infinity, at the I after the sign)
_TOKENS = (b"NaN", b"Infinity")
_WRITTEN = {math.inf: b"Infinity", -math.inf: b"-Infinity"}
_INT_MIN, _UINT_MAX = -(2**63), 2**64 - 1


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError("number is infinity when parsed as double")  # orjson's words
    return value


def _integer(text: str) -> int | float:
    """As orjson reads integers: beyond 64 bits, a double."""
    value = int(text)
    return value if _INT_MIN <= value <= _UINT_MAX else _finite(text)


def loads(document: bytes | memoryview) -> Any:
    """``document`` parsed: orjson, or Python's json where orjson stops at a token."""
    try:
        return orjson.loads(document)
    except orjson.JSONDecodeError as refusal:
        return loads_with_constants(document, refusal)


def loads_with_constants(document: bytes | memoryview,
                         refusal: orjson.JSONDecodeError) -> Any:
    """``document`` parsed with ``NaN``, ``Infinity`` and ``-Infinity`` taken as floats,
    after orjson refused it with ``refusal``; ``refusal`` itself (or the error that stops
    the second parse) when the document is not JSON with those tokens."""
    at = bytes(document[refusal.pos:refusal.pos + 8])
    if not at.startswith(_TOKENS):
        raise refusal
    try:
        text = bytes(document).decode()
        doc = json.loads(text, parse_float=_finite, parse_int=_integer)
        orjson.dumps(doc)  # refuses what orjson refuses in strings: lone surrogates
    except json.JSONDecodeError as exc:
        raise orjson.JSONDecodeError(exc.msg, exc.doc, exc.pos) from None
    except (ValueError, RecursionError, orjson.JSONEncodeError) as exc:
        raise orjson.JSONDecodeError(str(exc), "", 0) from None
    return doc


def json_data(flat: npt.NDArray[Any]) -> npt.NDArray[Any] | orjson.Fragment:
    """A flat float array as V2 JSON ``data`` for orjson (``OPT_SERIALIZE_NUMPY``): the
    array, or its text with ``NaN`` and ``±Infinity`` where orjson would write ``null``."""
    finite = np.isfinite(flat)
    if finite.all():
        return flat
    # orjson still writes the finite values (the shortest text for the datatype), then
    # the non-finite ones are put in their places
    items = orjson.dumps(np.where(finite, flat, 0), option=orjson.OPT_SERIALIZE_NUMPY)
    parts = items[1:-1].split(b",")
    for index in np.flatnonzero(~finite):
        value = float(flat[index])
        parts[index] = _WRITTEN.get(value, b"NaN")
    return orjson.Fragment(b"[" + b",".join(parts) + b"]")
