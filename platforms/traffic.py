"""A traffic split: targets and their weights, and a draw for one unpinned request.

Knative splits a Route by ``percent``, a Lambda alias by ``AdditionalVersionWeights``
and the gateway by the routing table's split; all three draw here, so a target with no
weight is never drawn and the same weights give the same odds everywhere.
"""

from __future__ import annotations

import bisect
import itertools
import random
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from collections.abc import Iterable

T = TypeVar("T")


class WeightedPicker(Generic[T]):
    """``WeightedPicker([("a", 90), ("b", 10)]).pick()`` is ``"a"`` nine times in ten.

    Weights are any non-negative numbers (percents, fractions); those ``<= 0`` are
    dropped. With nothing left, ``pick`` returns ``None``.
    """

    __slots__ = ("targets", "_cumulative", "_rng")

    def __init__(self, weighted: Iterable[tuple[T, float]], *,
                 rng: random.Random | None = None) -> None:
        kept = [(target, float(weight)) for target, weight in weighted if weight > 0]
        self.targets: list[T] = [target for target, _ in kept]
        self._cumulative = list(itertools.accumulate(weight for _, weight in kept))
        self._rng = rng

    def __bool__(self) -> bool:
        return bool(self.targets)

    def pick(self) -> T | None:
        """One target, drawn with probability proportional to its weight."""
        if not self.targets:
            return None
        roll = (self._rng or random).random() * self._cumulative[-1]
        # random() < 1, so roll < total and the index stays in range
        return self.targets[bisect.bisect_right(self._cumulative, roll)]
