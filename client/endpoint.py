"""What a V2 endpoint is to a client (``invoke``, ``bench``): its URLs, what its error
answers say, and the checks that a 200 answer really is V2.

A base URL may carry a path (a gateway behind a prefix) and a query (a signed token):
V2 paths are joined to its path and its query is kept. A URL pasted whole (a model's
``.../v2/models/M/versions/V/infer``) is split into its base and the model it names.
An error answer becomes one line, ``HTTP <status>: <message>``, whether the body is V2's
``{"error": ...}`` or a proxy's HTML page. A 200 answer that is not V2 is the endpoint's
fault, not the user's: ``NotV2`` (502).
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, TypeGuard
from urllib.parse import unquote, urlsplit, urlunsplit

import numpy as np
import orjson

from modelfn.runtime.errors import ModelfnError

if TYPE_CHECKING:
    from modelfn.runtime.datatypes import Datatype

#: an error message longer than this is cut (a proxy's page, a stack trace)
MESSAGE_CHARS = 300
_TITLE = re.compile(rb"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"<[^>]*>")
#: the V2 paths a pasted URL may end with: ``/v2``, a model's, a version's, their ``/infer``
_MODEL_PATH = re.compile(
    r"/v2(?:/models/(?P<model>[^/]+)(?:/versions/(?P<version>[^/]+))?(?:/infer)?)?/?$")


class Unreachable(ModelfnError):
    """The endpoint did not answer: refused, unreachable or too slow."""

    status_code = 503


class ServerError(ModelfnError):
    """The server answered with an error: its status and its own message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status


class NotV2(ModelfnError):
    """A 200 answer that is not a V2 document: a proxy's page, another service."""

    status_code = 502

    def __init__(self, url: str, problem: str) -> None:
        super().__init__(f"{url} did not answer with V2 JSON: {one_line(problem)}")


# --- URLs -----------------------------------------------------------------------------------


def endpoint_url(base: str, path: str) -> str:
    """``path`` joined to ``base``'s own path; ``base``'s query is kept, its fragment dropped."""
    parts = urlsplit(base)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + path, fragment=""))


@dataclass(frozen=True)
class V2Url:
    """A URL as a user pastes it: the base V2 paths join, and the model (and version) its
    path names when it is a model's URL (``.../v2/models/M[/versions/V][/infer]``)."""

    base: str
    model: str | None = None
    version: str | None = None


def split_v2_url(url: str) -> V2Url:
    """``url`` as a base and the model and version its path names: a server's base URL as
    it is, a V2 model or infer URL (or a base ending in ``/v2``) cut where V2's own paths
    begin, its query kept."""
    parts = urlsplit(url)
    found = _MODEL_PATH.search(parts.path)
    if found is None:
        return V2Url(url)
    base = urlunsplit(parts._replace(path=parts.path[:found.start()] or "/", fragment=""))
    model, version = found.group("model"), found.group("version")
    return V2Url(base, model and unquote(model), version and unquote(version))


def model_url(base: str, model: str, version: str | None = None) -> str:
    """The model's metadata URL (``/v2/models/M[/versions/V]``)."""
    path = f"/v2/models/{model}" + (f"/versions/{version}" if version else "")
    return endpoint_url(base, path)


def infer_url(base: str, model: str, version: str | None = None) -> str:
    path = f"/v2/models/{model}" + (f"/versions/{version}" if version else "") + "/infer"
    return endpoint_url(base, path)


# --- error answers --------------------------------------------------------------------------


def one_line(text: str, limit: int = MESSAGE_CHARS) -> str:
    """``text`` with its whitespace collapsed to single spaces, cut at ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit - 3].rstrip() + "..."


def _page_text(body: bytes) -> str:
    """A non-JSON error body in a few words: an HTML page's title, else its first line of
    text (tags removed)."""
    title = _TITLE.search(body)
    if title is not None:
        return html.unescape(title.group(1).decode(errors="replace"))
    text = body.decode(errors="replace")
    if text.lstrip().startswith("<"):
        text = html.unescape(_TAG.sub("\n", text))
    return next((line for line in text.splitlines() if line.strip()), "")


def error_from_answer(status: int, body: bytes) -> ServerError:
    """An error answer as one line: V2's ``{"error": ...}`` message, or the gist of any other
    body, or the status's own phrase for an empty one."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        message = _page_text(body)
    else:
        error = doc.get("error") if isinstance(doc, dict) else None
        message = str(error) if error else body.decode(errors="replace")
    message = one_line(message)
    if not message:
        try:
            message = HTTPStatus(status).phrase
        except ValueError:
            message = "no message"
    return ServerError(status, f"HTTP {status}: {message}")


# --- 200 answers ----------------------------------------------------------------------------


def json_object(body: bytes, url: str) -> dict[str, Any]:
    """A 200 answer's JSON object, or ``NotV2``."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise NotV2(url, not_json(body, exc)) from None
    if not isinstance(doc, dict):
        raise NotV2(url, f"the answer is {json_kind(doc)}, not an object")
    return doc


def not_json(body: bytes, refusal: Exception) -> str:
    """Why ``body`` is not JSON, in a few words: an HTML page's gist, else the parser's."""
    if body.lstrip()[:1] == b"<":
        text = one_line(_page_text(body), 80)
        return f"an HTML page ({text})" if text else "an HTML page"
    return f"not JSON: {refusal}"


def checked_metadata(doc: dict[str, Any], url: str) -> dict[str, Any]:
    """Model metadata whose ``inputs`` are ``{"name", "datatype", "shape"}`` objects, as
    every use of it expects; ``NotV2`` otherwise."""
    inputs = doc.get("inputs")
    if not isinstance(inputs, list):
        raise NotV2(url, "the model metadata has no inputs list")
    for spec in inputs:
        if not (isinstance(spec, dict) and isinstance(spec.get("name"), str)
                and isinstance(spec.get("datatype"), str) and is_shape(spec.get("shape"))):
            raise NotV2(url, f"a metadata input is not {{name, datatype, shape}}: "
                             f"{one_line(str(spec), 80)}")
    return doc


def json_kind(value: object) -> str:
    """What a parsed JSON value is, in JSON's words: ``null``, ``an array``, ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    kinds = {dict: "an object", list: "an array", str: "a string", int: "a number",
             float: "a number"}
    return kinds.get(type(value), type(value).__name__)


def is_shape(value: object, *, variable: bool = True) -> TypeGuard[list[int]]:
    """A list of integer dimensions (-1 for a variable one when ``variable``)."""
    low = -1 if variable else 0
    return isinstance(value, list) and all(
        isinstance(d, int) and not isinstance(d, bool) and d >= low for d in value)


def typed_array(data: object, datatype: Datatype) -> np.ndarray:
    """V2 JSON ``data`` (flat or nested) as a flat array of ``datatype``; a ``ValueError``
    that says what is wrong in a few words otherwise."""
    if not isinstance(data, list):
        raise ValueError(f"its data are {json_kind(data)}, not a list")
    ragged = ValueError("its nested lists have different lengths")
    try:
        if datatype.is_bytes:
            values = np.ravel(np.array(data, dtype=object))
            if any(isinstance(v, list) for v in values):  # numpy keeps ragged lists whole
                raise ragged
            return np.array([v if isinstance(v, bytes) else str(v).encode() for v in values],
                            dtype=object)
        return np.asarray(data, dtype=datatype.numpy).ravel()
    except OverflowError as exc:
        raise ValueError(f"a value is out of range for {datatype.v2}: {exc}") from None
    except (TypeError, ValueError) as exc:
        if exc is ragged or "inhomogeneous" in str(exc):
            raise ragged from None
        raise ValueError(f"its data are not {datatype.v2} values: {exc}") from None
