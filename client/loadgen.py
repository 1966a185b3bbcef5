"""Closed-loop load generator for KServe V2 endpoints: ``modelfn bench`` and ``bench/run.py``.

N workers each send the next request as soon as the previous one answers. After a warm-up, a
fixed window counts the requests that complete inside it; the server's average batch size comes
from Triton's ``nv_inference_count`` / ``nv_inference_exec_count`` counters on ``/metrics``, read
at the start and the end of the window (``scrape``). Request bodies (V2 JSON or Triton's binary
tensor extension) are serialised once before the run (``bodies``), so the client spends its
time on HTTP only.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp
import numpy as np

from modelfn.client.bodies import LoadgenError, load_inputs, prepare_request, random_inputs
from modelfn.client.cpu import CpuClock
from modelfn.client.endpoint import (
    Unreachable,
    checked_metadata,
    endpoint_url,
    error_from_answer,
    infer_url,
    json_object,
    model_url,
)
from modelfn.client.scrape import (
    batch_size,
    scrape_batch_counters_async,
    scrape_stats_reading_async,
    served_rate,
    stats_url,
)
from modelfn.runtime.errors import ModelfnError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from pathlib import Path

    from modelfn.client.auth import RequestAuth
    from modelfn.client.bodies import PreparedRequest
    from modelfn.client.scrape import Served

DEFAULT_CONCURRENCY = (1, 8, 32)
REQUEST_TIMEOUT_S = 60.0
#: seconds a signed request is sent again before it is signed anew (SigV4 dates requests)
RESIGN_S = 60.0


class NoRequestCompleted(ModelfnError):
    """Runs that completed no request: the status of their first error (503 when it was no
    answer at all, 504 when nothing failed but nothing came back inside the window)."""

    def __init__(self, failed: Sequence[LoadResult]) -> None:
        levels = ",".join(str(r.concurrency) for r in failed)
        errors = sum(r.errors for r in failed)
        first = next((r for r in failed if r.first_error), None)
        if first is None:
            super().__init__(f"no request completed at c={levels}: none answered inside the "
                             f"{failed[0].duration_s:g} s window")
            self.status_code = 504
        else:
            super().__init__(f"no request completed at c={levels}: {errors} failed; first: "
                             f"{first.first_error}")
            self.status_code = first.error_status or 503


@dataclass(slots=True)
class LoadResult:
    model: str
    concurrency: int
    binary: bool
    duration_s: float
    requests: int
    rows: int
    errors: int
    req_per_s: float
    rows_per_s: float
    p50_ms: float | None  # None when no request completed in the window
    p90_ms: float | None
    p99_ms: float | None
    mean_ms: float | None
    avg_batch_size: float | None
    first_error: str | None = None
    body_bytes: int = 0
    billed_ms: float | None = None  # mean of each latency rounded up to 1 ms (Lambda's bill)
    client_cpu: float | None = None  # share of a core the client itself used in the window
    #: what counted the throughput: the answers inside the window, or the server's batches
    rate_from: str = "answers"
    #: the share of the window the model's instances spent running it (``Served.busy``)
    busy: float | None = None
    #: the HTTP status of ``first_error`` (None when it was no answer: refused, timed out)
    error_status: int | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class _Window:
    """What the workers record while a run is under way."""

    start: float
    end: float
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    first_error: str | None = None
    error_status: int | None = None

    def fail(self, message: str) -> None:
        self.errors += 1
        if self.first_error is None:
            self.first_error = message

    def fail_answer(self, status: int, body: bytes) -> None:
        """An error answer; only the first is read (``error_from_answer``)."""
        self.errors += 1
        if self.first_error is None:
            self.first_error = error_from_answer(status, body).message
            self.error_status = status


# --- the load loop --------------------------------------------------------------------------


async def fetch_metadata(
    url: str, model: str, version: str | None = None, timeout_s: float = 10.0,
    auth: RequestAuth | None = None,
) -> dict[str, Any]:
    """The model's V2 metadata, with the errors and checks of ``V2Client.metadata``."""
    target = model_url(url, model, version)
    headers = {} if auth is None else auth.headers("GET", target, {})
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(target, headers=headers) as resp,
        ):
            body = await resp.read()
            status = resp.status
    except aiohttp.ClientConnectorError as exc:
        raise Unreachable(f"{url} refused the connection: is the server running?") from exc
    except TimeoutError as exc:
        raise Unreachable(f"GET {target} got no answer within {timeout_s:g} s") from exc
    except aiohttp.ClientError as exc:
        raise Unreachable(f"GET {target} failed: {type(exc).__name__}: {exc}") from exc
    if status != 200:
        raise error_from_answer(status, body)
    return checked_metadata(json_object(body, target), target)


def _header_source(auth: RequestAuth | None, url: str,
                   request: PreparedRequest) -> Callable[[], Mapping[str, str]]:
    """The headers each request is sent with: the request's own with the credentials, made
    once, or signed again every ``RESIGN_S`` seconds when SigV4 dates them."""
    if auth is None:
        return lambda: request.headers
    made, stamp = auth.headers("POST", url, request.headers, request.body), time.monotonic()
    if not auth.signs:
        return lambda: made

    def current() -> Mapping[str, str]:
        nonlocal made, stamp
        if time.monotonic() - stamp > RESIGN_S:
            made = auth.headers("POST", url, request.headers, request.body)
            stamp = time.monotonic()
        return made

    return current


async def _worker(
    session: aiohttp.ClientSession, url: str, request: PreparedRequest, window: _Window,
    headers: Callable[[], Mapping[str, str]],
) -> None:
    clock = time.perf_counter
    body = request.body
    while True:
        start = clock()
        if start >= window.end:
            return
        try:
            async with session.post(url, data=body, headers=headers()) as resp:
                payload = await resp.read()
                status = resp.status
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            if start >= window.start:
                window.fail(repr(exc))
            continue
        end = clock()
        if end < window.start or end > window.end:
            continue
        if status == 200:
            window.latencies.append(end - start)
        else:
            window.fail_answer(status, payload)


async def _sample_metrics(
    session: aiohttp.ClientSession, metrics_url: str, stats: str | None, model: str,
    window: _Window, auth: RequestAuth | None = None,
) -> tuple[float | None, Served | None]:
    """The average batch over the window and, with a statistics URL, the rows/s counted over
    the server's whole batches (``served_rate``)."""
    await asyncio.sleep(max(0.0, window.start - time.perf_counter()))
    before = await scrape_batch_counters_async(session, metrics_url, model, auth)
    reading_before = await scrape_stats_reading_async(session, stats, model, auth)
    await asyncio.sleep(max(0.0, window.end - time.perf_counter()))
    after = await scrape_batch_counters_async(session, metrics_url, model, auth)
    reading_after = await scrape_stats_reading_async(session, stats, model, auth)
    return (batch_size(before, after),
            served_rate(reading_before, reading_after, (window.end - window.start) / 2))


async def _sample_cpu(clock: CpuClock, window: _Window) -> None:
    await asyncio.sleep(max(0.0, window.start - time.perf_counter()))
    clock.start()
    await asyncio.sleep(max(0.0, window.end - time.perf_counter()))
    clock.stop()


async def run_load(
    url: str,
    model: str,
    request: PreparedRequest,
    *,
    concurrency: int,
    duration: float,
    warmup: float = 2.0,
    version: str | None = None,
    metrics_url: str | None = None,
    stats_url: str | None = None,
    request_timeout: float = REQUEST_TIMEOUT_S,
    auth: RequestAuth | None = None,
) -> LoadResult:
    """One closed-loop run: ``concurrency`` workers, ``warmup`` seconds, then a ``duration`` window.

    ``metrics_url`` defaults to ``URL/metrics``; without a readable one the batch size is None.
    ``stats_url``: the statistics endpoint of the one server behind ``url`` (not of one
    replica of several), whose whole batches then give the throughput (``served_rate``); the
    answers counted inside the window give it otherwise, and when that endpoint cannot.
    ``client_cpu`` is the share of a core this process used during the window: near 1, the
    client, not the server, was the bottleneck (``modelfn.client.cpu``).
    The run ends by itself: workers stop sending at the end of the window, and a request still
    in flight is abandoned after ``request_timeout`` seconds. ``auth``: the credentials every
    request (and each scrape) carries.
    """
    if concurrency < 1 or duration <= 0 or warmup < 0:
        raise LoadgenError("concurrency must be >= 1, duration > 0 and warmup >= 0")
    target = infer_url(url, model, version)
    metrics_url = metrics_url or endpoint_url(url, "/metrics")
    headers = _header_source(auth, target, request)
    connector = aiohttp.TCPConnector(limit=concurrency + 1, ttl_dns_cache=None)
    timeout = aiohttp.ClientTimeout(total=request_timeout)
    # no Accept-Encoding: the server would compress every answer (as Triton does when
    # asked), and the load would measure gzip rather than serving, as wrk's does not
    async with aiohttp.ClientSession(
        connector=connector, timeout=timeout, skip_auto_headers=("User-Agent", "Accept-Encoding")
    ) as session:
        now = time.perf_counter()
        window = _Window(start=now + warmup, end=now + warmup + duration)
        workers = [
            asyncio.create_task(_worker(session, target, request, window, headers))
            for _ in range(concurrency)
        ]
        batch = asyncio.create_task(
            _sample_metrics(session, metrics_url, stats_url, model, window, auth))
        clock = CpuClock()
        cpu = asyncio.create_task(_sample_cpu(clock, window))
        grace = window.end + request_timeout + 5.0 - time.perf_counter()
        done, pending = await asyncio.wait([*workers, batch, cpu], timeout=grace)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        avg_batch, served = (batch.result() if batch in done and not batch.cancelled()
                             else (None, None))
        for task in done:
            if task not in (batch, cpu) and task.exception() is not None:
                window.fail(repr(task.exception()))
    return _summarise(model, concurrency, request, duration, window, avg_batch, clock.share,
                      served)


def _summarise(
    model: str,
    concurrency: int,
    request: PreparedRequest,
    duration: float,
    window: _Window,
    avg_batch: float | None,
    client_cpu: float | None = None,
    served: Served | None = None,
) -> LoadResult:
    """``served``, when the server counted it, gives the throughput; the requests and the
    latencies are the client's own."""
    latencies = np.asarray(window.latencies) * 1e3
    count = len(latencies)
    rate = count / duration if served is None else served.rows_per_s / request.rows
    p50 = p90 = p99 = mean = billed = None
    if count:
        p50, p90, p99 = (float(v) for v in np.percentile(latencies, [50, 90, 99]))
        mean = float(latencies.mean())
        billed = float(np.ceil(latencies).mean())
    return LoadResult(
        model=model,
        concurrency=concurrency,
        binary=request.binary,
        duration_s=duration,
        requests=count,
        rows=count * request.rows,
        errors=window.errors,
        req_per_s=rate,
        rows_per_s=rate * request.rows,
        p50_ms=p50,
        p90_ms=p90,
        p99_ms=p99,
        mean_ms=mean,
        avg_batch_size=avg_batch,
        first_error=window.first_error,
        error_status=window.error_status,
        body_bytes=len(request.body),
        billed_ms=billed,
        client_cpu=client_cpu,
        rate_from="answers" if served is None else "batches",
        busy=None if served is None else served.busy,
    )


def event_loop_runner() -> asyncio.Runner:
    try:
        import uvloop
    except ImportError:
        return asyncio.Runner()
    return asyncio.Runner(loop_factory=uvloop.new_event_loop)


def normalize_url(url: str) -> str:
    """``host:port`` as ``http://host:port`` (what a user types after curl); no other scheme."""
    if "://" not in url:
        return f"http://{url}"
    scheme = url.split("://", 1)[0].lower()
    if scheme not in ("http", "https"):
        raise LoadgenError(f"{url}: the URL must be http:// or https://, not {scheme}://")
    return url


def run_bench(
    url: str,
    model: str,
    *,
    concurrency: Sequence[int] = DEFAULT_CONCURRENCY,
    duration: float = 10.0,
    warmup: float = 2.0,
    binary: bool = False,
    version: str | None = None,
    input_path: Path | None = None,
    rows_per_request: int = 1,
    metrics_url: str | None = None,
    count_batches: bool = False,
    request_timeout: float = REQUEST_TIMEOUT_S,
    auth: RequestAuth | None = None,
) -> list[LoadResult]:
    """Build the request (from a file, else from the model's metadata, ``rows_per_request``
    rows in its batch dimension) and run each concurrency. ``count_batches``: count the
    throughput over the server's whole batches, from URL's own statistics (``run_load``'s
    ``stats_url``: URL must be that one server). ``auth``: the credentials every call
    carries."""
    url = normalize_url(url)
    stats = stats_url(url, model) if count_batches else None
    with event_loop_runner() as runner:
        metadata = None
        if input_path is None or input_path.suffix == ".npy":
            metadata = runner.run(fetch_metadata(url, model, version, auth=auth))
        inputs = (load_inputs(input_path, metadata) if input_path
                  else random_inputs(metadata or {}, rows=rows_per_request))
        request = prepare_request(inputs, binary=binary)
        return [
            runner.run(
                run_load(
                    url,
                    model,
                    request,
                    concurrency=c,
                    duration=duration,
                    warmup=warmup,
                    version=version,
                    metrics_url=metrics_url,
                    stats_url=stats,
                    request_timeout=request_timeout,
                    auth=auth,
                )
            )
            for c in concurrency
        ]
