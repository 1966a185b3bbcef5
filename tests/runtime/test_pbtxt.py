from __future__ import annotations

import math

import pytest

from modelfn.runtime import pbtxt
from modelfn.runtime.errors import ConfigError
from modelfn.runtime.pbtxt import Field, Ident, Message


def values(message: Message, name: str) -> list[pbtxt.Value]:
    return [f.value for f in message.fields if f.name == name]


def only(message: Message, name: str) -> pbtxt.Value:
    (value,) = values(message, name)
    return value


def sub(message: Message, name: str) -> Message:
    value = only(message, name)
    assert isinstance(value, Message)
    return value


def test_scalars_and_line_numbers() -> None:
    tree = pbtxt.parse('name: "m"\n\nmax_batch_size: 8\nkind: KIND_GPU\nflag: true\n')
    assert tree.fields == [
        Field("name", "m", 1),
        Field("max_batch_size", 8, 3),
        Field("kind", Ident("KIND_GPU"), 4),
        Field("flag", Ident("true"), 5),
    ]


@pytest.mark.parametrize(
    ("literal", "expected"),
    [
        ("0", 0),
        ("42", 42),
        ("-1", -1),
        ("- 7", -7),
        ("0x1F", 31),
        ("-0x10", -16),
        ("017", 15),
        ("9223372036854775807", 2**63 - 1),
        ("1.5", 1.5),
        ("-2.5e3", -2500.0),
        (".5", 0.5),
        ("2.5f", 2.5),
        ("1e-3", 0.001),
    ],
)
def test_numbers(literal: str, expected: float) -> None:
    value = only(pbtxt.parse(f"v: {literal}"), "v")
    assert value == expected
    assert type(value) is type(expected)


def test_special_floats() -> None:
    tree = pbtxt.parse("a: -inf b: inf c: nan d: -nan")
    assert only(tree, "a") == -math.inf
    assert only(tree, "b") == Ident("inf")  # the schema decides what a bare word means
    assert only(tree, "c") == Ident("nan")
    value = only(tree, "d")
    assert isinstance(value, float) and math.isnan(value)


@pytest.mark.parametrize(
    ("literal", "expected"),
    [
        ('"plain"', "plain"),
        ("'single'", "single"),
        (r'"tab\tnewline\nquote\"backslash\\"', 'tab\tnewline\nquote"backslash\\'),
        (r"'it\'s'", "it's"),
        (r'"\x41\101\u00e9\U0001F600"', "AA\u00e9\U0001f600"),
        (r'"\303\251"', "\u00e9"),  # octal escapes are UTF-8 bytes
        ('"a" "b"\n  \'c\'', "abc"),  # adjacent strings concatenate, across lines too
        ('"# not a comment"', "# not a comment"),
        ('""', ""),
        ('"caf\u00e9"', "caf\u00e9"),
    ],
)
def test_strings(literal: str, expected: str) -> None:
    assert only(pbtxt.parse(f"s: {literal}"), "s") == expected


def test_messages_lists_and_separators() -> None:
    tree = pbtxt.parse(
        """
        # a comment line
        input [
          { name: "a", dims: [ -1, 3 ] },   # trailing comment
          < name: 'b'; dims [ 2 ] >
        ]
        instance_group { count: 2 kind: KIND_CPU };
        instance_group: { count: 1 }
        empty: []
        dims: [ ]
        """
    )
    inputs = values(tree, "input")
    assert len(inputs) == 2
    first, second = inputs
    assert isinstance(first, Message) and isinstance(second, Message)
    assert values(first, "dims") == [-1, 3]
    assert only(second, "name") == "b"
    assert values(second, "dims") == [2]
    assert [f.line for f in tree.fields if f.name == "input"] == [4, 5]
    groups = values(tree, "instance_group")
    assert [only(g, "count") for g in groups if isinstance(g, Message)] == [2, 1]
    assert values(tree, "empty") == [] and values(tree, "dims") == []


def test_map_entries_both_spellings_parse_the_same() -> None:
    repeated = pbtxt.parse(
        'parameters { key: "k1" value { string_value: "v1" } }\n'
        'parameters { key: "k2" value { string_value: "v2" } }\n'
    )
    listed = pbtxt.parse(
        'parameters [{ key: "k1", value: { string_value: "v1" } },\n'
        '            { key: "k2", value: { string_value: "v2" } }]\n'
    )
    for tree in (repeated, listed):
        entries = [e for e in values(tree, "parameters") if isinstance(e, Message)]
        assert [only(e, "key") for e in entries] == ["k1", "k2"]
        assert [only(sub(e, "value"), "string_value") for e in entries] == ["v1", "v2"]


def test_tensorrt_optimization_example() -> None:
    tree = pbtxt.parse(
        """
optimization { execution_accelerators { gpu_execution_accelerator: [{
  name: "tensorrt"
  parameters { key: "precision_mode" value: "FP16" }          # FP32|FP16|BF16|INT8
  parameters { key: "max_workspace_size_bytes" value: "1073741824" }
  parameters { key: "trt_engine_cache_enable" value: "1" }
  parameters { key: "trt_engine_cache_path" value: "/cache" } }] } }
"""
    )
    accelerators = sub(sub(tree, "optimization"), "execution_accelerators")
    trt = only(accelerators, "gpu_execution_accelerator")
    assert isinstance(trt, Message)
    assert only(trt, "name") == "tensorrt"
    params = [p for p in values(trt, "parameters") if isinstance(p, Message)]
    assert {only(p, "key"): only(p, "value") for p in params} == {
        "precision_mode": "FP16",
        "max_workspace_size_bytes": "1073741824",
        "trt_engine_cache_enable": "1",
        "trt_engine_cache_path": "/cache",
    }
    assert [f.line for f in trt.fields if f.name == "parameters"] == [4, 5, 6, 7]


def test_empty_document() -> None:
    assert pbtxt.parse("").fields == []
    assert pbtxt.parse("# only a comment\n\n").fields == []


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ('name: "m"\nmax_batch_size: 08\n', 2, "invalid number '08'"),
        ("a: 12abc", 1, "invalid number '12abc'"),
        ('a: 1\nb: "open\n', 2, "unterminated string"),
        ("a: 1\nb: 'open", 2, "unterminated string"),
        ('input {\n  name: "x"\n', 3, "expected '}' to close the message opened on line 1"),
        ("a: <\n b: 1 }", 2, "expected a field name, found '}'"),
        ("a: }", 1, "expected a value, found '}'"),
        ("\n\nname 1", 3, "expected ':' or '{' after field 'name', found '1'"),
        ("}", 1, "expected a field name, found '}'"),
        ("dims: [1 2]", 1, "expected ',', found '2'"),
        ("dims: [1,", 1, "expected a value, found end of file"),
        ('s: "\\q"', 1, "invalid escape '\\q'"),
        ('s: "\\777"', 1, "octal escape out of range"),
        ('s: "\\xff"', 1, "is not valid UTF-8"),
        ("a: -foo", 1, "expected a value, found 'foo'"),
        ("a: 1 @", 1, "unexpected character '@'"),
        ('3: "x"', 1, "expected a field name, found '3'"),
    ],
)
def test_syntax_errors_name_path_and_line(text: str, line: int, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        pbtxt.parse(text, "models/m/config.pbtxt")
    assert caught.value.path == "models/m/config.pbtxt"
    assert caught.value.line == line
    assert str(caught.value).startswith(f"models/m/config.pbtxt:{line}: syntax error: ")
    assert message in str(caught.value)
    assert caught.value.status_code == 400


SCHEMA = pbtxt.Schema(
    fields={
        "": frozenset({"n", "s", "b", "e", "m", "ns", "params"}),
        "m": frozenset({"x"}),
        "map": frozenset({"key", "value"}),
    },
    unsupported={"": frozenset({"legacy"})},
    neutral={("", "mode"): Ident("OFF")},
)


def reader(text: str) -> pbtxt.Reader:
    return pbtxt.Reader(pbtxt.parse(text, "c.pbtxt"), "", "c.pbtxt", SCHEMA)


def test_reader_typed_access() -> None:
    r = reader(
        'n: 3 s: "x" b: true e: RED m { x: 1 } ns: [1, 2] mode: OFF\n'
        'params { key: "a" value: "1" } params [{ key: "b", value: "2" }]'
    )
    assert r.integer("n", 0, (0, 10)) == 3
    assert r.integer("absent", 7, (0, 10)) == 7
    assert r.string("s") == "x"
    assert r.boolean("b") is True
    assert r.enum("e", {"RED": 1, "BLUE": 2}, 0) == 1
    child = r.message("m", "m")
    assert child is not None and child.integer("x", 0, (0, 1)) == 1
    assert r.integers("ns", (0, 5)) == (1, 2)
    assert r.string_map("params") == {"a": "1", "b": "2"}


@pytest.mark.parametrize(
    ("text", "get", "message"),
    [
        ("legacy: 1", None, "1: field 'legacy' is not supported by modelfn"),
        ("nn: 1", None, "1: field 'nn' is unknown"),
        ("mode: ON", None, "1: field 'mode' is unknown"),
        ("m { y: 1 }", "m", "1: field 'm.y' is unknown"),
        ('n: "3"', "n", "field 'n' expects an integer, got \"3\""),
        ("n: 1.5", "n", "field 'n' expects an integer, got 1.5"),
        ("n: 11", "n", "field 'n' must be <= 10, got 11"),
        ("n: -1", "n", "field 'n' must be >= 0, got -1"),
        ("n: 1\nn: 2", "n", "2: field 'n' is set more than once"),
        ("s: FOO", "s", "field 's' expects a quoted string, got FOO"),
        ("b: yes", "b", "field 'b' expects true or false, got yes"),
        ("e: GREEN", "e", "field 'e' expects one of RED, BLUE, got GREEN"),
        ('e: "RED"', "e", "field 'e' expects one of RED, BLUE, got \"RED\""),
        ("m: 1", "m", "field 'm' expects a message { ... }, got 1"),
        ('params { key: "a" value: 1 }', "params", "field 'params' expects a quoted string"),
        ('params { key: "a" }', "params", 'entry "a" has no value'),
        (
            'params { key: "a" value: "1" }\nparams { key: "a" value: "2" }',
            "params",
            "2: field 'params' has key \"a\" more than once",
        ),
    ],
)
def test_reader_errors(text: str, get: str | None, message: str) -> None:
    getters = {
        "n": lambda r: r.integer("n", 0, (0, 10)),
        "s": lambda r: r.string("s"),
        "b": lambda r: r.boolean("b"),
        "e": lambda r: r.enum("e", {"RED": 1, "BLUE": 2}, 0),
        "m": lambda r: r.message("m", "m"),
        "params": lambda r: r.string_map("params"),
    }
    with pytest.raises(ConfigError, match="c.pbtxt:") as caught:
        r = reader(text)
        if get is not None:
            getters[get](r)
    assert message in str(caught.value)


def test_reader_subject_prefixes_errors() -> None:
    r = reader("m { x: 5 }")
    r.about("input 'x'")
    child = r.message("m", "m")
    assert child is not None
    with pytest.raises(ConfigError, match=r"c\.pbtxt:1: input 'x': field 'm\.x' must be <= 1"):
        child.integer("x", 0, (0, 1))
