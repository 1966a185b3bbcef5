"""What the server says about a load run: the average batch from Triton's
``nv_inference_count`` / ``nv_inference_exec_count`` counters on ``/metrics``, and rows/s
over whole batches from the model's statistics (``/v2/models/{m}/stats``), each read at
the start and the end of a window, with the run's session or (wrk's driver) without one."""

from __future__ import annotations

import re
import urllib.request
from typing import TYPE_CHECKING, NamedTuple

import aiohttp
import orjson

from modelfn.client.endpoint import endpoint_url

if TYPE_CHECKING:
    from modelfn.client.auth import RequestAuth

_SAMPLE = re.compile(
    r"^(nv_inference_count|nv_inference_exec_count)(?:_total)?\{([^}]*)\}\s+(\S+)", re.MULTILINE
)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


# --- the batch counters on /metrics -----------------------------------------------------------


def parse_batch_counters(text: str, model: str) -> tuple[float, float] | None:
    """Sum ``nv_inference_count`` and ``nv_inference_exec_count`` over the model's labels."""
    totals = {"nv_inference_count": 0.0, "nv_inference_exec_count": 0.0}
    seen = False
    for name, labels, value in _SAMPLE.findall(text):
        if dict(_LABEL.findall(labels)).get("model") != model:
            continue
        totals[name] += float(value)
        seen = True
    if not seen:
        return None
    return totals["nv_inference_count"], totals["nv_inference_exec_count"]


def _read(url: str, timeout_s: float) -> bytes | None:
    """The body of ``GET url``, for a caller with no event loop (wrk's driver); None when
    the server does not answer it with a 200."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            body: bytes = resp.read()
            return body
    except OSError:
        return None


async def _read_async(session: aiohttp.ClientSession, url: str,
                      auth: RequestAuth | None = None) -> bytes | None:
    """``_read`` on the event loop, with the run's session and credentials."""
    headers = {} if auth is None else auth.headers("GET", url, {})
    try:
        async with session.get(url, headers=headers) as resp:
            return await resp.read() if resp.status == 200 else None
    except (aiohttp.ClientError, TimeoutError):
        return None


def _counters(body: bytes | None, model: str) -> tuple[float, float] | None:
    try:
        return None if body is None else parse_batch_counters(body.decode(), model)
    except UnicodeDecodeError:
        return None


async def scrape_batch_counters_async(
    session: aiohttp.ClientSession, metrics_url: str, model: str,
    auth: RequestAuth | None = None,
) -> tuple[float, float] | None:
    return _counters(await _read_async(session, metrics_url, auth), model)


def scrape_batch_counters(metrics_url: str, model: str,
                          timeout_s: float = 5.0) -> tuple[float, float] | None:
    """``parse_batch_counters`` of ``GET metrics_url``, for a caller with no event loop (wrk's
    driver); None when the server does not answer or does not count the model."""
    return _counters(_read(metrics_url, timeout_s), model)


def batch_size(
    before: tuple[float, float] | None, after: tuple[float, float] | None
) -> float | None:
    """The average batch over a window: inferences / executions between two readings."""
    if before is None or after is None:
        return None
    executions = after[1] - before[1]
    return (after[0] - before[0]) / executions if executions > 0 else None


# --- the server's own count of rows -----------------------------------------------------------
#
# A closed loop on a slow model is answered in bursts (whole batches of many rows at once), so
# the answers inside a window of a few seconds are counted only to within a burst (see
# bench/RESULTS.md). The server's statistics (Triton's extension) count rows when each batch
# ends and stamp the end of the last one, so the rows between two readings over the time
# between the batch ends they saw are whole batches.

class StatsReading(NamedTuple):
    """One reading of a model's statistics, over its versions."""

    rows: int  # rows run (``inference_count``)
    last_ms: int  # the end of the last batch, ms since the epoch (``last_inference``)
    #: time inside the model's runs: ``compute_infer`` of the batch statistics, each batch
    #: once (the model's own ``compute_infer`` counts each request with its batch's time)
    infer_ns: int


class Served(NamedTuple):
    """Between two readings: over the batches that ended in between."""

    rows_per_s: float
    #: the share of that time the model's instances spent running it: near 1 per instance,
    #: the model itself, not the serving around it, is the limit
    busy: float


def stats_url(url: str, model: str) -> str:
    return endpoint_url(url, f"/v2/models/{model}/stats")


def parse_stats_reading(doc: object, model: str) -> StatsReading | None:
    """``model``'s reading in a statistics answer, over its versions; None when the answer
    holds no statistics of ``model``."""
    stats = doc.get("model_stats") if isinstance(doc, dict) else None
    mine = [s for s in stats if isinstance(s, dict) and s.get("name") == model] \
        if isinstance(stats, list) else []
    try:
        if mine:
            return StatsReading(
                sum(int(s["inference_count"]) for s in mine),
                max(int(s["last_inference"]) for s in mine),
                sum(int(b["compute_infer"]["ns"]) for s in mine for b in s["batch_stats"]))
    except (KeyError, TypeError, ValueError):
        pass
    return None


def _stats_reading(body: bytes | None, model: str) -> StatsReading | None:
    try:
        return None if body is None else parse_stats_reading(orjson.loads(body), model)
    except orjson.JSONDecodeError:
        return None


def scrape_stats_reading(url: str, model: str, timeout_s: float = 5.0) -> StatsReading | None:
    """``parse_stats_reading`` of ``GET url`` (a statistics endpoint), for a caller with no
    event loop; None when the server does not answer it."""
    return _stats_reading(_read(url, timeout_s), model)


def served_rate(before: StatsReading | None, after: StatsReading | None,
                min_span_s: float) -> Served | None:
    """Rows/s and the model's busy share between the last batches two readings saw end:
    None without both readings, or when those batch ends are less than ``min_span_s`` apart
    (too few batches to count)."""
    if before is None or after is None:
        return None
    rows, span_s = after.rows - before.rows, (after.last_ms - before.last_ms) / 1e3
    if rows <= 0 or span_s < min_span_s:
        return None
    return Served(rows / span_s, (after.infer_ns - before.infer_ns) / 1e9 / span_s)


async def scrape_stats_reading_async(
    session: aiohttp.ClientSession, url: str | None, model: str,
    auth: RequestAuth | None = None,
) -> StatsReading | None:
    if url is None:
        return None
    return _stats_reading(await _read_async(session, url, auth), model)
