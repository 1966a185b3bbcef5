"""Knative's admission bounds for a revision template, for deploy and the local platform.

Every numeric annotation and field of ``spec.template`` has the range Knative's webhook
gives it (``autoscaling.knative.dev`` annotations, ``containerConcurrency``,
``timeoutSeconds``): a scale is an int32 of 0 or more, a window 6s to 1h, a target at
least 0.01, and so on. ``read_annotations`` reads the annotations it knows into numbers
(durations in seconds) and names each one out of range, with the range, as the webhook
does: ``expected 0 <= 100000000000000000000 <= 2147483647``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from modelfn.platforms import knative as kn

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

INT32_MAX = 2**31 - 1
TARGET_MIN = 0.01
WINDOW_MIN_S, WINDOW_MAX_S = 6.0, 3600.0
PANIC_WINDOW_PERCENT = (1.0, 100.0)
PANIC_THRESHOLD_PERCENT = (110.0, 1000.0)
#: what Go's strconv.ParseInt takes
_INTEGER = re.compile(r"^[+-]?\d+$")


class OutOfRange(ValueError):
    """A value Knative's webhook refuses; the message is the webhook's."""


@dataclass(frozen=True)
class Problem:
    """One annotation (its key) or field (its path under ``spec.template``) refused."""

    field: str
    message: str


def go_duration(seconds: float) -> str:
    """``seconds`` as Go prints a ``time.Duration`` (``6s``, ``1h0m0s``)."""
    hours, rest = divmod(int(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"


def _bounds(text: str, lower: float | str, upper: float | str) -> OutOfRange:
    return OutOfRange(f"expected {lower} <= {text} <= {upper}")


def _int32(text: str, lower: int = 0) -> int:
    if not _INTEGER.match(text.strip()):
        raise OutOfRange(f"invalid value: {text}")
    value = int(text)
    if not lower <= value <= INT32_MAX:
        raise _bounds(text, lower, INT32_MAX)
    return value


def _float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise OutOfRange(f"invalid value: {text}") from None
    if not math.isfinite(value):
        raise OutOfRange(f"invalid value: {text}")
    return value


def _scale(text: str) -> float:
    return _int32(text)


def _initial_scale(text: str) -> float:
    value = _int32(text)
    if value == 0:  # Knative's allow-zero-initial-scale: false
        raise OutOfRange("invalid value: 0: initial-scale=0 not allowed by cluster")
    return value


def _percent_in(lower: float, upper: float) -> Callable[[str], float]:
    def read(text: str) -> float:
        value = _float(text)
        if not lower <= value <= upper:
            raise _bounds(text, f"{lower:g}", f"{upper:g}")
        return value
    return read


def _target(text: str) -> float:
    value = _float(text)
    if value < TARGET_MIN:
        raise OutOfRange(f"target {text} should be at least {TARGET_MIN:g}")
    return value


def _burst(text: str) -> float:
    value = _float(text)
    if value < 0 and value != -1:
        raise OutOfRange(f"invalid value: {text}")
    return value


def _duration_in(lower: float, upper: float, *, whole: bool = True) -> Callable[[str], float]:
    def read(text: str) -> float:
        try:
            value = kn.parse_duration(text)
        except ValueError:
            raise OutOfRange(f"invalid value: {text}") from None
        if not lower <= value <= upper:
            raise _bounds(text, go_duration(lower), go_duration(upper))
        if whole and value != int(value):
            raise OutOfRange("must be specified with at most second precision")
        return value
    return read


#: annotation -> how its value is read (and bounded)
READERS: dict[str, Callable[[str], float]] = {
    kn.MIN_SCALE: _scale,
    kn.MAX_SCALE: _scale,
    kn.MIN_SCALE_CAMEL: _scale,
    kn.MAX_SCALE_CAMEL: _scale,
    kn.INITIAL_SCALE: _initial_scale,
    kn.TARGET: _target,
    kn.TARGET_UTILIZATION: _percent_in(1.0, 100.0),
    kn.TARGET_BURST_CAPACITY: _burst,
    kn.PANIC_WINDOW_PERCENTAGE: _percent_in(*PANIC_WINDOW_PERCENT),
    kn.PANIC_THRESHOLD_PERCENTAGE: _percent_in(*PANIC_THRESHOLD_PERCENT),
    kn.WINDOW: _duration_in(WINDOW_MIN_S, WINDOW_MAX_S),
    kn.SCALE_DOWN_DELAY: _duration_in(0.0, WINDOW_MAX_S),
    kn.RETENTION: _duration_in(0.0, WINDOW_MAX_S, whole=False),
    kn.PROGRESS_DEADLINE: _duration_in(1.0, float(INT32_MAX)),
}


def read_annotations(annotations: Mapping[str, object]
                     ) -> tuple[dict[str, float], list[Problem]]:
    """The known annotations as numbers, and a ``Problem`` per value Knative refuses
    (with max-scale below min-scale, when max-scale is not 0)."""
    values: dict[str, float] = {}
    problems: list[Problem] = []
    for key, read in READERS.items():
        if key in annotations:
            try:
                values[key] = read(str(annotations[key]))
            except OutOfRange as exc:
                problems.append(Problem(key, str(exc)))
    minimum = values.get(kn.MIN_SCALE, values.get(kn.MIN_SCALE_CAMEL, 0))
    maximum = values.get(kn.MAX_SCALE, values.get(kn.MAX_SCALE_CAMEL, 0))
    if maximum and minimum > maximum:
        problems.append(Problem(kn.MIN_SCALE, f"max-scale={maximum:g} is less than "
                                              f"min-scale={minimum:g}"))
    return values, problems


def spec_problems(spec: Mapping[str, object], defaults: kn.Defaults = kn.DEFAULTS
                  ) -> list[Problem]:
    """``containerConcurrency`` and ``timeoutSeconds`` of a template's ``spec`` within the
    cluster's limits (0 is each one's default)."""
    limits = {"containerConcurrency": defaults.container_concurrency_max_limit,
              "timeoutSeconds": defaults.max_revision_timeout_s}
    problems = []
    for field, upper in limits.items():
        value = spec.get(field)
        if isinstance(value, int) and not 0 <= value <= upper:
            problems.append(Problem(field, f"expected 0 <= {value} <= {upper}"))
    return problems
