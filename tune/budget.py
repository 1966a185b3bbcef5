"""What a ``--time-budget`` holds, told before the first server starts.

``search`` starts a candidate only if the budget still holds a trial as long as the longest
so far, and two more for the confirming runs: a search that measures anything besides the
current config needs ``SEARCH_TRIALS`` trials. A trial starts a server, then loads it at
each level for the warm-up and the window (wrk runs whole seconds, and one more so the
window ends under load), then stops it. Where the windows are tune's default and a shorter
one fits such a search, tune measures with that; else it says up front which budget would
search. A model that loads slowly makes a trial longer than this estimate: the search then
says, from its real trials, which budget it needed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from modelfn.tune.units import format_duration

if TYPE_CHECKING:
    from collections.abc import Sequence

#: the current config, one candidate and the two confirming runs
SEARCH_TRIALS = 4
#: seconds a trial takes besides its levels' load: writing the repository, starting and
#: stopping the server (a small model such as digits is ready in under a second)
TRIAL_START_S = 1.5
#: seconds each level takes besides its warm-up and window: starting the load generator,
#: reading the server's statistics
LEVEL_START_S = 0.3
#: the shortest window tune shortens its default to
SHORTEST_WINDOW_S = 1.0


def level_s(duration: float, warmup: float, *, wrk: bool) -> float:
    """Seconds one level's load takes: wrk runs whole seconds, and one more."""
    if wrk:
        return max(1, math.ceil(warmup)) + max(1, math.ceil(duration)) + 1 + LEVEL_START_S
    return warmup + duration + LEVEL_START_S


def trial_s(levels: Sequence[int], duration: float, warmup: float, *, wrk: bool) -> float:
    """Seconds one candidate's trial takes, at the least."""
    return TRIAL_START_S + len(levels) * level_s(duration, warmup, wrk=wrk)


def search_budget(levels: Sequence[int], duration: float, warmup: float, *,
                  wrk: bool) -> float:
    """The smallest time budget that measures a candidate besides the current config,
    rounded up to what a user would type (10 s, or a minute above 10 minutes)."""
    return round_up(SEARCH_TRIALS * trial_s(levels, duration, warmup, wrk=wrk))


def round_up(seconds: float) -> float:
    step = 60 if seconds > 600 else 10
    return float(math.ceil(seconds / step) * step)


@dataclass(frozen=True, slots=True)
class Plan:
    """The window to measure with, and what to tell the user about the budget (None:
    nothing, it holds a search with the windows asked for)."""

    duration: float
    note: str | None = None


def plan(time_budget: float, levels: Sequence[int], duration: float, warmup: float, *,
         wrk: bool, duration_given: bool) -> Plan:
    """The window for a search within ``time_budget``: ``duration``, where the budget holds
    a search with it; else, when the user left ``duration`` at its default, the longest
    whole number of seconds down to SHORTEST_WINDOW_S that fits one; else ``duration``
    and a note that the budget measures the current config alone, with the least budget
    that would search."""
    def fits(window: float) -> bool:
        return SEARCH_TRIALS * trial_s(levels, window, warmup, wrk=wrk) <= time_budget

    if fits(duration):
        return Plan(duration)
    budget = format_duration(time_budget)
    if not duration_given:
        window = float(math.ceil(duration) - 1)
        while window >= SHORTEST_WINDOW_S:
            if fits(window):
                return Plan(window, f"--time-budget {budget} holds a search only with "
                                    f"shorter windows: measuring with --duration "
                                    f"{format_duration(window)} (not "
                                    f"{format_duration(duration)})")
            window -= 1
    at = f"-c {','.join(map(str, levels))} --duration {format_duration(duration)}"
    need = format_duration(search_budget(levels, duration, warmup, wrk=wrk))
    return Plan(duration, f"--time-budget {budget} holds only the current config at {at}: "
                          f"give at least {need} to search")


def held_only_the_current(time_budget: float, needed_s: float, longest_s: float) -> str:
    """What a search that the budget stopped after the current config says, from the
    trials it measured."""
    return (f"--time-budget {format_duration(time_budget)} held only the current config (a "
            f"trial took {format_duration(round(longest_s))}): give at least "
            f"{format_duration(round_up(needed_s))} to search")
