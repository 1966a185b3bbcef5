"""The search: which candidates to measure, in what order, and which one wins.

Pure logic over a ``measure(candidate) -> Measurement`` callable, so it runs the same on
a real server and on a deterministic fake. The order follows what the issue measured by
hand: first the current config (with max_batch_size raised to the rows each request
carries, when it would refuse them all); then one instance with every core, doubling
``max_batch_size`` from 1 (from the rows each request carries, when that is more: a smaller
batch refuses every request) while rows/s at the highest concurrency still grows (allowing
one flat step, since one reading on a shared machine is noisy); then the
instance x thread splits of the same cores at the best batch; then a batching delay with
that batch as the preferred size. A model whose instances are on a GPU has no thread split:
2 to ``GPU_INSTANCES`` instances are tried instead (each overlaps its copies with another's
run). Its batches are padded (``padded_batch_sizes``: the CUDA provider re-plans on every
change of shape), and the doubling pads each batch size to a ladder of sizes
(``padded_sizes``) rather than the backend's default of 1 and the largest: measured on an
H200 (bench/RESULTS.md), batch 16 padded to 16 rows ran fewer rows/s at 8 clients than
batch 4, since every batch of 2-16 rows ran 16. The backend's default padding and none at all
are tried
last, at the best batch. Each step
starts only if the time budget still holds a trial as long as the longest so far, and two
more for the confirming runs at the end.
Ctrl-C ends the search with what was measured.

The winner at a concurrency is the candidate with the most rows/s whose p99 and memory
meet the budgets there; the one to write is the candidate that meets them at every
concurrency, is not slower than the current config at any, and has the most rows/s at the
highest, if it beats the current config by more than noise. A search told which
concurrency the function will serve (``optimize_for``) scores, caps the batch and writes
for that one alone: the others are still measured, and shown. Last, that candidate and the
current config are measured once more, in turn: the candidate is written only if each of its
two readings beats the current config's mean as it must, so one lucky window cannot carry it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, TypeVar

from modelfn.tune.candidates import Candidate

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

#: a batch size (or split, or delay) must beat the best so far by this factor to count
GROWTH = 1.05
_N = TypeVar("_N", int, float)
#: doublings in a row that may gain less than GROWTH before the doubling stops
PATIENCE = 1
#: the largest max_batch_size the doubling tries
MAX_BATCH = 64
#: batching delays tried with the best batch as the preferred size, microseconds
DELAYS_US = (1000, 5000)
#: the most instances of a model on a GPU the search tries
GPU_INSTANCES = 4


@dataclass(frozen=True, slots=True)
class Point:
    """What one concurrency level measured on one candidate."""

    concurrency: int
    rows_per_s: float
    p50_ms: float | None
    p99_ms: float | None
    errors: int = 0
    avg_batch: float | None = None
    #: the lower rows/s of the runs merged into this point (None: one run, ``rows_per_s``)
    low_rows_per_s: float | None = None
    #: the share of the window the model's instances spent running it (None: not counted)
    busy: float | None = None

    @property
    def low(self) -> float:
        return self.rows_per_s if self.low_rows_per_s is None else self.low_rows_per_s


@dataclass(frozen=True, slots=True)
class Measurement:
    """One candidate's server: its cold start, peak memory and each concurrency's point.
    ``error`` says why it could not be measured (it never wins)."""

    candidate: Candidate
    points: tuple[Point, ...] = ()
    ready_s: float | None = None
    rss_bytes: int | None = None
    error: str | None = None
    #: servers measured into it: a confirmed candidate is the mean of two
    runs: int = 1
    #: cores other processes used while it was measured (None: not known)
    foreign_cores: float | None = None
    #: the rows each request carried (the first dimension of its first input)
    rows_per_request: int = 1

    def at(self, concurrency: int) -> Point | None:
        return next((p for p in self.points if p.concurrency == concurrency), None)

    def rows_per_s(self, concurrency: int) -> float:
        point = self.at(concurrency)
        return 0.0 if point is None or self.error else point.rows_per_s

    def low_rows_per_s(self, concurrency: int) -> float:
        """The lowest rows/s any of its runs read at ``concurrency``."""
        point = self.at(concurrency)
        return 0.0 if point is None or self.error else point.low

    def merged(self, other: Measurement) -> Measurement:
        """Both runs of one candidate as one: mean rows/s (and the lower of the two), p50 and
        ready time, the worse p99 and RSS, every error."""
        points = []
        for p in self.points:
            q = other.at(p.concurrency)
            points.append(p if q is None else Point(
                p.concurrency, (p.rows_per_s + q.rows_per_s) / 2, _mean(p.p50_ms, q.p50_ms),
                _worst(p.p99_ms, q.p99_ms), p.errors + q.errors,
                _mean(p.avg_batch, q.avg_batch), min(p.low, q.low), _mean(p.busy, q.busy)))
        return Measurement(self.candidate, tuple(points), _mean(self.ready_s, other.ready_s),
                           _worst(self.rss_bytes, other.rss_bytes),
                           self.error or other.error, self.runs + other.runs,
                           _worst(self.foreign_cores, other.foreign_cores),
                           self.rows_per_request)


def _mean(a: float | None, b: float | None) -> float | None:
    return a if b is None else b if a is None else (a + b) / 2


def _worst(a: _N | None, b: _N | None) -> _N | None:
    return a if b is None else b if a is None else max(a, b)


def scored_level(levels: Sequence[int], optimize_for: int | None) -> int:
    """The level the config to write is scored at: ``optimize_for``, else the highest."""
    return optimize_for if optimize_for is not None else max(levels)


@dataclass(frozen=True, slots=True)
class Budgets:
    latency_ms: float | None = None  # p99
    memory_bytes: int | None = None  # peak RSS

    def met(self, m: Measurement, concurrency: int) -> bool:
        point = m.at(concurrency)
        if m.error or point is None or point.errors or point.p99_ms is None:
            return False
        if self.latency_ms is not None and point.p99_ms > self.latency_ms:
            return False
        return not (self.memory_bytes is not None and m.rss_bytes is not None
                    and m.rss_bytes > self.memory_bytes)


@dataclass(slots=True)
class SearchResult:
    baseline: Measurement | None
    measurements: list[Measurement]
    levels: tuple[int, ...]
    budgets: Budgets
    #: why the search ended early: "interrupted", "time budget", or None when complete
    stopped: str | None = None
    #: the choice was measured again: only measurements of more than one run may win it
    confirmed: bool = False
    #: the one concurrency the config to write is chosen for (None: every level)
    optimize_for: int | None = None
    #: the current config as it is, when its max_batch_size refused every request: the
    #: baseline is then that config with the batch raised to the rows per request
    refused: Measurement | None = None
    #: when the time budget stopped the search: the budget the next trial needed, and the
    #: longest trial so far, seconds
    needed_s: float | None = None
    longest_s: float = 0.0

    @property
    def top(self) -> int:
        return scored_level(self.levels, self.optimize_for)

    @property
    def rows_per_request(self) -> int:
        """The rows each request carried (every candidate got the same request)."""
        return self.measurements[0].rows_per_request if self.measurements else 1

    @property
    def decisive(self) -> tuple[int, ...]:
        """The levels where the config to write must meet the budgets and keep up."""
        return (self.optimize_for,) if self.optimize_for is not None else self.levels

    def best_at(self, concurrency: int) -> Measurement | None:
        """The most rows/s at ``concurrency`` among candidates within the budgets there."""
        fit = [m for m in self.measurements if self.budgets.met(m, concurrency)]
        return max(fit, key=lambda m: m.rows_per_s(concurrency), default=None)

    def chosen(self) -> Measurement | None:
        """The one config to write: within the budgets at every decisive level and, where
        the current config is within them too, no more than GROWTH slower than it at any;
        of those the most rows/s at ``top``. None when no candidate meets the budgets
        there. The current config stays unless another beats it by GROWTH: a smaller
        lead is noise, not a reason to change a config. A candidate measured more than once
        is held to that in every run: its lowest reading, not its mean, must beat the current
        config's mean, so one lucky window cannot make up for an unlucky one."""
        top, levels = self.top, self.decisive
        fit = [m for m in self.measurements
               if all(self.budgets.met(m, c) for c in levels)
               and (m.runs > 1 or not self.confirmed)]
        base = self.baseline
        if base is not None and base in fit:
            fit = [m for m in fit
                   if m is base or all(m.low_rows_per_s(c) * GROWTH >= base.rows_per_s(c)
                                       for c in levels)]
        best = max(fit, key=lambda m: m.rows_per_s(top), default=None)
        if (best is not None and base is not None and base in fit
                and best.low_rows_per_s(top) <= base.rows_per_s(top) * GROWTH):
            return base
        return best

    def chosen_for(self, concurrency: int) -> Measurement | None:
        """What ``chosen`` would be for a search told to serve ``concurrency`` alone
        (``--optimize-for``): the same one where that changes nothing."""
        return replace(self, optimize_for=concurrency).chosen()

    def held_back(self) -> tuple[Measurement, list[tuple[int, float]]] | None:
        """The candidate the guard held back, when the current config stays although another
        beat it by more than noise at ``top`` within the budgets everywhere, because that one
        was slower than noise allows at another level; with those levels and its lowest
        rows/s over the current config's there. None when nothing was held back. A candidate
        the confirming runs measured again is the one named: it passed on its first reading
        and lost on the second, which says more than the one fastest at ``top``."""
        base, top = self.baseline, self.top
        if base is None or self.chosen() is not base:
            return None
        fit = [m for m in self.measurements if m is not base
               and all(self.budgets.met(m, c) for c in self.decisive)]
        again = [m for m in fit if m.runs > 1]
        best = max(again or fit, key=lambda m: m.rows_per_s(top), default=None)
        if best is None or best.rows_per_s(top) <= base.rows_per_s(top) * GROWTH:
            return None
        losses = [(c, best.low_rows_per_s(c) / base.rows_per_s(c)) for c in self.decisive
                  if base.rows_per_s(c) > 0
                  and best.low_rows_per_s(c) * GROWTH < base.rows_per_s(c)]
        return (best, losses) if losses else None

    def gain(self, m: Measurement, concurrency: int) -> float | None:
        """``m``'s rows/s over the baseline's at ``concurrency`` (None without a baseline)."""
        base = 0.0 if self.baseline is None else self.baseline.rows_per_s(concurrency)
        return m.rows_per_s(concurrency) / base if base > 0 else None


class _OutOfTime(Exception):
    def __init__(self, needed_s: float) -> None:
        super().__init__(f"the next trial needs a time budget of {needed_s:.0f} s")
        self.needed_s = needed_s


@dataclass
class _Trials:
    """Measures each distinct candidate once, within the time budget."""

    measure: Callable[[Candidate], Measurement]
    cores: int
    time_budget_s: float | None
    clock: Callable[[], float]
    on_result: Callable[[Measurement], None] | None
    #: trials as long as the longest kept free for the confirming runs at the end
    reserve: int = 0
    started: float = 0.0
    longest: float = 0.0
    done: dict[tuple[object, ...], Measurement] = field(default_factory=dict)
    order: list[Measurement] = field(default_factory=list)

    def _key(self, c: Candidate) -> tuple[object, ...]:
        if c.as_is:  # its fields are known only once the server has completed the config
            return ("as is",)
        threads = c.threads if c.threads is not None else max(1, self.cores // c.instances)
        return (c.instances, threads, c.max_batch_size, c.delay_us, c.preferred, c.padded)

    def __call__(self, candidate: Candidate, *, always: bool = False) -> Measurement:
        key = self._key(candidate)
        if key in self.done:
            return self.done[key]
        needed = self.clock() - self.started + self.longest * (1 + self.reserve)
        if not always and self.time_budget_s is not None and needed > self.time_budget_s:
            raise _OutOfTime(needed)
        start = self.clock()
        result = self.measure(candidate)
        self.longest = max(self.longest, self.clock() - start)
        self.done[key] = result
        if candidate.as_is:  # what the baseline turned out to be: not measured again
            self.done.setdefault(self._key(replace(result.candidate, as_is=False)), result)
        self.order.append(result)
        if self.on_result is not None:
            self.on_result(result)
        return result

    def again(self, previous: Measurement) -> Measurement:
        """``previous``'s candidate measured once more, merged into it everywhere."""
        needed = self.clock() - self.started + self.longest
        if self.time_budget_s is not None and needed > self.time_budget_s:
            raise _OutOfTime(needed)
        merged = previous.merged(self.measure(previous.candidate))
        self.order[self.order.index(previous)] = merged
        for key, m in list(self.done.items()):
            if m is previous:
                self.done[key] = merged
        if self.on_result is not None:
            self.on_result(merged)
        return merged


def splits(cores: int) -> list[tuple[int, int]]:
    """Ways to share ``cores`` between instances: (instances, threads each), most threads
    first; one instance with every core is the first."""
    return [(k, cores // k) for k in range(1, cores + 1) if cores % k == 0]


def search(
    baseline: Candidate,
    measure: Callable[[Candidate], Measurement],
    *,
    cores: int,
    levels: Sequence[int],
    budgets: Budgets | None = None,
    time_budget_s: float | None = None,
    max_batch: int = MAX_BATCH,
    delays_us: Sequence[int] = DELAYS_US,
    clock: Callable[[], float] = time.monotonic,
    on_result: Callable[[Measurement], None] | None = None,
    confirm: bool = True,
    optimize_for: int | None = None,
) -> SearchResult:
    """Measure ``baseline``, then the steps above while time is left; see the module doc.

    ``max_batch`` caps the doubling (a closed loop of c one-row clients never forms a batch
    over c, so the concurrency scored at caps it too). Requests of R rows (the baseline's
    ``rows_per_request``) double from R, to at most ``max_batch`` or R, whichever is more,
    and c x R. ``baseline`` is always measured.
    ``optimize_for``, one of ``levels``: the concurrency to score and choose at alone.
    """
    levels = tuple(sorted(set(levels)))
    if optimize_for is not None and optimize_for not in levels:
        raise ValueError(f"optimize_for {optimize_for} is not one of the levels {levels}")
    trials = _Trials(measure, cores, time_budget_s, clock, on_result,
                     reserve=2 if confirm else 0)
    trials.started = clock()
    result = SearchResult(None, trials.order, levels, budgets or Budgets(),
                          optimize_for=optimize_for)
    top = result.top

    def score(m: Measurement) -> float:
        return m.rows_per_s(top)

    try:
        result.baseline = trials(baseline, always=True)
        if refuses_the_requests(result.baseline):
            # the least change that serves these clients is the bar, as a user would set it
            result.refused, rows = result.baseline, result.baseline.rows_per_request
            result.baseline = trials(replace(
                result.baseline.candidate, max_batch_size=rows, as_is=False,
                label=f"current, batch {rows}"), always=True)
        gpu = result.baseline.candidate.gpu
        if result.baseline.candidate.max_batch_size == 0:
            # the model does not batch (or its config says so): only splits can help
            best = result.baseline
        else:
            rows = result.baseline.rows_per_request
            cap = min(max(max_batch, rows), rows * _pow2_ceil(top))
            best = _double_batch(trials, cores, rows, cap, score, gpu=gpu)
            if score(result.baseline) > score(best):  # the current batching beat them all
                best = result.baseline
        shares = ([(n, None) for n in range(2, GPU_INSTANCES + 1)] if gpu
                  else splits(cores)[1:])
        for instances, threads in shares:
            m = trials(replace(best.candidate, instances=instances, threads=threads,
                               label=f"{instances} instances", as_is=False))
            if score(m) > score(best) * GROWTH:
                best = m
        batch = best.candidate.max_batch_size
        if gpu and batch > 1:
            tried = {_padding(best.candidate)}
            for padded in ("none", None, padded_sizes(batch)):
                candidate = replace(best.candidate, padded=padded, as_is=False,
                                    label=f"padded {padded or 'default'}")
                if _padding(candidate) in tried:
                    continue
                tried.add(_padding(candidate))
                m = trials(candidate)
                if score(m) > score(best) * GROWTH:
                    best = m
        if batch > 1:
            for delay in delays_us:
                m = trials(replace(best.candidate, delay_us=delay, preferred=(batch,),
                                   label=f"delay {delay} us", as_is=False))
                if score(m) > score(best) * GROWTH:
                    best = m
    except _OutOfTime as exc:
        result.stopped, result.needed_s = "time budget", exc.needed_s
    except KeyboardInterrupt:
        result.stopped = "interrupted"
        return result
    finally:
        result.longest_s = trials.longest
    if confirm:  # the reserve keeps time for it when the budget ended the search
        try:
            _confirm(trials, result)
        except _OutOfTime:
            pass
        except KeyboardInterrupt:
            result.stopped = "interrupted"
    return result


def refuses_the_requests(m: Measurement) -> bool:
    """``m``'s server started but its max_batch_size is below the rows each request
    carries: it would refuse every one (``measure`` says so instead of loading it)."""
    return (m.error is not None and m.ready_s is not None
            and 0 < m.candidate.max_batch_size < m.rows_per_request)


def _confirm(trials: _Trials, result: SearchResult) -> None:
    """Measure the current config and the one to write once more, in turn, and choose
    between these two only: on a shared machine one window can be a lucky or an unlucky
    one, and a candidate read once does not replace them (``chosen`` then holds the
    candidate to both of its readings)."""
    chosen = result.chosen()
    if (chosen is None or result.baseline is None or chosen is result.baseline
            or result.baseline.error):  # a current config that cannot serve is no bar
        return
    result.baseline = trials.again(result.baseline)
    trials.again(chosen)
    result.confirmed = True  # these two decide, on two readings each


def padded_sizes(batch: int) -> str:
    """More sizes to pad to than the default (1 and ``batch``): a quarter and half of it."""
    return ",".join(str(n) for n in sorted({1, batch // 4, batch // 2, batch} - {0}))


def _ladder(batch: int) -> str | None:
    """The padding the doubling gives ``batch`` on a GPU: ``padded_sizes``, or the backend's
    default where that is the same (batch 1 or 2)."""
    return padded_sizes(batch) if batch > 2 else None


def _padding(candidate: Candidate) -> str:
    """The sizes ``candidate``'s sessions really pad to, for telling candidates apart: the
    backend's default (None) is 1 and ``max_batch_size``."""
    if candidate.padded is not None:
        return candidate.padded
    return ",".join(str(n) for n in sorted({1, candidate.max_batch_size}))


def _double_batch(trials: _Trials, cores: int, first: int, cap: int,
                  score: Callable[[Measurement], float], *, gpu: bool = False) -> Measurement:
    """One instance with every core; batch ``first``, twice that, ... until PATIENCE + 1
    doublings in a row gain less than GROWTH (one flat step on a noisy machine does not end
    it), or one fails to serve (a bigger batch would not serve either). On a GPU the
    threads stay the backend's own (they do not run the model there), and each batch size
    pads to its ladder of sizes."""
    best: Measurement | None = None
    flat = 0
    batch = first
    while batch <= cap:
        m = trials(Candidate(1, None if gpu else cores, batch, label=f"batch {batch}",
                             gpu=gpu, padded=_ladder(batch) if gpu else None))
        if m.error:
            return best or m
        if best is None or score(m) > score(best) * GROWTH:
            best, flat = m, 0
        else:
            best = m if score(m) > score(best) else best
            flat += 1
            if flat > PATIENCE:
                break
        batch *= 2
    assert best is not None
    return best


def _pow2_ceil(n: int) -> int:
    power = 1
    while power < n:
        power *= 2
    return power
