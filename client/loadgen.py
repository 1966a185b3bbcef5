"""Closed-loop load generator for KServe V2 endpoints: ``modelfn bench`` and ``bench/run.py``.

N workers each send the next request as soon as the previous one answers. After a warm-up, a
fixed window counts the requests that complete inside it; the server's average batch size comes
from Triton's ``nv_inference_count`` / ``nv_inference_exec_count`` counters on ``/metrics``, read
at the start and the end of the window. Request bodies (V2 JSON or Triton's binary tensor
extension) are serialised once before the run, so the client spends its time on HTTP only.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import struct
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import aiohttp
import numpy as np
import orjson

from modelfn.client.cpu import CpuClock
from modelfn.client.endpoint import (
    Unreachable,
    checked_metadata,
    endpoint_url,
    error_from_answer,
    infer_url,
    is_shape,
    json_kind,
    json_object,
    model_url,
    typed_array,
)
from modelfn.runtime.datatypes import BY_V2, from_numpy
from modelfn.runtime.errors import ModelfnError
from modelfn.runtime.nonfinite import json_data

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from pathlib import Path

    from modelfn.client.auth import RequestAuth

DEFAULT_CONCURRENCY = (1, 8, 32)
REQUEST_TIMEOUT_S = 60.0
_JSON_OPTIONS = orjson.OPT_SERIALIZE_NUMPY
_SAMPLE = re.compile(
    r"^(nv_inference_count|nv_inference_exec_count)(?:_total)?\{([^}]*)\}\s+(\S+)", re.MULTILINE
)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
#: V2 datatypes that JSON cannot carry: they travel only as binary data
NO_JSON_FORM = frozenset({"FP16", "BF16"})
#: seconds a signed request is sent again before it is signed anew (SigV4 dates requests)
RESIGN_S = 60.0


class LoadgenError(ModelfnError):
    """A problem with the target or the input that stops the run before it starts."""

    status_code = 400


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


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    """One serialised infer request: the same bytes are sent by every worker."""

    body: bytes
    headers: Mapping[str, str]
    rows: int
    binary: bool


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


# --- request bodies -------------------------------------------------------------------------


def _encode_bytes_tensor(array: np.ndarray) -> bytes:
    parts = []
    for item in array.ravel():
        raw = item.encode() if isinstance(item, str) else bytes(item)
        parts.append(struct.pack("<I", len(raw)) + raw)
    return b"".join(parts)


def _json_data(array: np.ndarray) -> Any:
    if from_numpy(array.dtype).is_bytes:
        return [v.decode() if isinstance(v, bytes) else str(v) for v in array.ravel()]
    flat = np.ascontiguousarray(array).ravel()
    return json_data(flat) if flat.dtype.kind == "f" else flat


def prepare_request(
    inputs: Mapping[str, np.ndarray],
    *,
    binary: bool = False,
    outputs: Sequence[str] | None = None,
    fields: Mapping[str, Any] | None = None,
) -> PreparedRequest:
    """Serialise a V2 infer request, as JSON or with the binary tensor extension.
    ``fields``: the request's own ``id``, ``parameters`` and ``outputs`` (``request_fields``
    of a V2 document), sent as they are (binary adds ``binary_data_output`` unless the
    parameters say otherwise).

    ``rows`` is the first dimension of the first input (1 for a scalar input), which is the
    number of inferences the request asks for when the model batches.
    """
    if not inputs:
        raise LoadgenError("the request has no inputs")
    tensors: list[dict[str, Any]] = []
    blobs: list[bytes] = []
    for name, array in inputs.items():
        datatype = from_numpy(array.dtype)
        if not binary and datatype.v2 in NO_JSON_FORM:
            raise LoadgenError(f"input '{name}' is {datatype.v2}, which has no JSON form in "
                               "V2: send it as binary data (--binary)")
        tensor: dict[str, Any] = {
            "name": name,
            "shape": list(array.shape),
            "datatype": datatype.v2,
        }
        if binary:
            if datatype.is_bytes:
                blob = _encode_bytes_tensor(array)
            else:
                blob = np.ascontiguousarray(array, dtype=datatype.numpy).tobytes()
            tensor["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            tensor["data"] = _json_data(array)
        tensors.append(tensor)
    header: dict[str, Any] = {**(fields or {}), "inputs": tensors}
    if outputs:
        header["outputs"] = [{"name": o} for o in outputs]
    rows = request_rows(inputs)
    if not binary:
        body = orjson.dumps(header, option=_JSON_OPTIONS)
        return PreparedRequest(body, {"Content-Type": "application/json"}, rows, False)
    header["parameters"] = {"binary_data_output": True, **(header.get("parameters") or {})}
    head = orjson.dumps(header)
    headers = {
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(len(head)),
    }
    return PreparedRequest(head + b"".join(blobs), headers, rows, True)


def request_rows(inputs: Mapping[str, np.ndarray]) -> int:
    """The rows a request of ``inputs`` carries: its first input's first dimension (1 for a
    scalar), the number of inferences it asks for when the model batches."""
    first = next(iter(inputs.values()))
    return int(first.shape[0]) if first.ndim else 1


def random_inputs(metadata: Mapping[str, Any], seed: int = 0, *,
                  rows: int = 1) -> dict[str, np.ndarray]:
    """Inputs built from V2 model metadata: ``rows`` rows in the first dimension, which must
    be variable (-1) for more than one, and every other variable dimension set to 1.

    Floating-point values are rounded to two decimals so a JSON body stays close to the size
    a real client would send.
    """
    rng = np.random.default_rng(seed)
    arrays: dict[str, np.ndarray] = {}
    for spec in metadata.get("inputs", []):
        dims = [int(d) for d in spec["shape"]]
        if rows > 1 and (not dims or dims[0] >= 0):
            raise LoadgenError(
                f"input '{spec['name']}' has shape {dims}: its first dimension is not a "
                f"batch dimension (-1), so a request cannot carry {rows} rows; the model "
                "does not batch")
        shape = tuple(rows if i == 0 and d < 0 else 1 if d < 0 else d
                      for i, d in enumerate(dims))
        datatype = BY_V2.get(spec["datatype"])
        if datatype is None:
            raise LoadgenError(f"input '{spec['name']}' has unsupported datatype {spec!r}")
        kind = datatype.numpy.kind
        if datatype.is_bytes:
            array = np.full(shape, b"modelfn", dtype=object)
        elif kind == "f":
            array = np.round(rng.standard_normal(shape), 2).astype(datatype.numpy)
        elif kind == "b":
            array = rng.integers(0, 2, shape).astype(bool)
        else:
            array = rng.integers(0, 10, shape).astype(datatype.numpy)
        arrays[spec["name"]] = array
    if not arrays:
        raise LoadgenError("the model metadata lists no inputs")
    return arrays


#: the request-level fields of a V2 infer request that a client carries as they are
REQUEST_FIELDS = ("id", "parameters", "outputs")


def request_fields(request: object) -> dict[str, Any]:
    """A V2 request document's ``id``, ``parameters`` and ``outputs``: what shapes its
    answer beside the inputs (the server checks them)."""
    if not isinstance(request, dict):
        return {}
    return {k: request[k] for k in REQUEST_FIELDS if k in request}


def inputs_from_v2_json(request: object) -> dict[str, np.ndarray]:
    """The input arrays of a V2 infer request document (flat or nested ``data``)."""
    tensors = request.get("inputs") if isinstance(request, dict) else None
    if not isinstance(tensors, list):
        raise LoadgenError('expected a V2 request, {"inputs": [{"name": ..., "datatype": ..., '
                           '"shape": [...], "data": [...]}, ...]}')
    arrays = dict(_input_tensor(tensor, i) for i, tensor in enumerate(tensors))
    if not arrays:
        raise LoadgenError("the request has no inputs")
    return arrays


def _input_tensor(tensor: object, index: int) -> tuple[str, np.ndarray]:
    if not isinstance(tensor, dict):
        raise LoadgenError(f"inputs[{index}] is {json_kind(tensor)}, not an object")
    name = tensor.get("name")
    if not isinstance(name, str) or not name:
        raise LoadgenError(f"inputs[{index}] has no name")
    missing = [f for f in ("datatype", "shape", "data") if f not in tensor]
    if missing:
        raise LoadgenError(f"input '{name}' has no {', '.join(missing)}")
    named, shape = tensor["datatype"], tensor["shape"]
    datatype = BY_V2.get(named) if isinstance(named, str) else None
    if datatype is None:
        raise LoadgenError(f"input '{name}' has unknown datatype {named!r}; expected one of "
                           f"{', '.join(BY_V2)}")
    if not is_shape(shape, variable=False):
        raise LoadgenError(f"input '{name}' has shape {shape!r}, not a list of dimensions")
    try:
        flat = typed_array(tensor["data"], datatype)
    except ValueError as exc:
        raise LoadgenError(f"input '{name}': {exc}") from None
    if flat.size != math.prod(shape):
        raise LoadgenError(f"input '{name}' has {flat.size} values for shape {shape}")
    return name, flat.reshape(shape)


def input_file_rows(path: Path) -> int:
    """The rows each request of the input file ``path`` carries (``request_rows``)."""
    try:
        if path.suffix == ".npy":
            array = np.load(path, mmap_mode="r", allow_pickle=False)
            return int(array.shape[0]) if array.ndim else 1
        return request_rows(load_inputs(path, None))
    except (OSError, ValueError) as exc:  # not an array, unreadable
        raise LoadgenError(f"{path.name}: cannot read the inputs: {exc}") from exc


def load_inputs(path: Path, metadata: Mapping[str, Any] | None) -> dict[str, np.ndarray]:
    """Inputs from a V2 request ``.json`` file or a ``.npy`` array (for a one-input model
    whose ``metadata`` has passed ``checked_metadata``)."""
    if path.suffix == ".json":
        try:
            doc = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise LoadgenError(f"{path.name}: cannot read the inputs: not JSON: {exc}") from None
        except (OSError, ValueError) as exc:  # unreadable, not UTF-8
            raise LoadgenError(f"{path.name}: cannot read the inputs: {exc}") from None
        try:
            return inputs_from_v2_json(doc)
        except LoadgenError as exc:
            raise LoadgenError(f"{path.name}: {exc.message}") from None
    if path.suffix == ".npy":
        try:
            array = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:  # not an array; an object array (pickles)
            raise LoadgenError(f"{path.name}: cannot read the inputs: {exc}") from None
        specs = (metadata or {}).get("inputs", [])
        if len(specs) != 1:
            raise LoadgenError(f"{path.name}: a .npy input needs a model with exactly one "
                               f"input; its metadata lists {len(specs)}")
        spec = specs[0]
        datatype = BY_V2.get(spec["datatype"])
        if datatype is None:
            raise LoadgenError(f"input '{spec['name']}' has unsupported datatype "
                               f"{spec['datatype']}")
        try:
            return {spec["name"]: array.astype(datatype.numpy, copy=False)}
        except (TypeError, ValueError) as exc:
            raise LoadgenError(f"{path.name}: its {array.dtype} values are not "
                               f"{datatype.v2} values: {exc}") from None
    raise LoadgenError(f"{path.name}: expected a .json V2 request or a .npy array")


# --- metrics --------------------------------------------------------------------------------


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


async def _scrape(
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
# A closed loop on a slow model is answered in bursts: the bench CNN at c=32 on one core runs
# batches of ~30 rows that take ~0.8 s each, so the answers inside a window of a few seconds
# are counted to within a burst, ±15% on 5 s. The server's statistics (Triton's extension)
# count rows when each batch ends and stamp the end of the last one, so the rows between two
# readings over the time between the batch ends they saw are whole batches.

class StatsReading(NamedTuple):
    """One reading of a model's statistics, over its versions."""

    rows: int  # rows run (``inference_count``)
    last_ms: int  # the end of the last batch, ms since the epoch (``last_inference``)
    infer_ns: int  # time inside the model's runs (``compute_infer``)


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
                sum(int(s["inference_stats"]["compute_infer"]["ns"]) for s in mine))
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


async def _scrape_stats(
    session: aiohttp.ClientSession, url: str | None, model: str,
    auth: RequestAuth | None = None,
) -> StatsReading | None:
    if url is None:
        return None
    return _stats_reading(await _read_async(session, url, auth), model)


async def _sample_metrics(
    session: aiohttp.ClientSession, metrics_url: str, stats: str | None, model: str,
    window: _Window, auth: RequestAuth | None = None,
) -> tuple[float | None, Served | None]:
    """The average batch over the window and, with a statistics URL, the rows/s counted over
    the server's whole batches (``served_rate``)."""
    await asyncio.sleep(max(0.0, window.start - time.perf_counter()))
    before = await _scrape(session, metrics_url, model, auth)
    reading_before = await _scrape_stats(session, stats, model, auth)
    await asyncio.sleep(max(0.0, window.end - time.perf_counter()))
    after = await _scrape(session, metrics_url, model, auth)
    reading_after = await _scrape_stats(session, stats, model, auth)
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
    async with aiohttp.ClientSession(
        connector=connector, timeout=timeout, skip_auto_headers=("User-Agent",)
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
