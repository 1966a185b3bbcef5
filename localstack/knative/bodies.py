"""Request bodies the local Knative API reads: the Kubernetes API's content types only.

Each verb takes the types the API server takes for a custom resource (``WRITES`` for
create and replace, ``PATCHES`` for patch, ``DELETES`` for DeleteOptions); anything else,
``text/plain`` or a form included, is a 415 before the body is parsed. YAML is read by a
safe loader that refuses what the API server's YAML reader refuses: aliases that expand
the document far past what was sent ("billion laughs"), an alias inside its own anchor,
and nesting deeper than a JSON document may go.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson
import yaml

from modelfn.localstack.knative.errors import MalformedRequest, UnsupportedMediaType

if TYPE_CHECKING:
    from starlette.requests import Request

JSON = "application/json"
YAML = "application/yaml"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
#: nodes aliases may add beyond those sent, at least (the rest scales with the document)
ALIAS_FLOOR = 10_000
#: how deep a document may nest (a Service needs about 10 levels; Python's own recursion,
#: in copying and validating, stops near a few hundred)
MAX_DEPTH = 100


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, counting the nodes each alias stands for while it composes:
    a document may not expand past ``max(ALIAS_FLOOR, nodes sent)`` extra nodes."""

    def __init__(self, stream: bytes) -> None:
        super().__init__(stream)
        self._sent = 0  # nodes in the text
        self._expanded = 0  # nodes aliases stand for
        self._sizes: dict[int, int] = {}  # id(anchored node) -> the nodes it holds
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            node = super().compose_node(parent, index)
            size = self._sizes.get(id(node))
            if size is None:
                raise yaml.composer.ComposerError(
                    None, None, f"the alias *{event.anchor} is inside its own anchor",
                    event.start_mark)
            self._expanded += size
            if self._expanded > max(ALIAS_FLOOR, self._sent):
                raise yaml.composer.ComposerError(
                    None, None, "the document's aliases expand it too far (excessive "
                    "aliasing)", event.start_mark)
            return node
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise yaml.composer.ComposerError(
                None, None, f"the document nests deeper than {MAX_DEPTH} levels",
                self.peek_event().start_mark)  # type: ignore[no-untyped-call]
        before = self._sent + self._expanded
        self._sent += 1
        node = super().compose_node(parent, index)
        self._depth -= 1
        self._sizes[id(node)] = self._sent + self._expanded - before
        return node


def _yaml(raw: bytes) -> Any:
    loader = _Loader(raw)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def _json(raw: bytes) -> Any:
    return orjson.loads(raw)


Decoder = Callable[[bytes], Any]
#: what create (POST) and replace (PUT) read
WRITES: dict[str, Decoder] = {JSON: _json, YAML: _yaml}
#: what patch reads, by patch type (a strategic merge patch is a merge patch for a
#: custom resource)
PATCHES: dict[str, Decoder] = {MERGE_PATCH: _json, STRATEGIC_MERGE_PATCH: _json,
                               JSON_PATCH: _json, APPLY_PATCH: _yaml}
#: what a delete's DeleteOptions may be
DELETES = WRITES


def content_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


def decoder(request: Request, accepted: dict[str, Decoder]) -> Decoder:
    """The decoder for the request's content type; ``UnsupportedMediaType`` for others."""
    kind = content_type(request)
    found = accepted.get(kind)
    if found is None:
        raise UnsupportedMediaType(f"the body's content type {kind or '(none)'!r} is not "
                                   f"supported here; use {', '.join(accepted)}")
    return found


def _too_deep(doc: Any) -> bool:
    """Whether ``doc`` nests deeper than ``MAX_DEPTH`` (a walk without recursion)."""
    stack = [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > MAX_DEPTH:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


async def read(request: Request, accepted: dict[str, Decoder]) -> Any:
    """The request's body, decoded by its content type (one of ``accepted``)."""
    decode = decoder(request, accepted)
    raw = await request.body()
    what = "YAML" if decode is _yaml else "JSON"
    try:
        body = decode(raw)
    except (orjson.JSONDecodeError, yaml.YAMLError) as exc:
        raise MalformedRequest(f"the request body is not valid {what}: "
                               f"{' '.join(str(exc).split())}") from exc
    if _too_deep(body):  # aliases can nest what the YAML text does not
        raise MalformedRequest(f"the request body is not valid {what}: it nests deeper than "
                               f"{MAX_DEPTH} levels")
    return body


async def read_object(request: Request, accepted: dict[str, Decoder]) -> dict[str, Any]:
    body = await read(request, accepted)
    if not isinstance(body, dict):
        raise MalformedRequest("the request body must be an object")
    return body
