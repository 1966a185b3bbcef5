"""What a time budget holds, before and after the trials: the window tune measures with,
and what it says when the budget holds the current config alone."""

from __future__ import annotations

import pytest

from modelfn.tune.budget import SEARCH_TRIALS, held_only_the_current, plan, trial_s
from modelfn.tune.candidates import Candidate
from modelfn.tune.search import Measurement, Point, search

DEFAULT = (1, 8, 32)


def test_a_minute_at_the_default_levels_searches_with_shorter_windows() -> None:
    """The default levels and 3 s windows: a trial is 16.5 s with wrk, so a minute held the
    current config and stopped. 2 s windows hold it, a candidate and the confirming runs."""
    assert SEARCH_TRIALS * trial_s(DEFAULT, 3.0, 1.0, wrk=True) > 60
    planned = plan(60.0, DEFAULT, 3.0, 1.0, wrk=True, duration_given=False)
    assert planned.duration == 2.0
    assert SEARCH_TRIALS * trial_s(DEFAULT, planned.duration, 1.0, wrk=True) <= 60
    assert planned.note == ("--time-budget 1m holds a search only with shorter windows: "
                            "measuring with --duration 2s (not 3s)")


def test_a_window_the_user_gave_is_kept_and_the_budget_that_searches_is_said() -> None:
    planned = plan(60.0, DEFAULT, 3.0, 1.0, wrk=True, duration_given=True)
    assert planned.duration == 3.0
    assert planned.note == ("--time-budget 1m holds only the current config at -c 1,8,32 "
                            "--duration 3s: give at least 1m10s to search")


@pytest.mark.parametrize("wrk", [True, False])
def test_a_budget_that_holds_a_search_changes_nothing(wrk: bool) -> None:
    assert plan(600.0, DEFAULT, 3.0, 1.0, wrk=wrk, duration_given=False).note is None
    assert plan(60.0, (8,), 2.0, 1.0, wrk=wrk, duration_given=True).note is None


def test_not_even_the_shortest_window_fits() -> None:
    planned = plan(20.0, DEFAULT, 3.0, 1.0, wrk=False, duration_given=False)
    assert planned.duration == 3.0
    assert planned.note == ("--time-budget 20s holds only the current config at -c 1,8,32 "
                            "--duration 3s: give at least 1m to search")


def test_the_search_says_which_budget_its_trials_needed() -> None:
    """A model slower to load than the estimate: the search stops after the current config
    and says, from that trial, the budget that would have measured a candidate."""
    now = [0.0]

    def measure(candidate: Candidate) -> Measurement:
        now[0] += 40.0
        return Measurement(Candidate(1, None, 4, label="current", as_is=True),
                           (Point(8, 100.0, 1.0, 2.0),), ready_s=30.0)

    result = search(Candidate(label="current", as_is=True), measure, cores=1, levels=(8,),
                    time_budget_s=60.0, clock=lambda: now[0])
    assert result.stopped == "time budget" and len(result.measurements) == 1
    assert result.needed_s == 160.0 and result.longest_s == 40.0
    assert held_only_the_current(60.0, result.needed_s, result.longest_s) == (
        "--time-budget 1m held only the current config (a trial took 40s): give at least "
        "2m40s to search")
