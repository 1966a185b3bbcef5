"""The units ``modelfn tune`` reads from a command line: sizes, durations, level lists.

Each parser raises ``ValueError`` with a message fit for the user; the CLI turns it into a
usage error naming the option.
"""

from __future__ import annotations

import re

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)
_NUMBER = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*$")
_DURATION = re.compile(r"^(?:\s*\d+(?:\.\d+)?\s*(?:ms|s|m|h))+\s*$", re.IGNORECASE)
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h)", re.IGNORECASE)
_POWERS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4}
_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_size(text: str) -> int:
    """Bytes in ``2G``, ``512MiB``, ``1.5GB`` or ``1048576``; K, M, G, T are powers of 1024
    (a Lambda's memory is set in MiB), with or without ``iB``/``B``."""
    match = _SIZE.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a size: use a number with K, M, G or T (e.g. 2G)")
    number, unit, _ = match.groups()
    value = int(float(number) * 1024 ** _POWERS[unit.lower()])
    if value < 1:
        raise ValueError(f"{text!r}: a size must be more than 0 bytes")
    return value


def parse_duration(text: str, *, allow_zero: bool = False) -> float:
    """Seconds in ``10m``, ``90s``, ``1.5h``, ``500ms``, ``3m45s``, ``1h30m`` or a bare
    number of seconds; more than 0 unless ``allow_zero``."""
    bare = _NUMBER.match(text)
    if bare is not None:
        value = float(bare.group(1))
    elif _DURATION.match(text):
        parts = [(float(number), unit.lower()) for number, unit in _DURATION_PART.findall(text)]
        units = [unit for _, unit in parts]
        if len(set(units)) < len(units):
            raise ValueError(f"{text!r} is not a duration: give each unit once (e.g. 3m45s)")
        value = sum(number * _SECONDS[unit] for number, unit in parts)
    else:
        raise ValueError(f"{text!r} is not a duration: use a number with s, m or h (e.g. 10m, "
                         "3m45s)")
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{text!r}: a duration must be more than 0")
    return value


def parse_levels(text: str) -> tuple[int, ...]:
    """Concurrency levels: a comma-separated list of positive integers, e.g. ``1,8,32``."""
    try:
        levels = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ValueError(f"{text!r} is not a comma-separated list of integers") from None
    if not levels or min(levels) < 1:
        raise ValueError(f"{text!r}: every concurrency must be a positive integer")
    return tuple(sorted(set(levels)))


def format_duration(seconds: float) -> str:
    """``seconds`` as a duration option takes it: ``2s``, ``1m10s``, ``10m``, ``1h30m``,
    ``500ms``; whole seconds are shown above a minute."""
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:g}s"
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [(hours, "h"), (minutes, "m"), (secs, "s")]
    return "".join(f"{n}{unit}" for n, unit in parts if n)
