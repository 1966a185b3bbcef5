"""The one weighted draw: zero weights are never drawn, odds follow the weights."""

from __future__ import annotations

import random
from collections import Counter

from modelfn.platforms.traffic import WeightedPicker


def test_weights_set_the_odds_and_zero_weights_are_never_drawn() -> None:
    picker = WeightedPicker([("a", 90), ("off", 0), ("b", 10)], rng=random.Random(7))
    drawn = Counter(picker.pick() for _ in range(10_000))
    assert set(drawn) == {"a", "b"}
    assert 0.87 < drawn["a"] / 10_000 < 0.93


def test_fractional_weights_and_a_single_target() -> None:
    assert WeightedPicker([("only", 0.25)]).pick() == "only"
    picker = WeightedPicker([(1, 0.5), (2, 0.5)], rng=random.Random(1))
    assert {picker.pick() for _ in range(200)} == {1, 2}


def test_nothing_weighted_picks_nothing() -> None:
    picker: WeightedPicker[str] = WeightedPicker([("a", 0), ("b", -1)])
    assert not picker
    assert picker.pick() is None
