"""What ``modelfn tune`` shows and writes: the table, the config comment, the report files.

The table has, per concurrency, the current config and the winner side by side with the
gain; ``--report DIR`` writes every measurement as JSON and CSV, and a chart (rows/s
against p99 for every candidate, the chosen one marked) when matplotlib is installed,
which is the ``plot`` extra: it is imported only here, only when a chart is asked for.
"""

from __future__ import annotations

import csv
import importlib.util
import json
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from rich import box
from rich.table import Table

from modelfn.tune.search import GROWTH

if TYPE_CHECKING:
    from pathlib import Path

    from modelfn.tune.search import Measurement, SearchResult

CHART = "tune.png"


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _mib(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:,.0f}"


def summary_table(result: SearchResult, title: str = "") -> Table:
    """Per concurrency: the current config beside the one tune chooses (``chosen``, the one
    ``--write`` writes, marked * in the candidates table), and the gain; the current config
    alone, marked (kept), when it is the choice. ``in model`` is the share of the window the
    model's instances spent running it: near 100% per instance, serving costs little and
    only a faster model or machine does more at that batch size."""
    table = Table(title=title or None, box=box.SIMPLE_HEAD)
    table.add_column("c", justify="right")
    table.add_column("config")
    for column in ("rows/s", "p50 ms", "p99 ms", "in model", "RSS MiB", "ready s", "gain"):
        table.add_column(column, justify="right", no_wrap=True)
    chosen = result.chosen()
    kept = chosen is not None and chosen is result.baseline
    rows: list[tuple[str, Measurement | None]] = [("current", result.baseline)]
    if not kept:
        rows.append(("chosen", chosen))
    for level in result.levels:
        for role, m in rows:
            if m is None:
                table.add_row(str(level), f"{role}: none within the budgets", *["-"] * 7)
                continue
            point = m.at(level)
            gain = result.gain(m, level) if role == "chosen" else None
            table.add_row(
                str(level),
                f"{role}: {m.candidate.describe()}{' (kept)' if kept else ''}",
                _num(point.rows_per_s if point else None),
                _num(point.p50_ms if point else None, 2),
                _num(point.p99_ms if point else None, 2),
                "-" if point is None or point.busy is None else f"{point.busy * 100:.0f}%",
                _mib(m.rss_bytes),
                _num(m.ready_s, 2),
                "-" if gain is None else f"{gain:.2f}x",
            )
    return table


def candidates_table(result: SearchResult) -> Table:
    """Every measured candidate, in the order the search tried them; foreign is the CPU
    other processes used meanwhile, in % of a core."""
    table = Table(box=box.SIMPLE_HEAD)
    table.add_column("#", justify="right")
    table.add_column("candidate")
    for level in result.levels:
        table.add_column(f"rows/s c={level}", justify="right", no_wrap=True)
        table.add_column(f"p99 c={level}", justify="right", no_wrap=True)
    table.add_column("ready s", justify="right")
    table.add_column("foreign", justify="right")
    chosen = result.chosen()
    for index, m in enumerate(result.measurements, 1):
        mark = " *" if m is chosen else ""
        cells: list[str] = []
        for level in result.levels:
            point = m.at(level)
            cells += [_num(point.rows_per_s if point else None),
                      _num(point.p99_ms if point else None, 2)]
        again = f" (mean of {m.runs})" if m.runs > 1 else ""
        name = f"{m.candidate.describe()}{again}{mark}"
        if m.error:
            name += f" (failed: {m.error})"
        foreign = "-" if m.foreign_cores is None else f"{m.foreign_cores * 100:.0f}%"
        table.add_row(str(index), name, *cells, _num(m.ready_s, 2), foreign)
    return table


#: other processes using more than this share of a core make a measurement noisy
NOISY_CORES = 0.25


def noise_warning(result: SearchResult) -> str | None:
    """A line for the user when other processes competed for the cores during the run."""
    worst = max((m.foreign_cores or 0.0 for m in result.measurements), default=0.0)
    if worst <= NOISY_CORES:
        return None
    return (f"other processes used up to {worst * 100:.0f}% of a core while candidates were "
            "measured (the foreign column): differences of a few tens of percent may be "
            "noise; run again on a quiet machine, or with a longer --duration")


def held_back_note(result: SearchResult) -> str | None:
    """Why the current config stays although a candidate beat it at the scored level: the
    levels where that one was slower, and how to choose it anyway."""
    held = result.held_back()
    if held is None:
        return None
    best, losses = held
    top = result.top
    # a loss just past the guard is shown to 3 places: 0.949 is not "0.95x"
    slower = ", ".join(f"{ratio:.{2 if ratio < 0.945 else 3}f}x at c={level}"
                       for level, ratio in losses)
    runs = (" on the mean of its runs", " in its slower run") if best.runs > 1 else ("", "")
    # --optimize-for is named only where it would choose another config
    advice = ("" if result.chosen_for(top) is result.chosen()
              else f"; --optimize-for {top} chooses for c={top} alone")
    return (f"the current config stays: {best.candidate.describe()} read "
            f"{result.gain(best, top):.2f}x its rows/s at c={top}{runs[0]}, but {slower}"
            f"{runs[1]}, and a config is written only if it is not more than "
            f"{(GROWTH - 1) * 100:.0f}% slower at any level{advice}")


def measurement_comment(result: SearchResult, chosen: Measurement, when: str,
                        machine: str) -> str:
    """The comment ``--write`` puts above the config: what was measured, and where."""
    target = "" if result.optimize_for is None else f", chosen for c={result.optimize_for}"
    rows = result.rows_per_request
    carrying = "" if rows == 1 else f", requests of {rows} rows"
    lines = [f"Tuned by modelfn tune on {when} ({machine}{carrying}): "
             f"{chosen.candidate.describe()}{target}."]
    if result.refused is not None:
        lines.append(f"The previous config's max_batch_size "
                     f"{result.refused.candidate.max_batch_size} refused every request; "
                     f"the gains are against it with max_batch_size {rows}.")
    for level in result.levels:
        point = chosen.at(level)
        if point is None:
            continue
        gain = result.gain(chosen, level)
        against = "" if gain is None else f", {gain:.2f}x the previous config"
        lines.append(f"c={level}: {point.rows_per_s:,.1f} rows/s, p99 "
                     f"{_num(point.p99_ms, 2)} ms{against}")
    if chosen.ready_s is not None:
        lines.append(f"ready in {chosen.ready_s:.2f} s; peak RSS {_mib(chosen.rss_bytes)} MiB")
    return "\n".join(lines)


def _rows(result: SearchResult) -> list[dict[str, Any]]:
    chosen = result.chosen()
    rows = []
    for m in result.measurements:
        for point in m.points or ():
            rows.append({**{k: v for k, v in asdict(m.candidate).items()},
                         "preferred": " ".join(map(str, m.candidate.preferred)),
                         "concurrency": point.concurrency,
                         "rows_per_request": m.rows_per_request, "rows_per_s": point.rows_per_s,
                         "p50_ms": point.p50_ms, "p99_ms": point.p99_ms,
                         "errors": point.errors, "avg_batch": point.avg_batch,
                         "busy": point.busy,
                         "ready_s": m.ready_s, "rss_bytes": m.rss_bytes,
                         "chosen": m is chosen, "current": m is result.baseline})
    return rows


def write_report(result: SearchResult, directory: Path,
                 client: str | None = None) -> list[str]:
    """``tune.json``, ``tune.csv`` and (with matplotlib) ``tune.png`` in ``directory``;
    ``client`` names the load generator that measured (wrk or aiohttp). Returns lines to
    print about what was written."""
    directory.mkdir(parents=True, exist_ok=True)
    doc = {
        "client": client,
        "levels": list(result.levels),
        "optimize_for": result.optimize_for,
        "rows_per_request": result.rows_per_request,
        "current_refused_the_requests": result.refused is not None,
        "stopped": result.stopped,
        "budgets": asdict(result.budgets),
        "measurements": [asdict(m) for m in result.measurements],
        "chosen": None if result.chosen() is None else asdict(result.chosen()),  # type: ignore[arg-type]
    }
    (directory / "tune.json").write_text(json.dumps(doc, indent=2) + "\n")
    rows = _rows(result)
    with (directory / "tune.csv").open("w", newline="") as out:
        if rows:
            writer = csv.DictWriter(out, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    written = [f"wrote {directory / 'tune.json'} and {directory / 'tune.csv'}"]
    if importlib.util.find_spec("matplotlib") is None:
        written.append("the chart needs matplotlib: pip install 'modelfn[plot]'")
    else:
        chart(result, directory / CHART)
        written.append(f"wrote {directory / CHART}")
    return written


def chart(result: SearchResult, path: Path) -> None:
    """rows/s against p99, one panel per concurrency; the chosen candidate is marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = result.levels
    chosen = result.chosen()
    fig, axes = plt.subplots(1, len(levels), figsize=(4.5 * len(levels), 4), squeeze=False)
    for ax, level in zip(axes[0], levels, strict=True):
        for m in result.measurements:
            point = m.at(level)
            if point is None or point.p99_ms is None or m.error:
                continue
            style = {"marker": "o", "color": "tab:blue", "s": 30}
            if m is result.baseline:
                style = {"marker": "s", "color": "tab:gray", "s": 60}
            if m is chosen:
                style = {"marker": "*", "color": "tab:red", "s": 160}
            ax.scatter(point.p99_ms, point.rows_per_s, **style)
            ax.annotate(m.candidate.describe(), (point.p99_ms, point.rows_per_s),
                        fontsize=6, xytext=(3, 3), textcoords="offset points")
        if result.budgets.latency_ms is not None:
            ax.axvline(result.budgets.latency_ms, color="tab:red", linestyle=":", linewidth=1)
        ax.set_title(f"c={level}")
        ax.set_xlabel("p99 ms")
        ax.set_ylabel("rows/s")
        ax.grid(True, alpha=0.3)
    fig.suptitle("modelfn tune: square = current, star = chosen")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
