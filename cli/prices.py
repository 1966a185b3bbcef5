"""The price table ``modelfn bench --cost`` reads: a small YAML file the user can edit.

The default, ``prices.yaml`` next to this module, holds public list prices and says their
region and date. A file given with ``--prices`` replaces it and must have the same keys;
anything else (a missing price, a negative one, an unknown key) is a ``PriceFileError``
naming the file and the key.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from modelfn.runtime.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Set as AbstractSet

DEFAULT_PRICES = Path(__file__).with_name("prices.yaml")


class PriceFileError(ConfigError):
    """A price file that cannot be read or does not hold the expected prices."""


@dataclass(frozen=True)
class LambdaPrice:
    architecture: str
    gb_second: float  # per GB-second of configured memory
    per_million_requests: float

    @property
    def request(self) -> float:
        return self.per_million_requests / 1e6


@dataclass(frozen=True)
class InstancePrice:
    name: str
    hourly: float
    vcpus: int | None = None
    memory_gib: float | None = None


@dataclass(frozen=True)
class PriceTable:
    region: str
    as_of: str
    currency: str
    lambdas: tuple[LambdaPrice, ...]
    instances: tuple[InstancePrice, ...]
    source: str = ""  # the file's path, for messages ("built-in prices" for the default)


class _Reader:
    """Checks one file's values, naming the key of the first bad one."""

    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, key: str, problem: str) -> PriceFileError:
        return PriceFileError(f"{key} {problem}", path=self.path)

    def mapping(self, value: Any, key: str, required: AbstractSet[str],
                optional: AbstractSet[str] = frozenset()) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(key, f"must be a mapping, not {_kind(value)}")
        missing = sorted(required - value.keys())
        if missing:
            raise self.fail(key, f"has no {', '.join(missing)}")
        unknown = sorted(str(k) for k in value.keys() - required - optional)
        if unknown:
            allowed = ", ".join(sorted(required | optional))
            raise self.fail(key, f"has unknown key {', '.join(unknown)} (expected {allowed})")
        return value

    def entries(self, value: Any, key: str) -> dict[str, Any]:
        if not isinstance(value, dict) or not value:
            raise self.fail(key, "must be a mapping with at least one entry")
        return {str(k): v for k, v in value.items()}

    def number(self, value: Any, key: str, *, positive: bool = True) -> float:
        if isinstance(value, str):  # YAML 1.1 reads 2e-7 (no dot) as text
            with contextlib.suppress(ValueError):
                value = float(value)
        ok = isinstance(value, int | float) and not isinstance(value, bool) \
            and math.isfinite(value) and (value > 0 if positive else value >= 0)
        if not ok:
            rule = "a positive number" if positive else "a number, zero or more"
            raise self.fail(key, f"must be {rule}, not {value!r}")
        return float(value)

    def text(self, value: Any, key: str) -> str:
        if not isinstance(value, str | int | float) or isinstance(value, bool) or \
                not str(value).strip():
            raise self.fail(key, f"must be text, not {value!r}")
        return str(value)


def _kind(value: Any) -> str:
    return "nothing" if value is None else type(value).__name__


def parse_prices(document: Any, source: str = "") -> PriceTable:
    """A ``PriceTable`` from a parsed YAML document; ``source`` names it in errors."""
    read = _Reader(source or "prices")
    top = read.mapping(document, "the file", {"region", "as_of", "lambda", "instances"},
                       {"currency"})
    lambdas = []
    for arch, value in read.entries(top["lambda"], "lambda").items():
        key = f"lambda.{arch}"
        spec = read.mapping(value, key, {"gb_second", "per_million_requests"})
        lambdas.append(LambdaPrice(
            arch, read.number(spec["gb_second"], f"{key}.gb_second"),
            read.number(spec["per_million_requests"], f"{key}.per_million_requests",
                        positive=False)))
    instances = []
    for name, value in read.entries(top["instances"], "instances").items():
        spec = read.mapping(value, f"instances.{name}", {"hourly"}, {"vcpus", "memory_gib"})
        vcpus = spec.get("vcpus")
        if vcpus is not None and (not isinstance(vcpus, int) or isinstance(vcpus, bool)
                                  or vcpus < 1):
            raise read.fail(f"instances.{name}.vcpus", f"must be a whole number >= 1, "
                            f"not {vcpus!r}")
        memory = spec.get("memory_gib")
        instances.append(InstancePrice(
            name, read.number(spec["hourly"], f"instances.{name}.hourly"), vcpus,
            None if memory is None else read.number(memory, f"instances.{name}.memory_gib")))
    return PriceTable(
        region=read.text(top["region"], "region"),
        as_of=read.text(top["as_of"], "as_of"),
        currency=read.text(top.get("currency", "USD"), "currency"),
        lambdas=tuple(lambdas),
        instances=tuple(instances),
        source=source,
    )


def load_prices(path: Path | None = None) -> PriceTable:
    """The price table in ``path``, or the default one shipped with modelfn."""
    path = path or DEFAULT_PRICES
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PriceFileError(f"cannot read the price file: {exc}", path=str(path)) from exc
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise PriceFileError(f"is not valid YAML: {getattr(exc, 'problem', exc)}",
                             path=str(path),
                             line=None if mark is None else mark.line + 1) from exc
    return parse_prices(document, "built-in prices" if path == DEFAULT_PRICES else str(path))
