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
    measurement_comment,
    noise_warning,
    summary_table,
    write_report,
)
from modelfn.tune.search import Measurement, Point, SearchResult, search

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


def test_tables_show_current_best_and_gain() -> None:
    console = Console(width=200, record=True)
    console.print(summary_table(result()))
    console.print(candidates_table(result()))
    text = console.export_text()
    assert "current: 1xauto threads, batch 4" in text
    assert "best: 1x1 threads, batch 8" in text
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
