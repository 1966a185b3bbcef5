"""Calls to functions: pooled connections, SigV4 for ``AWS_IAM`` URLs, retries while cold.

A function at zero answers its first request seconds later, or refuses the connection
while its platform starts it; inference is idempotent, so connect errors and 502, 503 and
504 answers are retried with jittered exponential backoff until the cold-start budget is
spent. A 503 that says the request waited out its queue timeout (``RequestTimeout``) is
final: the caller's ``timeout``, or the model's queue policy, said not to wait longer.
Only ``cold_concurrency`` requests per upstream retry at once: the rest wait their turn
instead of hammering a function that is still starting, so the client sees one answer and
the function never sees a retry storm.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import orjson

from modelfn.client.auth import Signer
from modelfn.net.headers import FRAMING, HOP_BY_HOP
from modelfn.net.http1 import Http1Client
from modelfn.runtime.errors import ModelfnError, RequestTimeout

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping

    from modelfn.gateway.metrics import RouteStats
    from modelfn.gateway.router import Upstream
    from modelfn.net.http1 import Reply

RETRY_STATUSES = frozenset({502, 503, 504})
DEFAULT_BUDGET_S = 30.0
FIRST_BACKOFF_S = 0.05
MAX_BACKOFF_S = 2.0
#: what the gateway answers itself: the client's 100-continue (its server did; the function
#: gets the whole body at once, so it has nothing to expect) and its credentials with us
_ANSWERED_HERE = frozenset({"expect", "authorization", "x-api-key"})
#: request headers not forwarded: the connection's, the body's framing (the gateway sends
#: the body whole, framed anew), the client's ``host``, and what the gateway answered
NOT_FORWARDED = HOP_BY_HOP | FRAMING | _ANSWERED_HERE | {"host"}


class UpstreamUnavailable(ModelfnError):
    """No answer from the function within the cold-start budget."""

    status_code = 503

    def __init__(self, upstream: Upstream, seconds: float, last: str) -> None:
        super().__init__(f"model '{upstream.model}' ({upstream.url}) did not answer within "
                         f"{seconds:.0f} s: {last}")


class UpstreamTimeout(UpstreamUnavailable):
    status_code = 504


@dataclass
class _Cold:
    gate: asyncio.Semaphore
    waiting: int = field(default=0)


def is_queue_timeout(status: int, body: bytes) -> bool:
    """Whether a function's answer is V2's queue timeout: 503 ``{"error": "Request timeout
    expired"}``, as Triton and modelfn write it."""
    if status != 503 or len(body) > _MAX_ERROR_BYTES:
        return False
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    return type(doc) is dict and doc.get("error") == RequestTimeout.MESSAGE


#: an error answer larger than this is not a V2 error document
_MAX_ERROR_BYTES = 4096


class UpstreamResponse:
    """A function's whole answer: the status, the headers (``headers.get`` is
    case-insensitive; ``raw_headers`` as sent) and the body (``aread``, or ``aiter_raw``
    in one piece)."""

    def __init__(self, answer: Reply) -> None:
        self.status_code = answer.status
        self.headers = answer.headers
        self.raw_headers = answer.headers.raw
        self.body = self._body = answer.body

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        yield self._body

    async def aread(self) -> bytes:
        return self._body

    async def aclose(self) -> None:
        return None


#: no answer at all from the function: worth a retry while it may be starting
_UNANSWERED = (OSError, TimeoutError)


class UpstreamClient:
    def __init__(self, *, budget_s: float = DEFAULT_BUDGET_S, cold_concurrency: int = 4,
                 timeout_s: float = 300.0, signer: Signer | None = None,
                 rng: random.Random | None = None) -> None:
        self.budget_s = budget_s
        self.cold_concurrency = cold_concurrency
        # a lean HTTP/1.1 client (modelfn.net.http1): see bench/RESULTS.md against aiohttp
        # and httpx
        self.timeout_s = timeout_s
        self._http = Http1Client(connect_timeout_s=min(5.0, budget_s))
        self._signer = signer
        self._rng = rng or random.Random()
        self._cold: dict[str, _Cold] = {}

    async def close(self) -> None:
        self._http.close()

    def _sign(self, upstream: Upstream, method: str, url: str, headers: dict[str, str],
              body: bytes) -> dict[str, str]:
        if upstream.auth != "iam":
            return headers
        if self._signer is None:
            self._signer = Signer()
        return self._signer.sign(method, url, headers, body, upstream.region)

    async def send(self, upstream: Upstream, method: str, target: str,
                   headers: Mapping[str, str], body: bytes, stats: RouteStats | None = None,
                   codes: dict[int, int] | None = None) -> UpstreamResponse:
        """Send one request (``target`` is the path and query), retrying while cold.

        The one instrumented call to a function: with ``stats``, what it cost is counted
        there (its retries, its wait on a cold function, its latency) and its status (the
        answer's, or the error's) in ``codes`` (``stats.codes`` unless given)."""
        url = upstream.url.rstrip("/") + target
        forwarded = {k: v for k, v in headers.items() if k.lower() not in NOT_FORWARDED}
        started = time.perf_counter()
        deadline = started + self.budget_s
        backoff = FIRST_BACKOFF_S
        cold: _Cold | None = None
        holding = False
        retries = 0
        try:
            while True:
                signed = self._sign(upstream, method, url, forwarded, body)
                response: UpstreamResponse | None
                try:
                    response = UpstreamResponse(await self._http.request(
                        method, url, signed, body, self.timeout_s))
                except _UNANSWERED as exc:
                    last, response = f"{type(exc).__name__}: {exc}", None
                else:
                    assert response is not None
                    if response.status_code not in RETRY_STATUSES or is_queue_timeout(
                            response.status_code, response.body):
                        break
                    last = f"HTTP {response.status_code}"
                now = time.perf_counter()
                if now + backoff > deadline:
                    if response is not None:
                        break  # the function's own answer, unchanged
                    raise UpstreamUnavailable(upstream, now - started, last)
                if response is not None:
                    await response.aclose()
                if cold is None:  # from now on this request is one of the capped retriers
                    cold = self._enter_cold(upstream.url)
                    await cold.gate.acquire()
                    holding = True
                retries += 1
                await asyncio.sleep(backoff * (0.5 + self._rng.random() / 2))
                backoff = min(backoff * 2, MAX_BACKOFF_S)
        except ModelfnError as exc:
            if stats is not None:
                (stats.codes if codes is None else codes)[exc.status_code] += 1
            raise
        finally:
            if holding and cold is not None:
                cold.gate.release()
            if cold is not None:
                cold.waiting -= 1
            if stats is not None:
                stats.retries += retries
                if cold is not None:
                    stats.cold_wait_s += time.perf_counter() - started
        if stats is not None:
            stats.latency.observe(time.perf_counter() - started)
            (stats.codes if codes is None else codes)[response.status_code] += 1
        return response

    def _enter_cold(self, url: str) -> _Cold:
        cold = self._cold.get(url)
        if cold is None:
            cold = self._cold[url] = _Cold(asyncio.Semaphore(self.cold_concurrency))
        cold.waiting += 1
        return cold
