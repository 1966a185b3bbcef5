"""Sizes, durations and concurrency lists as a user types them."""

from __future__ import annotations

import pytest

from modelfn.tune.units import format_duration, parse_duration, parse_levels, parse_size


@pytest.mark.parametrize(("text", "expected"), [
    ("2G", 2 << 30), ("512M", 512 << 20), ("512MiB", 512 << 20), ("1.5GB", 3 << 29),
    ("1048576", 1 << 20), ("64k", 64 << 10),
])
def test_sizes(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "lots", "2X", "-1G", "0M", "1 G B"])
def test_bad_sizes_say_how_to_write_one(text: str) -> None:
    with pytest.raises(ValueError, match="size"):
        parse_size(text)


@pytest.mark.parametrize(("text", "expected"), [
    ("10m", 600.0), ("90s", 90.0), ("1.5h", 5400.0), ("500ms", 0.5), ("45", 45.0),
    ("3m45s", 225.0), ("1h30m", 5400.0), ("2m 30s", 150.0), ("1s500ms", 1.5),
])
def test_durations(text: str, expected: float) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["soon", "10 minutes", "0s", "-5m", "3m45", "1m1m", "0m0s"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def test_levels_are_sorted_and_unique() -> None:
    assert parse_levels("32,1,8,8") == (1, 8, 32)


@pytest.mark.parametrize("text", ["", "1,x", "0,8", "-1"])
def test_bad_levels(text: str) -> None:
    with pytest.raises(ValueError, match="concurrency|integers"):
        parse_levels(text)


@pytest.mark.parametrize(("seconds", "text"), [
    (0.5, "500ms"), (2.0, "2s"), (1.5, "1.5s"), (60.0, "1m"), (70.0, "1m10s"),
    (600.0, "10m"), (5400.0, "1h30m"), (3600.0, "1h"),
])
def test_durations_are_written_as_they_are_typed(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text
    assert parse_duration(text) == seconds
