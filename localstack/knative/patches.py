"""The patch formats the API accepts: JSON merge patch (RFC 7386) and JSON patch (RFC 6902)."""

from __future__ import annotations

import copy
from typing import Any

from modelfn.localstack.knative.errors import ApiError, BadRequest


class PatchFailed(ApiError):
    """A JSON patch that cannot apply (a bad path, a failed ``test``): 422, as the API server."""

    status_code = 422
    reason = "Invalid"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge, ``null`` removes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise BadRequest(f"JSON patch path {path!r} must start with '/'")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, path: str) -> tuple[Any, str]:
    parts = _pointer(path)
    if not parts:
        raise PatchFailed(f"JSON patch path {path!r} names the whole document")
    node = doc
    for part in parts[:-1]:
        try:
            node = node[int(part)] if isinstance(node, list) else node[part]
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise PatchFailed(f"JSON patch path {path!r} does not exist") from exc
    return node, parts[-1]


def _get(doc: Any, path: str) -> Any:
    node, last = _parent(doc, path)
    try:
        return node[int(last)] if isinstance(node, list) else node[last]
    except (KeyError, IndexError, ValueError, TypeError) as exc:
        raise PatchFailed(f"JSON patch path {path!r} does not exist") from exc


def _remove(doc: Any, path: str) -> Any:
    value = _get(doc, path)
    node, last = _parent(doc, path)
    del node[int(last) if isinstance(node, list) else last]
    return value


def _add(doc: Any, path: str, value: Any) -> None:
    node, last = _parent(doc, path)
    if isinstance(node, list):
        index = len(node) if last == "-" else int(last)
        if not 0 <= index <= len(node):
            raise PatchFailed(f"JSON patch path {path!r} is out of range")
        node.insert(index, copy.deepcopy(value))
    elif isinstance(node, dict):
        node[last] = copy.deepcopy(value)
    else:
        raise PatchFailed(f"JSON patch path {path!r} is not inside an object or array")


def json_patch(doc: dict[str, Any], operations: Any) -> dict[str, Any]:
    """RFC 6902: ``add``, ``remove``, ``replace``, ``move``, ``copy``, ``test``, in order."""
    if not isinstance(operations, list):
        raise BadRequest("a JSON patch is an array of operations")
    out = copy.deepcopy(doc)
    for op in operations:
        if not isinstance(op, dict) or "path" not in op:
            raise BadRequest(f"JSON patch operation {op!r} has no path")
        kind, path = op.get("op"), str(op["path"])
        if kind == "add":
            _add(out, path, op.get("value"))
        elif kind == "remove":
            _remove(out, path)
        elif kind == "replace":
            _remove(out, path)
            _add(out, path, op.get("value"))
        elif kind == "move":
            _add(out, path, _remove(out, str(op.get("from", ""))))
        elif kind == "copy":
            _add(out, path, _get(out, str(op.get("from", ""))))
        elif kind == "test":
            if _get(out, path) != op.get("value"):
                raise PatchFailed(f"JSON patch test failed at {path!r}")
        else:
            raise BadRequest(f"JSON patch operation {kind!r} is not one of add, remove, "
                             "replace, move, copy, test")
    return out
