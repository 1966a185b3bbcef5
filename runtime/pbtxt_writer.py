"""Write a Triton model config, in its JSON form, as protobuf text format (config.pbtxt).

The writer knows no schema beyond three small tables: which fields are enums
(printed unquoted, omitted at their zero value), which are maps (printed as
repeated ``key``/``value`` entries) and which messages matter by their mere
presence. It follows proto3's text format: scalars at their default (``0``,
``""``, ``false``) and empty lists are left out, and so are messages holding
only defaults, except those whose presence matters (``dynamic_batching { }``
turns batching on, ``all { }`` picks a version policy, ``reshape { }`` reshapes
to a scalar). Repeated messages use Triton's ``input [ {...}, {...} ]`` style.
"""

from __future__ import annotations

from typing import Any

#: enum fields of Triton's model config -> their zero value (omitted like any default)
ENUM_FIELDS: dict[str, str] = {
    "data_type": "TYPE_INVALID",
    "format": "FORMAT_NONE",
    "kind": "KIND_AUTO",
    "timeout_action": "REJECT",
}
#: map fields: ``parameters`` (model and accelerator), ``model_warmup.inputs`` and an
#: ensemble step's ``input_map`` and ``output_map``
MAP_FIELDS: frozenset[str] = frozenset({"parameters", "inputs", "input_map", "output_map"})
#: messages whose mere presence means something, printed even when all their fields are
#: defaults; any other message is left out when nothing in it differs from the defaults
PRESENCE_FIELDS: frozenset[str] = frozenset(
    {"dynamic_batching", "latest", "all", "specific", "reshape"}
)

_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_INDENT = "  "


def config_to_pbtxt(config: dict[str, Any]) -> str:
    """``config.pbtxt`` text for a config in Triton's JSON form (``ModelConfig.to_json()``)."""
    return "".join(_fields(config, 0))


def _is_default(name: str, value: Any) -> bool:
    if isinstance(value, dict):
        return name in MAP_FIELDS and not value
    if isinstance(value, list):
        return not value
    if name in ENUM_FIELDS:
        return value in ("", ENUM_FIELDS[name])
    return value is None or value is False or value == 0 or value == ""


def _fields(message: dict[str, Any], depth: int) -> list[str]:
    lines: list[str] = []
    pad = _INDENT * depth
    for name, value in message.items():
        if _is_default(name, value):
            continue
        if name in MAP_FIELDS and isinstance(value, dict):
            for key, item in value.items():
                entry = {"key": str(key), "value": item}
                lines.append(f"{pad}{name} {{\n{''.join(_map_entry(entry, depth + 1))}{pad}}}\n")
        elif isinstance(value, dict):
            body = _fields(value, depth + 1)
            if body or name in PRESENCE_FIELDS:
                lines.append(f"{pad}{name} {{\n{''.join(body)}{pad}}}\n")
        elif isinstance(value, list) and all(isinstance(v, dict) for v in value):
            inner = _INDENT * (depth + 1)
            blocks = [
                f"{inner}{{\n{''.join(_fields(item, depth + 2))}{inner}}}" for item in value
            ]
            lines.append(f"{pad}{name} [\n" + ",\n".join(blocks) + f"\n{pad}]\n")
        elif isinstance(value, list):
            items = ", ".join(_scalar(name, v) for v in value)
            lines.append(f"{pad}{name}: [ {items} ]\n")
        else:
            lines.append(f"{pad}{name}: {_scalar(name, value)}\n")
    return lines


def _map_entry(entry: dict[str, Any], depth: int) -> list[str]:
    pad = _INDENT * depth
    value = entry["value"]
    lines = [f"{pad}key: {_string(entry['key'])}\n"]
    if isinstance(value, dict):
        lines.append(f"{pad}value {{\n{''.join(_fields(value, depth + 1))}{pad}}}\n")
    else:
        lines.append(f"{pad}value: {_scalar('value', value)}\n")
    return lines


def _scalar(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if name in ENUM_FIELDS:
        return str(value)
    return _string(str(value))


def _string(text: str) -> str:
    out = []
    for char in text:
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\{ord(char):03o}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'
