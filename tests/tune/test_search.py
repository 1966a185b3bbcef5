"""The search over a deterministic measurement function: what it tries, and who wins."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import pytest

from modelfn.tune.candidates import Candidate
from modelfn.tune.search import Budgets, Measurement, Point, SearchResult, search, splits

if TYPE_CHECKING:
    from collections.abc import Callable

LEVELS = (1, 8, 32)


class Fake:
    """rows/s from a table of (instances, threads, batch, delay); p99 grows with batch."""

    def __init__(self, rows: Callable[[Candidate], float], rss: int = 100 << 20,
                 rows_per_request: int = 1) -> None:
        self.rows = rows
        self.rss = rss
        self.rows_per_request = rows_per_request
        self.tried: list[Candidate] = []

    def __call__(self, candidate: Candidate) -> Measurement:
        self.tried.append(candidate)
        if candidate.as_is:  # the server reports the completed config: Triton's defaults
            candidate = replace(Candidate(1, None, 4), label="current", as_is=True)
        rate = self.rows(candidate)
        points = tuple(Point(c, rate * min(c, 32) / 32, 1.0, 2.0 * candidate.max_batch_size)
                       for c in LEVELS)
        return Measurement(candidate, points, ready_s=0.5, rss_bytes=self.rss,
                           rows_per_request=self.rows_per_request)


def saturating(candidate: Candidate) -> float:
    """Throughput that grows with batch up to 8, then stays flat."""
    return 100.0 * min(candidate.max_batch_size, 8)


def current() -> Candidate:
    return Candidate(label="current", as_is=True)


def test_doubles_batch_until_throughput_stops_growing() -> None:
    fake = Fake(saturating)
    result = search(current(), fake, cores=1, levels=LEVELS, delays_us=(), confirm=False)
    batches = [c.max_batch_size for c in fake.tried if not c.as_is]
    # 4 is the current config: measured once, not twice; 16 and 32 gain nothing: stop
    assert batches == [1, 2, 8, 16, 32]
    assert result.chosen() is not None
    assert result.chosen().candidate.max_batch_size == 8  # type: ignore[union-attr]
    assert result.stopped is None


def test_batch_is_capped_by_the_highest_concurrency() -> None:
    fake = Fake(lambda c: 100.0 * c.max_batch_size)  # grows forever
    search(current(), fake, cores=1, levels=(1, 4), delays_us=(), max_batch=64)
    assert max(c.max_batch_size for c in fake.tried) == 4


def test_requests_of_several_rows_double_the_batch_from_their_rows() -> None:
    """A batch below the rows a request carries refuses every request: the doubling starts
    at those rows, and the cap is what c such clients can form."""
    fake = Fake(lambda c: 100.0 * c.max_batch_size, rows_per_request=3)  # grows forever
    result = search(current(), fake, cores=1, levels=LEVELS, delays_us=(), confirm=False)
    assert [c.max_batch_size for c in fake.tried if not c.as_is] == [3, 6, 12, 24, 48]
    assert result.rows_per_request == 3
    fake = Fake(lambda c: 100.0 * c.max_batch_size, rows_per_request=32)
    search(current(), fake, cores=1, levels=(1, 2), delays_us=(), max_batch=16)
    # --max-batch below the rows: the rows themselves, no more
    assert [c.max_batch_size for c in fake.tried if not c.as_is] == [32]
    fake = Fake(lambda c: 100.0 * c.max_batch_size, rows_per_request=32)
    search(current(), fake, cores=1, levels=(1, 2), delays_us=(), max_batch=1024)
    # two clients of 32 rows form at most 64
    assert [c.max_batch_size for c in fake.tried if not c.as_is] == [32, 64]


def test_a_current_config_that_refuses_the_requests_is_compared_with_its_batch_raised(
        ) -> None:
    """The current config's batch (4) is below the rows per request (8): the bar is that
    config with max_batch_size 8, the least change that serves, which the doubling does not
    measure again; every candidate is held to it as to a current config."""
    fake = Fake(lambda c: 100.0 * min(c.max_batch_size, 16), rows_per_request=8)

    def measure(c: Candidate) -> Measurement:
        m = fake(c)
        if c.as_is:  # the server started, then was found to refuse every request
            return Measurement(m.candidate, ready_s=0.5, rows_per_request=8,
                               error="max_batch_size 4 refuses every request")
        return m

    result = search(current(), measure, cores=1, levels=LEVELS, delays_us=(), confirm=False)
    assert result.refused is not None and result.refused.candidate.max_batch_size == 4
    assert result.baseline is not None and not result.baseline.error
    assert result.baseline.candidate.max_batch_size == 8
    assert result.baseline.candidate.label == "current, batch 8"
    assert [c.max_batch_size for c in fake.tried if not c.as_is] == [8, 16, 32, 64]
    chosen = result.chosen()
    assert chosen is not None and chosen.candidate.max_batch_size == 16
    assert result.gain(chosen, 32) == pytest.approx(2.0)


def test_a_current_config_that_does_not_start_is_not_raised() -> None:
    """A server that never got ready is a failure, not a batch too small: no bar, nothing
    to confirm against, and the current config is not measured again."""
    fake = Fake(saturating, rows_per_request=8)

    def measure(c: Candidate) -> Measurement:
        m = fake(c)
        if c.as_is:
            return Measurement(m.candidate, error="the server exited with code 1",
                               rows_per_request=8)
        return m

    result = search(current(), measure, cores=1, levels=LEVELS, delays_us=())
    assert result.refused is None and result.baseline is not None and result.baseline.error
    chosen = result.chosen()
    assert chosen is not None and chosen.candidate.max_batch_size == 8
    assert result.gain(chosen, 32) is None
    assert sum(c.as_is for c in fake.tried) == 1 and not result.confirmed


def test_tries_instance_and_thread_splits_of_the_same_cores() -> None:
    assert splits(4) == [(1, 4), (2, 2), (4, 1)]
    assert splits(1) == [(1, 1)]

    def rows(c: Candidate) -> float:  # two single-thread instances beat one with two threads
        return saturating(c) * (1.5 if c.instances == 2 else 1.0)

    fake = Fake(rows)
    result = search(current(), fake, cores=2, levels=LEVELS, delays_us=())
    chosen = result.chosen()
    assert chosen is not None
    assert (chosen.candidate.instances, chosen.candidate.threads) == (2, 1)
    assert chosen.candidate.max_batch_size == 8


def test_splits_start_from_the_current_config_when_it_beat_the_doubling() -> None:
    def measure(c: Candidate) -> Measurement:
        if c.as_is:
            c = replace(Candidate(1, None, 64), as_is=True)
        rate = 1000.0 if c.max_batch_size == 64 else 100.0
        return Measurement(c, (Point(32, rate, 1.0, 2.0),))

    result = search(current(), measure, cores=2, levels=(32,), delays_us=())
    split = result.measurements[-1].candidate
    assert (split.instances, split.threads, split.max_batch_size) == (2, 1, 64)


def test_tries_delays_with_the_best_batch_as_preferred() -> None:
    fake = Fake(lambda c: saturating(c) * (1.2 if c.delay_us == 5000 else 1.0))
    result = search(current(), fake, cores=1, levels=LEVELS, delays_us=(1000, 5000),
                    confirm=False)
    delayed = [c for c in fake.tried if c.delay_us]
    assert [(c.delay_us, c.preferred) for c in delayed] == [(1000, (8,)), (5000, (8,))]
    assert result.chosen().candidate.delay_us == 5000  # type: ignore[union-attr]


def test_a_gain_must_exceed_noise_to_count() -> None:
    fake = Fake(lambda c: 1000.0 + c.max_batch_size)  # +0.1% per step: noise
    search(current(), fake, cores=1, levels=LEVELS, delays_us=())
    assert [c.max_batch_size for c in fake.tried if not c.as_is] == [1, 2]  # and 4, current


def test_one_flat_step_does_not_end_the_doubling() -> None:
    rates = {1: 100.0, 2: 101.0, 4: 200.0, 8: 300.0, 16: 300.0, 32: 300.0}
    fake = Fake(lambda c: rates[c.max_batch_size])
    result = search(current(), fake, cores=1, levels=LEVELS, delays_us=(), confirm=False)
    assert [c.max_batch_size for c in fake.tried if not c.as_is] == [1, 2, 8, 16, 32]
    assert result.best_at(32).candidate.max_batch_size == 8  # type: ignore[union-attr]


def test_the_current_config_stays_unless_beaten_by_more_than_noise() -> None:
    fake = Fake(lambda c: 1000.0 if c.max_batch_size == 4 else 1030.0)  # +3%: noise
    result = search(current(), fake, cores=1, levels=LEVELS, delays_us=())
    assert result.chosen() is result.baseline
    assert result.best_at(32) is not result.baseline  # the table still shows the fastest


def test_a_winner_at_the_top_that_loses_below_is_not_written() -> None:
    def rows(c: Candidate) -> float:  # a delay: more at c=32 only
        return saturating(c) * (1.5 if c.delay_us else 1.0)

    def measure(c: Candidate) -> Measurement:
        m = Fake(rows)(c)
        if not c.delay_us:
            return m
        slow = tuple(replace(p, rows_per_s=p.rows_per_s / 10) if p.concurrency == 1 else p
                     for p in m.points)
        return replace(m, points=slow)

    result = search(current(), measure, cores=1, levels=LEVELS)
    assert result.best_at(32).candidate.delay_us  # type: ignore[union-attr]
    assert result.chosen().candidate.delay_us == 0  # type: ignore[union-attr]


def test_optimize_for_one_level_writes_its_winner_even_if_slower_elsewhere() -> None:
    """The delay of the test above, searched for c=8 alone: it is written, and the batch
    doubling is capped by 8, not by the higher level that is only shown."""
    def measure(c: Candidate) -> Measurement:
        m = Fake(lambda c: 100.0 * c.max_batch_size * (1.5 if c.delay_us else 1.0))(c)
        if not c.delay_us:
            return m
        return replace(m, points=tuple(replace(p, rows_per_s=p.rows_per_s / 100)
                                       if p.concurrency == 1 else p for p in m.points))

    everywhere = search(current(), measure, cores=1, levels=LEVELS)
    assert everywhere.chosen().candidate.delay_us == 0  # type: ignore[union-attr]
    result = search(current(), measure, cores=1, levels=LEVELS, optimize_for=8)
    chosen = result.chosen()
    assert chosen is not None and chosen.candidate.delay_us
    assert chosen.candidate.max_batch_size == 8 == result.top
    assert result.decisive == (8,)
    assert max(m.candidate.max_batch_size for m in result.measurements) == 8
    with pytest.raises(ValueError, match="optimize_for 16 is not one of the levels"):
        search(current(), measure, cores=1, levels=LEVELS, optimize_for=16)


def _confirmed_search(second_reading: float) -> SearchResult:
    """A search where batch 8 reads 800 rows/s at c=32 first and ``second_reading`` x that
    when it is confirmed; the current config (batch 4) reads 400 both times."""
    draws: dict[int, int] = {}

    def measure(c: Candidate) -> Measurement:
        m = Fake(saturating)(c)
        batch = m.candidate.max_batch_size
        draws[batch] = draws.get(batch, 0) + 1
        if batch == 8 and draws[batch] == 2:
            return replace(m, points=tuple(replace(p, rows_per_s=p.rows_per_s * second_reading)
                                           for p in m.points))
        return m

    result = search(current(), measure, cores=1, levels=LEVELS, delays_us=())
    assert draws[4] == 2 and draws[8] == 2
    return result


def test_confirm_measures_current_and_chosen_again_and_keeps_both_readings() -> None:
    result = _confirmed_search(0.75)
    confirmed = [m for m in result.measurements if m.runs == 2]
    assert [m.candidate.max_batch_size for m in confirmed] == [4, 8]
    assert result.baseline is confirmed[0]
    assert confirmed[1].rows_per_s(32) == pytest.approx((800 + 600) / 2)
    assert confirmed[1].low_rows_per_s(32) == pytest.approx(600)
    # batch 16 read 800 once, but only the two measured twice decide: 600 beats 400 x 1.05
    assert result.chosen() is confirmed[1]


def test_a_lucky_first_reading_does_not_carry_a_candidate() -> None:
    # batch 8's first window read 800, its second 200: the mean (500) beats the current
    # config's 400, but one of its runs was half as fast, so the current config stays
    result = _confirmed_search(0.25)
    assert result.chosen() is result.baseline


def test_latency_budget_picks_the_fastest_within_it() -> None:
    fake = Fake(saturating)  # p99 = 2 ms x batch
    result = search(current(), fake, cores=1, levels=LEVELS, delays_us=(),
                    budgets=Budgets(latency_ms=9.0))
    assert result.chosen().candidate.max_batch_size == 4  # type: ignore[union-attr]
    assert result.best_at(32).candidate.max_batch_size == 4  # type: ignore[union-attr]


def test_no_candidate_within_budgets_chooses_none() -> None:
    fake = Fake(saturating, rss=2 << 30)
    result = search(current(), fake, cores=1, levels=LEVELS, delays_us=(),
                    budgets=Budgets(memory_bytes=1 << 30))
    assert result.chosen() is None
    assert result.best_at(1) is None
    assert result.baseline is not None and result.measurements


def test_a_failed_candidate_never_wins_and_ends_the_doubling() -> None:
    def measure(c: Candidate) -> Measurement:
        if c.max_batch_size == 2:
            return Measurement(c, error="exited with code 1")
        return Fake(saturating)(c)

    result = search(current(), measure, cores=1, levels=LEVELS, delays_us=())
    assert all(m.candidate.max_batch_size != 2 for m in [result.chosen()] if m)
    assert [m.candidate.max_batch_size for m in result.measurements] == [4, 1, 2]


def test_gain_is_against_the_current_config() -> None:
    result = search(current(), Fake(saturating), cores=1, levels=LEVELS, delays_us=())
    chosen = result.chosen()
    assert chosen is not None
    assert result.gain(chosen, 32) == pytest.approx(2.0)  # batch 8 vs the current 4


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_time_budget_stops_before_a_trial_that_would_not_fit() -> None:
    clock = Clock()
    fake = Fake(saturating)

    def measure(c: Candidate) -> Measurement:
        clock.now += 10.0
        return fake(c)

    result = search(current(), measure, cores=1, levels=LEVELS, time_budget_s=35.0,
                    clock=clock, confirm=False)
    assert len(result.measurements) == 3  # at 30 s, a fourth 10 s trial would end at 40 s
    assert result.stopped == "time budget"


def test_the_time_budget_keeps_room_to_confirm_the_choice() -> None:
    clock = Clock()
    fake = Fake(lambda c: 1000.0 if c.max_batch_size == 1 else 100.0)

    def measure(c: Candidate) -> Measurement:
        clock.now += 10.0
        return fake(c)

    result = search(current(), measure, cores=1, levels=LEVELS, time_budget_s=45.0,
                    clock=clock)
    # 2 trials, then a third would leave no room for two confirming runs: 20 + 3 x 10 > 45
    assert result.stopped == "time budget"
    assert [m.runs for m in result.measurements] == [2, 2]
    assert result.confirmed and clock.now == 40.0
    assert result.chosen().candidate.max_batch_size == 1  # type: ignore[union-attr]


def test_interrupt_keeps_what_was_measured() -> None:
    fake = Fake(saturating)

    def measure(c: Candidate) -> Measurement:
        if len(fake.tried) == 2:
            raise KeyboardInterrupt
        return fake(c)

    result = search(current(), measure, cores=1, levels=LEVELS)
    assert result.stopped == "interrupted"
    assert [m.candidate.max_batch_size for m in result.measurements] == [4, 1]
    assert result.chosen() is not None


def test_a_model_that_does_not_batch_skips_the_doubling() -> None:
    def measure(c: Candidate) -> Measurement:
        if c.as_is:
            c = replace(Candidate(1, None, 0), as_is=True)
        return Measurement(c, (Point(32, 10.0, 1.0, 2.0),))

    tried: list[Candidate] = []

    def record(c: Candidate) -> Measurement:
        tried.append(c)
        return measure(c)

    result = search(current(), record, cores=2, levels=(32,))
    assert [(c.instances, c.max_batch_size) for c in tried[1:]] == [(2, 0)]
    assert result.stopped is None


def test_same_inputs_same_search() -> None:
    runs = [[c.key for c in _tried(search_once())] for _ in range(2)]
    assert runs[0] == runs[1]


def search_once() -> Fake:
    fake = Fake(lambda c: saturating(c) * (1.1 if c.instances == 2 else 1.0))
    search(current(), fake, cores=2, levels=LEVELS)
    return fake


def _tried(fake: Fake) -> list[Candidate]:
    return fake.tried



def test_a_model_on_a_gpu_tries_instances_and_padding_not_thread_splits() -> None:
    """Threads do not run a model on a GPU: the search doubles the batch with each size
    padded to its ladder of sizes, tries 2..GPU_INSTANCES instances with the backend's
    threads, then the backend's default padding (1 and the batch) and none at all."""
    # 3 is within noise of 2: the steps after go on from 2, but the most rows/s wins
    instance_gain = {1: 1.0, 2: 1.3, 3: 1.35, 4: 1.1}

    def padding_gain(c: Candidate) -> float:
        if c.padded == "none":  # every new shape re-plans the model
            return 0.1
        if c.padded is None and c.max_batch_size > 2:  # a batch of 2 runs 8 rows
            return 0.7
        return 1.0

    def rows(c: Candidate) -> float:
        return saturating(c) * instance_gain[c.instances] * padding_gain(c)

    class OnGpu(Fake):
        def __call__(self, candidate: Candidate) -> Measurement:
            if candidate.as_is:
                self.tried.append(candidate)
                served = Candidate(1, None, 4, label="current", as_is=True, gpu=True)
                return replace(super().__call__(replace(served, as_is=False)),
                               candidate=served)
            return super().__call__(candidate)

    fake = OnGpu(rows)
    result = search(current(), fake, cores=8, levels=LEVELS, delays_us=(), confirm=False)
    measured = [c for c in fake.tried if not c.as_is]
    assert all(c.gpu and c.threads is None for c in measured)
    assert sorted({c.instances for c in measured}) == [1, 2, 3, 4]
    doubling = [(c.max_batch_size, c.padded) for c in measured if c.label.startswith("batch")]
    assert doubling == [(1, None), (2, None), (4, "1,2,4"), (8, "1,2,4,8"), (16, "1,4,8,16"),
                        (32, "1,8,16,32")]
    padding = [(c.instances, c.max_batch_size, c.padded) for c in measured
               if c.label.startswith("padded")]
    assert padding == [(2, 8, "none"), (2, 8, None)]  # the ladder was measured already
    assert len({c.key for c in measured}) == len(measured)
    chosen = result.chosen()
    assert chosen is not None
    assert (chosen.candidate.instances, chosen.candidate.max_batch_size,
            chosen.candidate.padded) == (3, 8, "1,2,4,8")
    assert chosen.candidate.describe() == "3 GPU instances, batch 8, padded 1,2,4,8"


def test_padding_alternatives_skip_what_the_best_already_pads_to() -> None:
    """A best batch of 2 pads to 1 and 2 both ways: only "none" is left to try."""
    class OnGpu(Fake):
        def __call__(self, candidate: Candidate) -> Measurement:
            return super().__call__(replace(candidate, gpu=True))

    def rows(c: Candidate) -> float:
        return 100.0 * min(c.max_batch_size, 2) * (0.1 if c.padded == "none" else 1.0)

    fake = OnGpu(rows)
    search(Candidate(1, None, 2, label="current", gpu=True), fake, cores=1, levels=LEVELS,
           delays_us=(), confirm=False)
    assert [c.padded for c in fake.tried if c.label.startswith("padded")] == ["none"]
