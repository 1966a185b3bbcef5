"""Field and label selectors, as the Kubernetes API server parses and applies them.

``matcher(fieldSelector, labelSelector)`` is the test a list or a watch applies to each
object; a selector that does not parse is ``MalformedRequest`` with the API server's
message.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import orjson

from modelfn.localstack.knative.errors import MalformedRequest

if TYPE_CHECKING:
    from collections.abc import Callable

#: a label selector's tokens: operators, parentheses, commas and the words between them
_LABEL_TOKEN = re.compile(r"\s*(==|!=|=|!|\(|\)|,|<|>|[^\s=!(),<>]+)\s*")
_NAME = r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)"
_LABEL_KEY = re.compile(rf"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                        rf"{_NAME}")
_LABEL_VALUE = re.compile(f"{_NAME}?")
#: the fields a custom resource can be selected by (the API server's own two)
FIELDS = ("metadata.name", "metadata.namespace")
Labels = dict[str, Any]
Requirement = tuple[str, str, frozenset[str]]


def matcher(fields: str, labels: str) -> Callable[[dict[str, Any]], bool]:
    """A field selector (``metadata.name=x``, ``metadata.namespace!=y``) and a label
    selector in Kubernetes' grammar (``a=1,b!=2,c in (x,y),d notin (z),e,!f``), ANDed; a
    selector that does not parse is ``MalformedRequest`` (400), as the API server answers it."""
    wanted_fields = _field_selector(fields)
    wanted_labels = _label_selector(labels)

    def match(obj: dict[str, Any]) -> bool:
        meta = obj.get("metadata") or {}
        for key, op, value in wanted_fields:
            if (str(meta.get(key.removeprefix("metadata."), "")) == value) != (op == "="):
                return False
        have = meta.get("labels") or {}
        return all(_label_matches(have, req) for req in wanted_labels)

    return match


def _field_selector(selector: str) -> list[tuple[str, str, str]]:
    """``field=value``, ``field==value``, ``field!=value`` terms, comma-separated (a
    backslash escapes a comma, an ``=`` or itself in a value)."""
    terms: list[str] = [""]
    escaped = False
    for char in selector:
        if escaped:
            terms[-1] += "\\" + char
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == ",":
            terms.append("")
        else:
            terms[-1] += char
    if escaped:
        raise MalformedRequest(f"invalid field selector {selector!r}: it ends with a lone '\\'")
    out = []
    for term in terms:
        if not term.strip():
            continue
        found = re.match(r"((?:[^=!\\]|\\.|!(?!=))*)(!=|==|=)(.*)", term)
        if found is None:
            raise MalformedRequest(f"invalid field selector {selector!r}: {term!r} is not "
                                   "field=value, field==value or field!=value")
        key, op, value = found.group(1).strip(), found.group(2), found.group(3)
        if key not in FIELDS:
            raise MalformedRequest(f'field label not supported: "{key}" is not a known field '
                                   f"selector: only {', '.join(repr(f) for f in FIELDS)}")
        out.append((key, "!=" if op == "!=" else "=", re.sub(r"\\(.)", r"\1", value)))
    return out


def _label_selector(selector: str) -> list[Requirement]:
    """Kubernetes' label selector grammar: comma-separated requirements, ANDed."""
    if not selector.strip():
        return []
    tokens: list[str] = []
    at = 0
    while at < len(selector):
        found = _LABEL_TOKEN.match(selector, at)
        if found is None or found.end() == at:
            break  # only trailing whitespace is left
        tokens.append(found.group(1))
        at = found.end()

    def bad(why: str) -> MalformedRequest:
        return MalformedRequest(f"unable to parse requirement: invalid label selector "
                                f"{selector!r}: {why}")

    def take(expected: str) -> str:
        if not tokens:
            raise bad(f"found end of string, expected {expected}")
        return tokens.pop(0)

    def key_of(token: str) -> str:
        if token in "==!=(),<>" or len(token.split("/")[-1]) > 63 \
                or not _LABEL_KEY.fullmatch(token):
            raise bad(f"{token!r} is not a label key (a name of at most 63 alphanumerics, "
                      "'-', '_' or '.', optionally prefixed by a DNS subdomain and '/')")
        return token

    def value_of(token: str) -> str:
        if len(token) > 63 or not _LABEL_VALUE.fullmatch(token):
            raise bad(f"{token!r} is not a label value (at most 63 alphanumerics, '-', '_' "
                      "or '.', starting and ending with an alphanumeric)")
        return token

    requirements: list[Requirement] = []
    while True:
        token = take("'!' or a label key")
        if token == "!":
            requirements.append((key_of(take("a label key")), "!", frozenset()))
        else:
            key = key_of(token)
            op = tokens[0] if tokens else ","
            if op == ",":
                requirements.append((key, "exists", frozenset()))
            elif op in ("=", "==", "!="):
                tokens.pop(0)
                value = "" if not tokens or tokens[0] == "," else value_of(tokens.pop(0))
                requirements.append((key, "!=" if op == "!=" else "=", frozenset([value])))
            elif op in ("<", ">"):
                tokens.pop(0)
                number = take("an integer")
                if not re.fullmatch(r"-?\d+", number):
                    raise bad(f"for '<' and '>', the value must be an integer, not {number!r}")
                requirements.append((key, op, frozenset([number])))
            elif op in ("in", "notin"):
                tokens.pop(0)
                if take("'('") != "(":
                    raise bad(f"expected '(' after {op!r}")
                values: set[str] = set()
                while (token := take("a value or ')'")) != ")" or not values:
                    if token == ")":
                        raise bad(f"for {op!r}, the set of values cannot be empty")
                    values.add(value_of(token))
                    if (token := take("',' or ')'")) == ")":
                        break
                    if token != ",":
                        raise bad(f"found {token!r} in the set of values, expected ',' or ')'")
                requirements.append((key, op, frozenset(values)))
            else:
                raise bad(f"found {op!r} after {key!r}, expected one of '=', '==', '!=', "
                          "'in', 'notin', '<', '>', ',' or the end")
        if not tokens:
            return requirements
        if (token := tokens.pop(0)) != ",":
            raise bad(f"found {token!r}, expected ',' or the end")


def _label_matches(labels: Labels, requirement: Requirement) -> bool:
    key, op, values = requirement
    present = key in labels
    value = labels.get(key)
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    if op == "exists":
        return present
    if op == "!":
        return not present
    if op in ("=", "in"):
        return present and text in values
    if op in ("!=", "notin"):
        return not present or text not in values
    try:  # '<' and '>': an integer label against an integer
        have, bound = int(text), int(next(iter(values)))
    except ValueError:
        return False
    return present and (have < bound if op == "<" else have > bound)
