"""Render a ``bench/run.py`` run as Markdown (``bench/RESULTS.md``).

Repeated cells are summarised by their median; ratios are taken between medians of the same
run. A cell whose window saw more than ``NOISY_CORES`` of foreign CPU is marked as noise; a
cell whose client used its core up (``modelfn.client.cpu.client_bound``) is flagged as a
measure of the client; a cell with errors (any answer other than 200) is flagged and its
figures are not reported.
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from modelfn.client.cpu import CLIENT_BOUND_SHARE, client_bound

if TYPE_CHECKING:
    from collections.abc import Iterable

    from run import RunData

NOISY_CORES = 0.2
TARGET_ORDER = ("modelfn", "modelfn-poll", "naive", "ceiling", "pytriton", "mlserver")
CLIENT_ORDER = ("wrk", "aiohttp")
#: the key of a summary: config, workload, body, concurrency, client, target
KEY_FIELDS = ("config", "workload", "body", "concurrency", "client", "target")
ROOT = Path(__file__).resolve().parent.parent
_ABSOLUTE_DIR = re.compile(r"(?<![\w.])/(?:[\w.+@-]+/)+")


def _clean(message: str) -> str:
    """An error message without this machine's paths (the checkout becomes ``.``)."""
    message = message.replace(str(ROOT), ".")
    return _ABSOLUTE_DIR.sub(".../", message).replace("`", "'")


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _num(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "–" if a is None or b is None or b == 0 else f"{a / b:.2f}×"


def _load(values: list[float] | None) -> str:
    return "?" if not values else " ".join(f"{v:.2f}" for v in values)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines + [""]


def raw_series(records: Iterable[dict[str, Any]]
               ) -> dict[tuple[str, str, bool], dict[int, list[float]]]:
    """Raw rows/s per batch size, every reading of it (before and after the servers), by
    (config, workload, spinning); ``records`` are ``raw_ort.py``'s results."""
    series: dict[tuple[str, str, bool], dict[int, list[float]]] = {}
    for raw in records:
        key = (raw.get("config", ""), raw.get("workload", ""), raw["spinning"])
        by_batch = series.setdefault(key, {})
        for reading in raw["batches"]:
            by_batch.setdefault(reading["batch"], []).append(reading["rows_per_s"])
    return series


def mean_best(by_batch: dict[int, list[float]]) -> tuple[int, float]:
    """The batch size whose readings average the most rows/s, and that average."""
    means = {batch: sum(rows) / len(rows) for batch, rows in by_batch.items()}
    batch = max(means, key=lambda b: means[b])
    return batch, means[batch]


def _raw_best(data: RunData) -> dict[tuple[str, str], float]:
    """Raw onnxruntime's best rows/s per (config, workload): the best batch size's mean of
    the readings before and after the servers, so that neither one lucky reading nor the
    machine's drift between raw and the servers sets the bar."""
    best: dict[tuple[str, str], float] = {}
    for (config, workload, _), by_batch in raw_series(data.raw).items():
        best[(config, workload)] = max(best.get((config, workload), 0.0), mean_best(by_batch)[1])
    return best


def _client(cell: dict[str, Any]) -> str:
    return str(cell.get("client", "aiohttp"))  # runs before wrk had only the aiohttp client


def _summaries(data: RunData) -> dict[tuple[str, ...], dict[str, Any]]:
    """Median figures per (config, workload, body, concurrency, client, target)."""
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = defaultdict(list)
    for cell in data.cells:
        groups[tuple(_client(cell) if f == "client" else str(cell[f]) for f in KEY_FIELDS)
               ].append(cell)
    out: dict[tuple[str, ...], dict[str, Any]] = {}
    for key, cells in groups.items():
        results = [c["result"] for c in cells if "result" in c]

        def med(name: str, results: list[dict[str, Any]] = results) -> float | None:
            return _median([r[name] for r in results if r.get(name) is not None])

        client_cpus = [r["client_cpu"] for r in results if r.get("client_cpu") is not None]
        errors = sum(r["errors"] for r in results)
        failed = sum(1 for c in cells if "result" not in c)
        out[key] = {
            "valid": bool(results) and errors == 0 and failed == 0,
            "client_cpu": max(client_cpus) if client_cpus else None,
            "client_bound": client_bound(max(client_cpus) if client_cpus else None),
            "req_per_s": med("req_per_s"),
            "rows_per_s": med("rows_per_s"),
            "p50_ms": med("p50_ms"),
            "p99_ms": med("p99_ms"),
            "server_cpu_us": med("server_cpu_us"),
            "avg_batch_size": med("avg_batch_size"),
            "errors": errors,
            "failed": failed,
            "reps": len(results),
            "foreign": max(c["foreign_cores"] for c in cells),
            "first_error": next((r["first_error"] for r in results if r["first_error"]), None)
            or next((c["error"] for c in cells if "error" in c), None),
        }
    return out


def _targets(data: RunData) -> list[str]:
    seen = {c["target"] for c in data.cells} | {s["target"] for s in data.starts}
    return sorted(seen, key=_target_rank)


def _target_rank(target: str) -> float:
    if target.startswith("modelfn@"):  # modelfn at another commit (--compare-ref): beside it
        return 0.5
    return TARGET_ORDER.index(target) if target in TARGET_ORDER else 99


def _reported(s: dict[str, Any] | None, name: str) -> float | None:
    """A figure of a summary, or None when the cell had errors (flagged, not reported)."""
    return s[name] if s and s["valid"] else None


def _flags(s: dict[str, Any]) -> str:
    flags = []
    if s["client_bound"]:
        flags.append("client-bound: a lower bound")
    if not s["valid"]:
        flags.append("errors: not reported")
    return f" ({'; '.join(flags)})" if flags else ""


def _headline(data: RunData, summary: dict[tuple[str, ...], dict[str, Any]]) -> list[str]:
    best = _raw_best(data)
    lines = []
    for (config, workload, body, conc, client, target), s in sorted(
        summary.items(), key=lambda kv: (*kv[0][:4], _client_rank(kv[0][4]))
    ):
        if target not in ("modelfn", "modelfn-poll"):
            continue
        if target == "modelfn" and conc != str(max(data.settings["concurrency"])):
            continue  # modelfn-poll is for latency: every concurrency
        naive = summary.get((config, workload, body, conc, client, "naive"))
        ceiling = summary.get((config, workload, body, conc, client, "ceiling"))
        req = _reported(s, "req_per_s")
        lines.append(
            f"- {workload}, {config}, {body}, c={conc}, measured with {client}: {target} "
            f"{_num(req)} req/s{_flags(s)} = "
            f"{_ratio(req, _reported(naive, 'req_per_s'))} the naive server, "
            f"{_ratio(req, _reported(ceiling, 'req_per_s'))} the bare HTTP ceiling, "
            f"{_ratio(_reported(s, 'rows_per_s'), best.get((config, workload)))} raw "
            f"onnxruntime's best rows/s; p50 {_num(_reported(s, 'p50_ms'), 3)} ms, "
            f"p99 {_num(_reported(s, 'p99_ms'), 2)} ms; "
            f"average batch {_num(s['avg_batch_size'], 2)}."
        )
    for (config, workload, body, conc, client, target), s in sorted(summary.items()):
        if not target.startswith("modelfn@"):
            continue
        new = summary.get((config, workload, body, conc, client, "modelfn"))
        lines.append(
            f"- {workload}, {config}, {body}, c={conc}, {client}: modelfn against {target}: "
            f"req/s {_ratio(_reported(new, 'req_per_s'), _reported(s, 'req_per_s'))}, "
            f"p50 {_ratio(_reported(new, 'p50_ms'), _reported(s, 'p50_ms'))}, "
            f"p99 {_ratio(_reported(new, 'p99_ms'), _reported(s, 'p99_ms'))}, "
            f"server CPU per request {_num(_reported(new, 'server_cpu_us'))} µs against "
            f"{_num(_reported(s, 'server_cpu_us'))} µs "
            f"({_ratio(_reported(new, 'server_cpu_us'), _reported(s, 'server_cpu_us'))})."
        )
    return lines or ["- (no modelfn cells measured)"]


def _client_rank(client: str) -> int:
    return CLIENT_ORDER.index(client) if client in CLIENT_ORDER else 99


def render(data: RunData) -> str:
    settings = data.settings
    machine = settings["machine"]
    summary = _summaries(data)
    best = _raw_best(data)
    out = ["# modelfn benchmark results", ""]
    if data.interrupted:
        out += ["**Interrupted run: the tables hold only what was measured.**", ""]
    out += [
        f"Measured {settings['started']} in {settings.get('elapsed_s', '?')} s with:",
        "",
        "```",
        data.command,
        "```",
        "",
        f"- Machine: {machine['cpu']}, {machine['cores']} cores, Linux {machine['kernel']}.",
        "- Versions: "
        + ", ".join(f"{k} {v}" for k, v in machine.items() if k not in ("cpu", "cores", "kernel")),
        f"- Cells: {settings['duration']:g} s window after {settings['warmup']:g} s warm-up "
        "(×2 for cnn), closed loop, one row per request, "
        f"{settings['repeat']} interleaved repetition(s) per target, median reported. "
        f"Raw onnxruntime: {settings['raw_duration']:g} s per batch size. A cell whose window "
        f"saw over {NOISY_CORES * 100:.0f}% of a core of foreign CPU is measured again "
        f"(up to {settings.get('retries', 0)} time(s)) and the quietest attempt kept.",
        f"- Clients: {', '.join(settings.get('clients', ['aiohttp']))}, on the client's cores; "
        f"load average (1, 5, 15 min) {_load(settings.get('load_start'))} at the start and "
        f"{_load(settings.get('load_end'))} at the end.",
        "- Throughput with wrk: a server with Triton's statistics (modelfn) is counted over "
        "its whole batches between the window's ends, the others over the answers in the "
        "window's whole seconds (a slow model answers in bursts).",
        f"- Server ORT spinning: {settings['spinning']} "
        "(default = each server's own: ORT's default, on, for the naive server).",
    ]
    for name, description in data.configs.items():
        out.append(f"- `{name}`: {description}.")
    out += ["", "Method: `bench/README.md`. Only ratios within this run are meaningful.", ""]

    out += ["## Headline", "", *_headline(data, summary), ""]

    out += ["## Raw onnxruntime (the physical limit)", ""]
    out += ["Each batch size is read before and after the servers; best rows/s is the batch size "
            "whose readings average the most, and ×raw compares with it.", ""]
    rows = []
    threads = {(r["config"], r["workload"]): str(r["threads"]) for r in data.raw}
    for (config, workload, spinning), by_batch in raw_series(data.raw).items():
        batch, mean = mean_best(by_batch)
        one = by_batch.get(1)
        rows.append(
            [
                config,
                workload,
                threads[(config, workload)],
                "on" if spinning else "off",
                _num(sum(one) / len(one), 0) if one else "–",
                f"{_num(mean, 0)} (batch {batch})",
                " / ".join(_num(r, 0) for r in by_batch[batch]),
            ]
        )
    out += _table(
        ["config", "workload", "threads", "spinning", "rows/s at batch 1", "best rows/s",
         "its readings"], rows
    )

    out += ["## Throughput and latency", ""]
    out += [
        "req/s, rows/s and latencies are medians over repetitions; client is the load generator "
        "that measured the cell (wrk: native, one thread; aiohttp: `modelfn bench`); client CPU "
        "is the share of its core the client used in the window, `!` at "
        f"{CLIENT_BOUND_SHARE * 100:.0f}% or more: the client, not the server, limited the "
        "cell, so its rates are lower bounds for the server; ×naive and ×ceiling compare req/s "
        "with the naive server and with the bare HTTP ceiling on the same body, concurrency "
        "and client; ×raw compares rows/s with raw onnxruntime's best in the same "
        "configuration; server µs/req is the CPU time the server process used in the window "
        "per answered request (wrk cells only): the figure a busy machine disturbs least; "
        "foreign is the most CPU (in % of one core) other processes used during "
        f"a window, `*` above {NOISY_CORES * 100:.0f}%. A cell with errors (an answer other "
        "than 200, or a failed connection) is flagged and its figures are not reported.",
        "",
    ]
    for config in data.configs:
        for workload in dict.fromkeys(c["workload"] for c in data.cells if c["config"] == config):
            out += [f"### {workload}, {config}", ""]
            rows = []
            for key in sorted(
                (k for k in summary if k[0] == config and k[1] == workload),
                key=lambda k: (k[2] != "json", int(k[3]), _client_rank(k[4]),
                               _targets(data).index(k[5])),
            ):
                s = summary[key]
                naive = summary.get((*key[:5], "naive"))
                ceiling = summary.get((*key[:5], "ceiling"))
                noisy = "*" if s["foreign"] > NOISY_CORES else ""
                req = _reported(s, "req_per_s")
                cpu = s["client_cpu"]
                rows.append(
                    [
                        key[2],
                        key[3],
                        key[4],
                        key[5],
                        _num(req) if s["valid"] else "not reported",
                        _num(_reported(s, "rows_per_s")),
                        _num(_reported(s, "p50_ms"), 3),
                        _num(_reported(s, "p99_ms"), 2),
                        _num(s["avg_batch_size"], 2),
                        _num(_reported(s, "server_cpu_us")),
                        _ratio(req, _reported(naive, "req_per_s")) if key[5] != "naive" else "",
                        _ratio(req, _reported(ceiling, "req_per_s"))
                        if key[5] != "ceiling" else "",
                        _ratio(_reported(s, "rows_per_s"), best.get((config, workload))),
                        "–" if cpu is None else f"{cpu * 100:.0f}%" + ("!" if s["client_bound"]
                                                                     else ""),
                        str(s["errors"]) + (f" ({s['failed']} failed)" if s["failed"] else ""),
                        f"{s['foreign'] * 100:.0f}%{noisy}",
                    ]
                )
            out += _table(
                [
                    "body",
                    "c",
                    "client",
                    "target",
                    "req/s",
                    "rows/s",
                    "p50 ms",
                    "p99 ms",
                    "avg batch",
                    "server µs/req",
                    "×naive",
                    "×ceiling",
                    "×raw",
                    "client CPU",
                    "errors",
                    "foreign",
                ],
                rows,
            )

    out += ["## Cold start (process launch → first successful inference)", ""]
    starts: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for s in data.starts:
        starts[(s["config"], s["workload"], s["target"])].append(s)
    rows = []
    for (config, workload, target), items in starts.items():
        ok = [s for s in items if "error" not in s]
        firsts = [s["first_inference_s"] for s in ok]
        rows.append(
            [
                config,
                workload,
                target,
                _num(_median([s["ready_s"] for s in ok]), 2),
                _num(_median(firsts), 2),
                f"{min(firsts):.2f}–{max(firsts):.2f}" if firsts else "–",
                f"{len(ok)}/{len(items)}",
            ]
        )
    out += _table(
        ["config", "workload", "target", "ready s", "first inference s", "range", "started"], rows
    )

    errors = {
        f"{k[5]} {k[2]} c={k[3]} with {k[4]} ({k[1]}, {k[0]})": s["first_error"]
        for k, s in summary.items()
        if s["first_error"]
    }
    if data.unavailable or errors:
        out += ["## Problems", ""]
        out += [
            f"- {name}: unavailable: `{_clean(reason)}`"
            for name, reason in data.unavailable.items()
        ]
        out += [f"- {name}: first error: `{_clean(message)}`" for name, message in errors.items()]
        out.append("")
    return "\n".join(out)
