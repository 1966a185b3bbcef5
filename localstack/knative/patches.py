"""The patch formats the API accepts: JSON merge patch (RFC 7386) and JSON patch (RFC 6902)."""

from __future__ import annotations

import copy
from typing import Any

import orjson

from modelfn.localstack.knative.errors import ApiError, MalformedRequest
from modelfn.platforms.knative import GROUP, KIND
from modelfn.platforms.knative_schema import Cause


class PatchFailed(ApiError):
    """A JSON patch that cannot apply (a bad path, a failed ``test``): 422 Invalid, as the
    API server answers it, but naming the object and carrying the reason as a cause (the
    API server's own answer leaves both out, so ``kubectl`` prints only "The request is
    invalid"); ``kubectl`` prints ``The Service "x" is invalid: <field>: <message>``."""

    status_code = 422
    reason = "Invalid"
    details_kind = KIND

    def __init__(self, message: str, *, path: str = "", name: str = "") -> None:
        self.path = path
        self.detail = message
        field = _field(path)
        full = f"{field}: {message}" if field else message
        if name:
            full = f'{KIND}.{GROUP} "{name}" is invalid: {full}'
        super().__init__(full, name=name, causes=(Cause(field, message),))


def _field(path: str) -> str:
    """A JSON pointer as a field path: ``/spec/containers/0/image`` is
    ``spec.containers[0].image``."""
    out = ""
    for part in path.removeprefix("/").split("/") if path.startswith("/") else ():
        part = part.replace("~1", "/").replace("~0", "~")
        out += f"[{part}]" if part.isdigit() else (f".{part}" if out else part)
    return out


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
        raise MalformedRequest(f"JSON patch path {path!r} must start with '/'")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, path: str) -> tuple[Any, str]:
    parts = _pointer(path)
    if not parts:
        raise PatchFailed(f"JSON patch path {path!r} names the whole document", path=path)
    node = doc
    for part in parts[:-1]:
        try:
            node = node[int(part)] if isinstance(node, list) else node[part]
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise PatchFailed(f"JSON patch path {path!r} does not exist", path=path) from exc
    return node, parts[-1]


def _get(doc: Any, path: str) -> Any:
    node, last = _parent(doc, path)
    try:
        return node[int(last)] if isinstance(node, list) else node[last]
    except (KeyError, IndexError, ValueError, TypeError) as exc:
        raise PatchFailed(f"JSON patch path {path!r} does not exist", path=path) from exc


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
            raise PatchFailed(f"JSON patch path {path!r} is out of range", path=path)
        node.insert(index, copy.deepcopy(value))
    elif isinstance(node, dict):
        node[last] = copy.deepcopy(value)
    else:
        raise PatchFailed(f"JSON patch path {path!r} is not inside an object or array",
                          path=path)


def json_patch(doc: dict[str, Any], operations: Any) -> dict[str, Any]:
    """RFC 6902: ``add``, ``remove``, ``replace``, ``move``, ``copy``, ``test``, in order."""
    if not isinstance(operations, list):
        raise MalformedRequest("a JSON patch is an array of operations")
    out = copy.deepcopy(doc)
    meta = doc.get("metadata")
    name = str(meta.get("name") or "") if isinstance(meta, dict) else ""
    for index, op in enumerate(operations):
        if not isinstance(op, dict) or "path" not in op:
            raise MalformedRequest(f"JSON patch operation {op!r} has no path")
        try:
            _apply(out, op)
        except PatchFailed as exc:
            raise PatchFailed(f"JSON patch operation {index} ({op.get('op')}): {exc.detail}",
                              path=exc.path, name=name) from exc
    return out


def _apply(out: dict[str, Any], op: dict[str, Any]) -> None:
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
        if (have := _get(out, path)) != op.get("value"):
            raise PatchFailed(f"test failed: {path!r} is {_show(have)}, not "
                              f"{_show(op.get('value'))}", path=path)
    else:
        raise MalformedRequest(f"JSON patch operation {kind!r} is not one of add, remove, "
                               "replace, move, copy, test")


def _show(value: Any) -> str:
    return orjson.dumps(value).decode()
