"""A parser for protobuf text format, as Triton's ``config.pbtxt`` files use it.

The parser knows no schema: it turns text into a tree of ``Message`` objects
whose ``Field`` entries keep their line numbers, so whoever maps the tree onto
a schema (``config.parse_config``) can name the exact line of a wrong value.

Accepted syntax: ``name: value``; ``name { ... }`` and ``name < ... >`` (the
colon is optional before a message or a list); ``name: [v1, v2]`` and
``name [ {..}, {..} ]`` (a list is the same as repeating the field, and an
empty list sets nothing); repeated fields by repetition; strings in single or
double quotes with C escapes, adjacent strings concatenated; integers in
decimal, hex and octal, with an optional ``-``; floats (``1.5``, ``1e-3``,
``2.5f``, ``-inf``, ``nan``); identifiers for enums and booleans; ``#``
comments; an optional ``,`` or ``;`` after each field.

``Reader`` then gives typed access to a parsed message against a ``Schema``,
turning wrong types, repeats and fields outside the schema into ``ConfigError``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from modelfn.runtime.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping


@dataclass(frozen=True, slots=True)
class Ident:
    """A bare identifier value: an enum name, ``true``/``false``, ``inf``..."""

    name: str


Scalar = str | int | float | Ident


@dataclass(slots=True)
class Message:
    fields: list[Field] = field(default_factory=list)
    line: int = 1  # where the message opens


Value = Scalar | Message


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    value: Value
    line: int


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # "string" | "number" | "ident" | "punct" | "end"
    text: str
    line: int


_TOKEN = re.compile(
    r"""
      (?P<newline>\n)
    | (?P<space>[ \t\r\f\v]+)
    | (?P<comment>\#[^\n]*)
    | (?P<string>"(?:[^"\\\n]|\\[^\n])*"|'(?:[^'\\\n]|\\[^\n])*')
    | (?P<number>(?:0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?[fF]?)(?![\w.]))
    | (?P<badnumber>\.?\d[\w.]*)
    | (?P<ident>[A-Za-z_]\w*)
    | (?P<punct>[{}\[\]<>:,;-])
    | (?P<unterminated>["'])
    """,
    re.VERBOSE,
)

_BAD_TOKENS = {"unterminated": "unterminated string", "badnumber": "invalid number '{}'"}
_CLOSING = {"{": "}", "<": ">"}

_SIMPLE_ESCAPES = {
    "n": b"\n",
    "t": b"\t",
    "r": b"\r",
    "a": b"\a",
    "b": b"\b",
    "f": b"\f",
    "v": b"\v",
    "\\": b"\\",
    "'": b"'",
    '"': b'"',
    "?": b"?",
}
_ESCAPE = re.compile(
    r"\\(?:(?P<octal>[0-7]{1,3})|x(?P<hex>[0-9a-fA-F]{1,2})"
    r"|u(?P<u4>[0-9a-fA-F]{4})|U(?P<u8>[0-9a-fA-F]{8})|(?P<simple>.))"
)

_FLOAT_WORDS = {"inf": float("inf"), "infinity": float("inf"), "nan": float("nan")}


def parse(text: str, path: str = "<string>") -> Message:
    """Parse protobuf text format into a ``Message`` tree; syntax errors name path and line."""
    return _Parser(_tokenize(text, path), path).document()


def _tokenize(text: str, path: str) -> Iterator[_Token]:
    line, pos = 1, 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None or match.lastgroup in _BAD_TOKENS:
            what = (
                _BAD_TOKENS[match.lastgroup or ""].format(match.group())
                if match
                else f"unexpected character {text[pos]!r}"
            )
            raise ConfigError(f"syntax error: {what}", path=path, line=line)
        kind, pos = match.lastgroup or "", match.end()
        if kind == "newline":
            line += 1
        elif kind not in ("space", "comment"):
            yield _Token(kind, match.group(), line)
    yield _Token("end", "", line)


def _unescape(literal: str, path: str, line: int) -> str:
    body = literal[1:-1]
    out = bytearray()
    pos = 0
    for match in _ESCAPE.finditer(body):
        out += body[pos : match.start()].encode()
        pos = match.end()
        if match["octal"] is not None:
            code = int(match["octal"], 8)
            if code > 0xFF:
                raise ConfigError(
                    f"syntax error: octal escape out of range in {literal}", path=path, line=line
                )
            out.append(code)
        elif match["hex"] is not None:
            out.append(int(match["hex"], 16))
        elif match["u4"] is not None or match["u8"] is not None:
            code = int(match["u4"] or match["u8"], 16)
            if code > 0x10FFFF:
                raise ConfigError(
                    f"syntax error: bad unicode escape in {literal}", path=path, line=line
                )
            out += chr(code).encode("utf-8", "surrogatepass")
        elif match["simple"] in _SIMPLE_ESCAPES:
            out += _SIMPLE_ESCAPES[match["simple"]]
        else:
            raise ConfigError(
                f"syntax error: invalid escape '\\{match['simple']}' in {literal}",
                path=path,
                line=line,
            )
    out += body[pos:].encode()
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(
            f"syntax error: string {literal} is not valid UTF-8", path=path, line=line
        ) from None


def _number(text: str, negative: bool) -> int | float | None:
    """The value of a number token, or None when it is malformed (``08``)."""
    sign = -1 if negative else 1
    lowered = text.lower()
    if lowered.startswith("0x"):
        return sign * int(lowered, 16)
    if text.isdigit():
        if len(text) > 1 and text[0] == "0":
            return sign * int(text, 8) if set(text) <= set("01234567") else None
        return sign * int(text)
    return sign * float(lowered.removesuffix("f"))


#: messages nested deeper than this are refused: Triton's deepest config path is 6 levels
MAX_DEPTH = 32


class _Parser:
    def __init__(self, tokens: Iterator[_Token], path: str) -> None:
        self._tokens = tokens
        self._path = path
        self._current = next(tokens)
        self._depth = 0

    def _advance(self) -> _Token:
        token = self._current
        if token.kind != "end":
            self._current = next(self._tokens)
        return token

    def _at(self, *texts: str) -> bool:
        return self._current.kind == "punct" and self._current.text in texts

    def _fail(self, expected: str, token: _Token | None = None) -> ConfigError:
        token = token or self._current
        found = "end of file" if token.kind == "end" else repr(token.text)
        return ConfigError(
            f"syntax error: expected {expected}, found {found}", path=self._path, line=token.line
        )

    def _expect(self, text: str) -> _Token:
        if not self._at(text):
            raise self._fail(f"'{text}'")
        return self._advance()

    def document(self) -> Message:
        message = self._fields(closing=None, line=1)
        if self._current.kind != "end":
            raise self._fail("a field name")
        return message

    def _fields(self, closing: str | None, line: int) -> Message:
        message = Message(line=line)
        while self._current.kind != "end" and not (closing and self._at(closing)):
            name = self._advance()
            if name.kind != "ident":
                raise self._fail("a field name", name)
            colon = self._at(":")
            if colon:
                self._advance()
            if self._at("["):
                self._list(name, message)
            elif self._at("{", "<"):
                message.fields.append(Field(name.text, self._message(), name.line))
            elif not colon:
                raise self._fail(f"':' or '{{' after field '{name.text}'")
            else:
                message.fields.append(Field(name.text, self._scalar(), name.line))
            if self._at(",", ";"):
                self._advance()
        return message

    def _message(self) -> Message:
        opening = self._advance()
        if self._depth >= MAX_DEPTH:
            raise ConfigError(f"messages are nested more than {MAX_DEPTH} deep",
                              path=self._path, line=opening.line)
        self._depth += 1
        message = self._fields(closing=_CLOSING[opening.text], line=opening.line)
        self._depth -= 1
        if self._current.kind == "end":
            raise self._fail(
                f"'{_CLOSING[opening.text]}' to close the message opened on line {opening.line}"
            )
        self._advance()
        return message

    def _list(self, name: _Token, into: Message) -> None:
        self._expect("[")
        while not self._at("]"):
            line = self._current.line
            value = self._message() if self._at("{", "<") else self._scalar()
            into.fields.append(Field(name.text, value, line))
            if not self._at("]"):
                self._expect(",")
        self._advance()

    def _scalar(self) -> Scalar:
        token = self._current
        if token.kind == "string":
            parts: list[str] = []
            while self._current.kind == "string":
                literal = self._advance()
                parts.append(_unescape(literal.text, self._path, literal.line))
            return "".join(parts)
        negative = self._at("-")
        if negative:
            self._advance()
        token = self._advance()
        if token.kind == "number":
            number = _number(token.text, negative)
            if number is None:
                raise ConfigError(
                    f"syntax error: invalid number '{token.text}'", path=self._path, line=token.line
                )
            return number
        if token.kind == "ident" and not negative:
            return Ident(token.text)
        if token.kind == "ident" and token.text.lower() in _FLOAT_WORDS:
            return -_FLOAT_WORDS[token.text.lower()]
        raise self._fail("a value", token)


# --- typed reading against a schema --------------------------------------------------------

_BOOLS = {"true": True, "True": True, "t": True, "false": False, "False": False, "f": False}

_T = TypeVar("_T")


def _boolean(value: Value) -> Value | bool:
    """A text-format boolean (true, True, t, 1 and their opposites) as a bool."""
    if isinstance(value, Ident) and value.name in _BOOLS:
        return _BOOLS[value.name]
    if type(value) is int and value in (0, 1):
        return bool(value)
    return value


def _neutral(value: Value, neutral: Scalar | None) -> bool:
    """``value`` is the field's neutral value, however a boolean is spelled."""
    return neutral is not None and (value == neutral or (
        isinstance(_boolean(neutral), bool) and _boolean(value) == _boolean(neutral)))


@dataclass(frozen=True)
class Schema:
    """Which fields each kind of message may hold.

    ``fields`` maps a message kind to the field names read; ``unsupported`` names fields
    a message may have elsewhere but the reader refuses (so the error says "not supported"
    rather than "unknown"); ``neutral`` lets a refused field through at one exact value.
    """

    fields: Mapping[str, frozenset[str]]
    unsupported: Mapping[str, frozenset[str]] = field(default_factory=dict)
    neutral: Mapping[tuple[str, str], Scalar] = field(default_factory=dict)


def describe(value: Value) -> str:
    if isinstance(value, Message):
        return "a message"
    if isinstance(value, Ident):
        return value.name
    return f'"{value}"' if isinstance(value, str) else str(value)


class Reader:
    """Typed access to one parsed message of kind ``kind``, refusing fields outside ``schema``.

    Singular getters refuse repeated fields. Errors name fields by their dotted ``label``
    path and start with the ``subject`` (such as ``input 'x'``) once ``about`` set one.
    """

    def __init__(
        self,
        tree: Message,
        kind: str,
        path: str,
        schema: Schema,
        label: str = "",
        subject: str = "",
    ) -> None:
        self.tree, self.path, self.schema = tree, path, schema
        self.label, self.subject = label, subject
        self.fields: dict[str, list[Field]] = {}
        for f in tree.fields:
            if f.name not in schema.fields[kind] and not _neutral(
                    f.value, schema.neutral.get((kind, f.name))):
                known = f.name in schema.unsupported.get(kind, ())
                problem = "is not supported by modelfn" if known else "is unknown"
                raise self.error(f"field '{self.qualify(f.name)}' {problem}", f)
            self.fields.setdefault(f.name, []).append(f)

    def about(self, subject: str) -> None:
        self.subject, self.label = subject, ""

    def qualify(self, name: str) -> str:
        return f"{self.label}.{name}" if self.label else name

    def error(self, message: str, at: Field | Message | None = None) -> ConfigError:
        text = f"{self.subject}: {message}" if self.subject else message
        return ConfigError(text, path=self.path, line=(at or self.tree).line)

    def many(self, name: str) -> list[Field]:
        return self.fields.get(name, [])

    def one(self, name: str) -> Field | None:
        found = self.many(name)
        if len(found) > 1:
            raise self.error(f"field '{self.qualify(name)}' is set more than once", found[1])
        return found[0] if found else None

    def expected(self, f: Field, what: str) -> ConfigError:
        return self.error(
            f"field '{self.qualify(f.name)}' expects {what}, got {describe(f.value)}", f
        )

    def _int(self, f: Field, bounds: tuple[int, int]) -> int:
        if not isinstance(f.value, int):
            raise self.expected(f, "an integer")
        low, high = bounds
        if not low <= f.value <= high:
            limit = f">= {low}" if f.value < low else f"<= {high}"
            raise self.error(f"field '{self.qualify(f.name)}' must be {limit}, got {f.value}", f)
        return f.value

    def string(self, name: str, default: str = "") -> str:
        f = self.one(name)
        if f is None:
            return default
        if not isinstance(f.value, str):
            raise self.expected(f, "a quoted string")
        return f.value

    def choice(self, name: str, choices: Iterable[str]) -> str:
        """A string that must be one of ``choices``, or "" when absent."""
        value = self.string(name)
        if value and value not in choices:
            expected = ", ".join(f'"{c}"' for c in choices)
            raise self.error(
                f'{self.qualify(name)} "{value}" is not supported by modelfn; '
                f"expected one of {expected}",
                self.one(name),
            )
        return value

    def integer(self, name: str, default: int, bounds: tuple[int, int]) -> int:
        f = self.one(name)
        return default if f is None else self._int(f, bounds)

    def integers(self, name: str, bounds: tuple[int, int]) -> tuple[int, ...]:
        return tuple(self._int(f, bounds) for f in self.many(name))

    def boolean(self, name: str) -> bool:
        f = self.one(name)
        if f is None:
            return False
        if isinstance(f.value, Ident) and f.value.name in _BOOLS:
            return _BOOLS[f.value.name]
        if isinstance(f.value, int) and f.value in (0, 1):
            return bool(f.value)
        raise self.expected(f, "true or false")

    def enum(self, name: str, choices: Mapping[str, _T], default: _T) -> _T:
        f = self.one(name)
        if f is None:
            return default
        if isinstance(f.value, Ident) and f.value.name in choices:
            return choices[f.value.name]
        raise self.expected(f, "one of " + ", ".join(choices))

    def child(self, f: Field, kind: str) -> Reader:
        if not isinstance(f.value, Message):
            raise self.expected(f, "a message { ... }")
        return Reader(f.value, kind, self.path, self.schema, self.qualify(f.name), self.subject)

    def message(self, name: str, kind: str) -> Reader | None:
        f = self.one(name)
        return None if f is None else self.child(f, kind)

    def messages(self, name: str, kind: str) -> list[Reader]:
        return [self.child(f, kind) for f in self.many(name)]

    def entries(self, name: str, kind: str = "map") -> dict[str, tuple[Reader, Field]]:
        """A map with string keys: key -> (its entry, the entry's ``value`` field).

        Both map spellings parse to the same: ``name { key: "k" value: ... }`` repeated,
        or ``name [ {key: ..., value: ...}, ... ]``. ``kind`` must allow key and value.
        """
        found: dict[str, tuple[Reader, Field]] = {}
        for entry in self.messages(name, kind):
            key, value = entry.string("key"), entry.one("value")
            if key in found:
                raise entry.error(f"field '{entry.label}' has key \"{key}\" more than once")
            if value is None:
                raise entry.error(f"field '{entry.label}' entry \"{key}\" has no value")
            found[key] = (entry, value)
        return found

    def string_map(self, name: str, kind: str = "map") -> dict[str, str]:
        values: dict[str, str] = {}
        for key, (entry, value) in self.entries(name, kind).items():
            if not isinstance(value.value, str):
                raise entry.error(
                    f"field '{entry.label}' expects a quoted string as the value of "
                    f'"{key}", got {describe(value.value)}',
                    value,
                )
            values[key] = value.value
        return values
