"""The report files and the comment --write records, from a search over a fake."""

from __future__ import annotations

import csv
import importlib.util
import json
from dataclasses import replace
from typing import TYPE_CHECKING

from rich.console import Console

from modelfn.tune.candidates import Candidate
from modelfn.tune.report import (
    candidates_table,
    held_back_note,
    measurement_comment,
    noise_warning,
    summary_table,
    write_report,
)
from modelfn.tune.search import Budgets, Measurement, Point, SearchResult, search

if TYPE_CHECKING:
    from pathlib import Path


def result() -> SearchResult:
    def measure(c: Candidate) -> Measurement:
        if c.as_is:
            c = Candidate(1, None, 4, label="current", as_is=True)
        rate = 100.0 * min(c.max_batch_size, 8)
        busy = 0.12 * min(c.max_batch_size, 8)  # 96% at batch 8
        return Measurement(c, (Point(1, rate / 4, 1.0, 2.0),
                               Point(8, rate, 3.0, 6.0, 0, 4.0, busy=busy)),
                           ready_s=0.7, rss_bytes=90 << 20)

    return search(Candidate(label="current", as_is=True), measure, cores=1, levels=(1, 8),
                  delays_us=())


def test_report_files(tmp_path: Path) -> None:
    lines = write_report(result(), tmp_path, client="wrk")
    doc = json.loads((tmp_path / "tune.json").read_text())
    assert doc["client"] == "wrk"
    assert doc["levels"] == [1, 8]
    assert doc["rows_per_request"] == 1
    assert doc["chosen"]["candidate"]["max_batch_size"] == 8
    rows = list(csv.DictReader((tmp_path / "tune.csv").read_text().splitlines()))
    assert len(rows) == 2 * len(doc["measurements"])
    assert sum(r["chosen"] == "True" for r in rows) == 2
    if importlib.util.find_spec("matplotlib") is None:
        assert "pip install 'modelfn[plot]'" in lines[-1]
    else:
        assert (tmp_path / "tune.png").read_bytes()[:4] == b"\x89PNG"


def _text(*tables: object) -> str:
    console = Console(width=200, record=True)
    for table in tables:
        console.print(table)
    return console.export_text()


def test_tables_show_current_chosen_and_gain() -> None:
    text = _text(summary_table(result()), candidates_table(result()))
    assert "current: 1xauto threads, batch 4" in text
    assert "chosen: 1x1 threads, batch 8" in text
    assert "2.00x" in text
    assert "1x1 threads, batch 8 (mean of 2) *" in text
    # in model at c=8: the current config's 48%, the best's 96% (the mean of its two runs)
    assert "48%" in text and "96%" in text


def test_comment_records_the_measurement() -> None:
    searched = result()
    chosen = searched.chosen()
    assert chosen is not None
    text = measurement_comment(searched, chosen, "2026-11-23 12:00 UTC", "x86_64, 1 core")
    assert text.splitlines() == [
        "Tuned by modelfn tune on 2026-11-23 12:00 UTC (x86_64, 1 core): "
        "1x1 threads, batch 8.",
        "c=1: 200.0 rows/s, p99 2.00 ms, 2.00x the previous config",
        "c=8: 800.0 rows/s, p99 6.00 ms, 2.00x the previous config",
        "ready in 0.70 s; peak RSS 90 MiB",
    ]


def test_comment_names_the_concurrency_it_was_chosen_for() -> None:
    searched = replace(result(), optimize_for=8)
    chosen = searched.chosen()
    assert chosen is not None
    text = measurement_comment(searched, chosen, "2026-11-23 12:00 UTC", "x86_64, 1 core")
    assert text.splitlines()[0].endswith("1x1 threads, batch 8, chosen for c=8.")


def test_requests_of_several_rows_are_recorded() -> None:
    searched = result()
    searched.measurements[:] = [replace(m, rows_per_request=16) for m in searched.measurements]
    chosen = searched.chosen()
    assert chosen is not None
    text = measurement_comment(searched, chosen, "2026-11-23 12:00 UTC", "x86_64, 1 core")
    assert text.splitlines()[0].startswith(
        "Tuned by modelfn tune on 2026-11-23 12:00 UTC (x86_64, 1 core, requests of 16 rows)")
    assert "refused" not in text
    searched.refused = Measurement(Candidate(1, None, 4, as_is=True), error="refuses",
                                   ready_s=0.5, rows_per_request=16)
    text = measurement_comment(searched, chosen, "2026-11-23 12:00 UTC", "x86_64, 1 core")
    assert text.splitlines()[1] == ("The previous config's max_batch_size 4 refused every "
                                    "request; the gains are against it with max_batch_size 16.")


def test_noise_warning_names_the_foreign_cpu() -> None:
    quiet = result()
    assert noise_warning(quiet) is None  # not measured: nothing to warn about
    noisy = SearchResult(quiet.baseline, [replace(m, foreign_cores=0.6)
                                          for m in quiet.measurements], quiet.levels,
                         quiet.budgets)
    warning = noise_warning(noisy)
    assert warning is not None and "60% of a core" in warning


def _gpu_run(optimize_for: int | None = None) -> SearchResult:
    """Two readings from an H200 run: batch 16 beat batch 4 at c=32 but lost at c=8."""
    def measured(batch: int, rows: tuple[float, float, float], **kw: object) -> Measurement:
        points = tuple(Point(c, r, 1.0, 2.0) for c, r in zip((1, 8, 32), rows, strict=True))
        return Measurement(Candidate(1, None, batch, gpu=True, **kw),  # type: ignore[arg-type]
                           points, ready_s=1.5, rss_bytes=900 << 20)

    base = measured(4, (632.0, 2068.6, 2441.3), label="current", as_is=True)
    batch16 = measured(16, (576.9, 1120.1, 3200.9), label="batch 16")
    return SearchResult(base, [base, measured(8, (581.3, 1567.6, 2474.2)), batch16],
                        (1, 8, 32), Budgets(), optimize_for=optimize_for)


def test_the_note_says_what_the_guard_held_back_and_how_to_choose_it() -> None:
    held = _gpu_run()
    assert held.chosen() is held.baseline
    note = held_back_note(held)
    assert note == ("the current config stays: 1 GPU instance, batch 16 read 1.31x its rows/s "
                    "at c=32, but 0.91x at c=1, 0.54x at c=8, and a config is written only if it "
                    "is not more than 5% slower at any level; --optimize-for 32 chooses for "
                    "c=32 alone")
    # told to choose for c=32 alone, the search writes batch 16: nothing is held back
    chosen_for_32 = _gpu_run(optimize_for=32)
    assert chosen_for_32.chosen() is chosen_for_32.measurements[2]
    assert held_back_note(chosen_for_32) is None
    assert held_back_note(result()) is None  # the winner was written: no note


def test_the_summary_shows_the_config_the_note_keeps() -> None:
    """The summary's second row is the choice the note explains, from ``chosen``: it used
    to show the fastest within the budgets at each level as "best" (batch 16 at c=32) above a
    note saying the current config stays."""
    held = _gpu_run()
    text = _text(summary_table(held))
    assert held_back_note(held) is not None
    assert "batch 16" not in text and "best" not in text
    for level in (1, 8, 32):
        assert f"{level}   current: 1 GPU instance, batch 4 (kept)" in text
    assert "chosen" not in text
    chosen = _text(summary_table(_gpu_run(optimize_for=32)))
    assert "chosen: 1 GPU instance, batch 16" in chosen and "1.31x" in chosen
    nothing = replace(held, budgets=Budgets(latency_ms=0.5))
    assert "chosen: none within the budgets" in _text(summary_table(nothing))


def test_optimize_for_is_suggested_only_where_it_changes_the_choice() -> None:
    """One level, 8: the confirming runs held back a candidate whose slower run lost at c=8.
    --optimize-for 8 would choose the same, so the note does not suggest it."""
    def measured(batch: int, rate: float, low: float, **kw: object) -> Measurement:
        return Measurement(Candidate(1, 2, batch, **kw),  # type: ignore[arg-type]
                           (Point(8, rate, 1.0, 2.0, low_rows_per_s=low),), ready_s=0.7,
                           rss_bytes=81 << 20, runs=2)

    base = measured(64, 6000.0, 5900.0, label="current", as_is=True)
    batch8 = measured(8, 6400.0, 5600.0)
    run = SearchResult(base, [base, batch8], (8,), Budgets(), confirmed=True)
    assert run.chosen() is base and run.chosen_for(8) is base
    note = held_back_note(run)
    assert note == ("the current config stays: 1x2 threads, batch 8 read 1.07x its rows/s at "
                    "c=8 on the mean of its runs, but 0.93x at c=8 in its slower run, and a "
                    "config is written only if it is not more than 5% slower at any level")


def test_the_note_names_the_candidate_that_lost_its_confirming_run() -> None:
    """Readings of a one-core digits run: batch 8 beat the current config by 1.17-1.19x at
    c=8 and c=32 and passed on its first reading; its second read c=1 a hair past the
    guard. The note names batch 8 and that run, not the delay that read the most at c=32
    but lost 97% at c=1."""
    def measured(batch: int, rows: tuple[float, ...], low: tuple[float, ...] | None = None,
                 runs: int = 1, **kw: object) -> Measurement:
        points = tuple(Point(c, r, 1.0, 2.0, low_rows_per_s=None if low is None else lo)
                       for c, r, lo in zip((1, 8, 32), rows, low or rows, strict=True))
        return Measurement(Candidate(1, 1, batch, **kw), points,  # type: ignore[arg-type]
                           ready_s=0.3, rss_bytes=81 << 20, runs=runs)

    base = measured(4, (5274.2, 14266.0, 16306.1), (5230.7, 14111.2, 15815.3), runs=2,
                    label="current", as_is=True)
    batch8 = measured(8, (5039.8, 16758.2, 19338.9), (5005.0, 16683.0, 19168.0), runs=2)
    delay = measured(16, (177.8, 1289.4, 21085.4), delay_us=5000, preferred=(16,))
    run = SearchResult(base, [base, batch8, delay], (1, 8, 32), Budgets(), confirmed=True)
    assert run.chosen() is base
    assert held_back_note(run) == (
        "the current config stays: 1x1 threads, batch 8 read 1.19x its rows/s at c=32 on the "
        "mean of its runs, but 0.949x at c=1 in its slower run, and a config is written only "
        "if it is not more than 5% slower at any level; --optimize-for 32 chooses for c=32 "
        "alone")
