"""Prometheus text exposition of the runtime's statistics, with Triton's metric names.

Existing Triton dashboards work unchanged: the series below are Triton's
(``nv_inference_*`` with labels ``model`` and ``version``), named exactly as
Triton names them. prometheus-client would append ``_total`` to every counter,
which breaks those dashboards, so the text format (version 0.0.4) is written
here directly from each version's ``ModelStats`` at scrape time: the hot path
never touches a metric object or a label lookup.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from modelfn.runtime.stats import EDGE, FAILURE_REASONS

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from modelfn.runtime.repository import Repository
    from modelfn.runtime.stats import ModelStats

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


# (name, type, help, how to read it from ModelStats)
_SERIES: tuple[tuple[str, str, str, Callable[[ModelStats], Any]], ...] = (
    ("nv_inference_request_success", "counter",
     "Number of successful inference requests, all batch sizes", lambda s: s.success.count),
    ("nv_inference_count", "counter",
     "Number of inferences performed (does not include cached requests)",
     lambda s: s.inference_count),
    ("nv_inference_exec_count", "counter",
     "Number of model executions performed (does not include cached requests)",
     lambda s: s.execution_count),
    ("nv_inference_pending_request_count", "gauge",
     "Instantaneous number of pending requests awaiting execution per-model.",
     lambda s: s.pending),
    ("nv_inference_request_duration_us", "counter",
     "Cumulative inference request duration in microseconds (includes cached requests)",
     lambda s: (s.success.ns + s.fail.ns) // 1000),
    ("nv_inference_queue_duration_us", "counter",
     "Cumulative inference queuing duration in microseconds (includes cached requests)",
     lambda s: s.queue.ns // 1000),
    ("nv_inference_compute_input_duration_us", "counter",
     "Cumulative compute input duration in microseconds (does not include cached requests)",
     lambda s: s.compute_input.ns // 1000),
    ("nv_inference_compute_infer_duration_us", "counter",
     "Cumulative compute inference duration in microseconds (does not include cached requests)",
     lambda s: s.compute_infer.ns // 1000),
    ("nv_inference_compute_output_duration_us", "counter",
     "Cumulative inference compute output duration in microseconds "
     "(does not include cached requests)",
     lambda s: s.compute_output.ns // 1000),
    ("nv_model_load_duration_secs", "gauge", "Model load time in seconds",
     lambda s: round(s.load_duration_s, 6)),
)


def _label(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def inference_lines(models: Iterable[ModelStats]) -> list[str]:
    """Triton's per-version series (``nv_inference_*``, ``nv_model_load_duration_secs``) of
    ``models``, labelled with each one's ``name`` and ``version``: for a function's
    repository and for the versions the gateway batches for alike."""
    labelled = [(f'model="{_label(s.name)}",version="{_label(s.version)}"', s) for s in models]
    lines: list[str] = []
    for name, kind, text, read in _SERIES:
        lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
        lines += [f"{name}{{{labels}}} {read(stats)}" for labels, stats in labelled]
        if name == "nv_inference_request_success":
            failure = "nv_inference_request_failure"
            lines += [f"# HELP {failure} Number of failed inference requests, all batch sizes",
                      f"# TYPE {failure} counter"]
            lines += [f'{failure}{{{labels},reason="{reason}"}} {stats.failures[reason]}'
                      for labels, stats in labelled for reason in FAILURE_REASONS]
    return lines


def exposition(repository: Repository) -> bytes:
    lines = inference_lines(m.stats for m in repository.all_versions())
    phase = "modelfn_cold_start_duration_seconds"
    lines += [f"# HELP {phase} Seconds each cold-start phase took (import, fetch, session, warmup)",
              f"# TYPE {phase} gauge"]
    lines += [f'{phase}{{phase="{p}"}} {round(s, 6)}' for p, s in repository.phases.items()]
    lines += edge_lines()
    return ("\n".join(lines) + "\n").encode()


def edge_lines() -> list[str]:
    """The HTTP edge's counters (``runtime.stats.EDGE``), for any server's ``/metrics``."""
    lines: list[str] = []
    for name, text, value in (
        ("client_disconnects", "Clients that hung up before their answer",
         EDGE.client_disconnects),
        ("heads_too_large", "Requests refused 431: head over the size or field limit",
         EDGE.heads_too_large),
        ("head_timeouts", "Connections closed 408: no complete request head in time",
         EDGE.head_timeouts),
        ("body_timeouts", "Connections closed: the request body stalled", EDGE.body_timeouts),
        ("bad_requests", "Requests refused 400: not parseable as HTTP", EDGE.bad_requests),
        ("pipelines_too_deep", "Connections closed: more requests pipelined unanswered than "
                               "MODELFN_MAX_PIPELINED", EDGE.pipelines_too_deep),
    ):
        series = f"modelfn_http_{name}_total"
        lines += [f"# HELP {series} {text}", f"# TYPE {series} counter", f"{series} {value}"]
    return lines
