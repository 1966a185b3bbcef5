"""The dynamic batcher: one per loaded model version, invisible to the backend.

Requests queue on the event loop in arrival order. Whenever an instance is
free, the batcher takes the longest compatible run of requests from the head of
the queue (same input names, dtypes and non-batch shapes; at most
``max_batch_size`` rows; a request is never split) and puts it in that
instance's inbox. The instance's worker thread concatenates the inputs, calls
the backend, slices the outputs back per request, and returns the whole batch
to the loop with one ``call_soon_threadsafe``, where futures are resolved and
stats recorded (stats are only ever touched on the loop).

Dispatch happens at the end of the event-loop iteration in which a request
arrived, so every request parsed in that iteration joins one batch and pays
for one handoff. A batch of at most ``inline_rows`` rows (``repository.inline_rows``:
on one CPU, any batch that holds the loop briefly; with more, one cheaper than a handoff)
runs on the loop thread itself; when every batch does, no worker thread exists. An async
``run`` (a coroutine function, such as an upstream call that invokes a function with
one batched V2 request) runs each batch as a task on the loop instead; ``instances``
is then how many batches may be in flight at once, and a ``ModelfnError`` it raises
reaches each caller of the batch as it is (the upstream's status code), not as a
backend error.

With ``preserve_ordering``, answers leave in the order their batches were
dispatched even when a later batch finishes first on another instance.

A ``per_request`` run (Triton's Python backend: ``execute(requests)``) gets the batch as its
list of requests, each with its inputs as sent and its ``RequestContext``, and answers each
alone: outputs, or the exception that fails that request and no other. Its inputs are
never concatenated, so requests of different shapes batch together, up to
``max_batch_size`` rows.

Without a queue delay the batcher is work-conserving: batch 1 at low load, and
bigger batches as requests pile up behind busy instances. ``preferred_batch_size``
and ``max_queue_delay_microseconds`` follow Triton's ``GetDynamicBatch``.
Queued requests past their deadline are failed by a timer (or, with
``timeout_action: DELAY``, moved behind the others), so the 503 comes back on
time even while every instance is busy; the timer sweeps the queue at most once
per ``EXPIRY_PERIOD_NS``, so a deadline may be enforced up to that much late.

The queued request and the callback caller's ``Answer`` are in ``batch_request``; how a
batch's inputs are concatenated (padded) and its outputs split is in ``batch_assembly``.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import queue
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any, cast

from modelfn.runtime.batch_assembly import concatenate, split
from modelfn.runtime.batch_outcome import Outcome, Timings, settle
from modelfn.runtime.batch_request import Answer, Request, RequestContext
from modelfn.runtime.config import DynamicBatching
from modelfn.runtime.errors import (
    BackendError,
    InvalidInput,
    ModelNotReady,
    QueueFull,
    RequestTimeout,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Hashable, Sequence

    import numpy as np

    from modelfn.runtime.stats import ModelStats

NEVER = 1 << 62  # the deadline of a request without a timeout
EXPIRY_PERIOD_NS = 1_000_000  # the expiry timer sweeps the queue at most once a millisecond

_now = time.perf_counter_ns



class Batcher:
    """Batches ``run(instance, inputs)`` calls for one model version; see the module doc.

    ``start()`` once, then ``await infer(inputs, rows)`` from one event loop, and
    ``await stop()`` to drain. ``run`` gets whole batches, one at a time per instance.
    """

    def __init__(
        self,
        run: Callable[[int, dict[str, np.ndarray]], dict[str, np.ndarray]]
        | Callable[[int, dict[str, np.ndarray]], Awaitable[dict[str, np.ndarray]]]
        | Callable[[int, list[tuple[dict[str, np.ndarray], RequestContext | None]]],
                   list[dict[str, np.ndarray] | Exception]],
        *,
        instances: int,
        max_batch_size: int,
        policy: DynamicBatching | None,
        stats: ModelStats,
        name: str = "",
        inline_rows: int = 0,
        padded_sizes: Sequence[int] = (),
        per_request: bool = False,
    ) -> None:
        if instances < 1:
            raise ValueError(f"a batcher needs at least one instance, not {instances}")
        if inline_rows and instances > 1:
            raise ValueError("batches run inline only for a single instance: instances "
                             "run in parallel on their threads")
        policy = policy or DynamicBatching()
        queue_policy = policy.default_queue_policy
        self.name = name
        self.stats = stats
        # an async def, or an object whose __call__ is one (an upstream route)
        self._async = inspect.iscoroutinefunction(run) or inspect.iscoroutinefunction(
            type(run).__call__
        )
        self._run = cast("Callable[[int, dict[str, np.ndarray]], dict[str, np.ndarray]]", run)
        self._run_async = cast(
            "Callable[[int, dict[str, np.ndarray]], Awaitable[dict[str, np.ndarray]]]", run
        )
        if per_request and (self._async or inline_rows):
            raise ValueError("a per-request run is synchronous and runs on worker threads")
        self._per_request = per_request
        #: a per-request run: each request's inputs and context in, each one's outputs or
        #: failure out
        self._run_each = cast(
            "Callable[[int, list[tuple[dict[str, np.ndarray], RequestContext | None]]], "
            "list[dict[str, np.ndarray] | Exception]]", run)
        self._tasks: set[asyncio.Task[None]] = set()  # async batches in flight
        #: the only batch sizes the backend runs (``Backend.padded_batch_sizes``), ascending
        self._padded_sizes = tuple(padded_sizes)
        self._instances = instances
        self._max_batch_size = max_batch_size
        self._preferred = frozenset(policy.preferred_batch_size)
        self._max_preferred = min(max(self._preferred, default=max_batch_size), max_batch_size)
        self._delay_ns = policy.max_queue_delay_microseconds * 1000
        self._max_queue_size = queue_policy.max_queue_size
        self._timeout_ns = queue_policy.default_timeout_microseconds * 1000
        self._allow_timeout_override = queue_policy.allow_timeout_override
        self._delay_expired = queue_policy.timeout_action == "DELAY"
        self._queue: deque[Request] = deque()
        self._delayed: deque[Request] = deque()  # expired under timeout_action DELAY
        self._idle: list[int] = []
        self._inboxes: list[queue.SimpleQueue[list[Request] | None]] = []
        self._threads: list[threading.Thread] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._accepting = False
        self._stopping = False
        self._next_deadline = NEVER
        self._expiry_timer: asyncio.TimerHandle | None = None
        self._delay_timer: asyncio.Handle | None = None
        self._delay_when = 0.0  # the loop time _delay_timer runs at
        self._drained: asyncio.Future[None] | None = None
        self._dispatch_scheduled = False
        self._inline_rows = 0 if self._async else inline_rows
        # every batch fits: no worker thread, and no batch needs its rows counted
        self._inline_all = self._inline_rows >= max(1, max_batch_size)
        self._started = False
        # dispatched batches awaiting their answers in dispatch order (preserve_ordering)
        self._in_order: deque[list[Any]] | None = (
            deque() if policy.preserve_ordering and instances > 1 else None
        )

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop the batcher serves on (bound by its first request), for a backend
        that calls other models from its worker threads (Triton's BLS); None before."""
        return self._loop

    def start(self) -> None:
        """Start one worker thread per instance; the first ``infer`` binds the event loop."""
        if self._started:
            return
        self._started = True
        for instance in range(0 if self._inline_all or self._async else self._instances):
            inbox: queue.SimpleQueue[list[Request] | None] = queue.SimpleQueue()
            thread = threading.Thread(
                target=self._work,
                args=(instance, inbox),
                name=f"modelfn-batcher-{self.name}-{instance}",
                daemon=True,
            )
            thread.start()
            self._inboxes.append(inbox)
            self._threads.append(thread)
        self._idle = list(range(self._instances - 1, -1, -1))  # pop() hands out 0 first
        self._accepting, self._stopping = True, False

    async def stop(self, *, drain: bool = True) -> None:
        """Refuse new requests, run (``drain``) or fail the queued ones, join the workers.

        A second call while the first is still draining returns at once.
        """
        if not self._started or self._stopping:
            return
        self._accepting, self._stopping = False, True
        if not drain:
            now = _now()
            for request in itertools.chain(self._queue, self._delayed):
                if not request.future.done():
                    reason = "the model is being unloaded"
                    self.stats.record_failure("REJECTED", now - request.arrival_ns)
                    request.future.set_exception(ModelNotReady(self.name, reason=reason))
            self._queue.clear()
            self._delayed.clear()
            self.stats.pending = 0
        if self._loop is not None and (self._queue or self._delayed or self._busy):
            self._drained = self._loop.create_future()
            self._dispatch()
            await self._drained
        for timer in (self._expiry_timer, self._delay_timer):
            if timer is not None:
                timer.cancel()
        self._expiry_timer = self._delay_timer = None
        self._next_deadline = NEVER
        for inbox in self._inboxes:
            inbox.put(None)
        for thread in self._threads:
            thread.join()  # idle workers that were just told to exit: microseconds
        self._inboxes, self._threads, self._idle, self._drained = [], [], [], None
        self._started = False

    async def infer(
        self, inputs: dict[str, np.ndarray], rows: int, timeout_us: int | None = None,
        context: RequestContext | None = None,
    ) -> dict[str, np.ndarray]:
        """Run one request of ``rows`` rows through a batch; returns its own outputs.
        ``context`` reaches a per-request run only."""
        request = self._enqueue(inputs, rows, timeout_us, None, context)
        future = cast("asyncio.Future[dict[str, np.ndarray]]", request.future)
        try:
            return await future
        except asyncio.CancelledError:
            if request.future.cancelled():
                self._withdraw(request)
            raise

    def submit(
        self, inputs: dict[str, np.ndarray], rows: int, timeout_us: int | None = None,
        context: RequestContext | None = None,
    ) -> Answer:
        """``infer`` for a caller that takes the answer in a callback (the HTTP edge's
        shortcut): the ``Answer`` its outputs or its failure will settle, which the caller
        cancels if it goes away. Refusals (not serving, too many rows, a full queue) raise
        here, as ``infer``'s do."""
        answer = Answer()
        answer._request = self._enqueue(inputs, rows, timeout_us, answer, context)
        answer._batcher = self
        return answer

    def _enqueue(self, inputs: dict[str, np.ndarray], rows: int,
                 timeout_us: int | None, answer: Answer | None = None,
                 context: RequestContext | None = None) -> Request:
        arrival = _now()
        if not self._accepting:
            self.stats.record_failure("REJECTED", 0)
            raise ModelNotReady(self.name, reason="it is not serving requests")
        key: Hashable
        if not self._max_batch_size:
            rows, key = 1, None
        elif rows > self._max_batch_size:
            self.stats.record_failure("OTHER", 0)
            raise InvalidInput(
                f"inference request batch-size must be <= {self._max_batch_size} for '{self.name}'"
            )
        elif self._per_request:  # never concatenated: any shapes go together
            key = None
        elif len(inputs) == 1:
            [(name, array)] = inputs.items()
            key = ((name, array.dtype, array.shape[1:]),)
        else:
            key = tuple(
                (name, inputs[name].dtype, inputs[name].shape[1:]) for name in sorted(inputs)
            )
        if self._max_queue_size and len(self._queue) + len(self._delayed) >= self._max_queue_size:
            self.stats.record_failure("REJECTED", _now() - arrival)
            raise QueueFull()
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        timeout_ns = self._timeout_ns
        if timeout_us and self._allow_timeout_override and timeout_us * 1000 < timeout_ns:
            timeout_ns = timeout_us * 1000
        deadline = arrival + timeout_ns if timeout_ns else NEVER
        request = Request(inputs, rows, key,
                          loop.create_future() if answer is None else answer, arrival, deadline,
                          context=context)
        self._queue.append(request)
        self.stats.pending += 1
        if self._idle and not self._dispatch_scheduled:
            # Dispatch at the end of this loop iteration rather than now: every request
            # parsed in the same iteration joins the batch, for one thread handoff.
            self._dispatch_scheduled = True
            loop.call_soon(self._dispatch)
        if deadline < self._next_deadline and not request.started_ns:
            self._arm_expiry(deadline, arrival)
        return request

    @property
    def _busy(self) -> bool:
        return len(self._idle) < self._instances

    def _withdraw(self, request: Request) -> None:
        """The caller gave up (client gone): drop its request if it is still queued."""
        for waiting in (self._queue, self._delayed):
            if not request.started_ns and request in waiting:
                waiting.remove(request)
                self.stats.pending -= 1
        self.stats.record_failure("CANCELED", _now() - request.arrival_ns)

    def _dispatch(self) -> None:
        """Hand batches to idle instances for as long as both exist."""
        self._dispatch_scheduled = False
        now = _now()
        if now >= self._next_deadline:
            self._expire(now)
        while self._idle and (self._queue or self._delayed):
            batch = self._take_batch(now)
            if batch is None:
                break
            for request in batch:
                request.started_ns = now
            instance = self._idle.pop()
            if self._inline_all or (self._inline_rows
                                    and sum(r.rows for r in batch) <= self._inline_rows):
                self._complete(instance, batch, *self._execute(instance, batch))
                now = _now()
            elif self._async:
                if self._in_order is not None:
                    self._in_order.append([batch, None])
                assert self._loop is not None
                task = self._loop.create_task(self._execute_async(instance, batch))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            else:
                if self._in_order is not None:
                    self._in_order.append([batch, None])
                self._inboxes[instance].put(batch)
        self.stats.pending = len(self._queue) + len(self._delayed)
        drained = self._drained
        if drained is not None and not self.stats.pending and not self._busy:
            if not drained.done():
                drained.set_result(None)

    def _take_batch(self, now: int) -> list[Request] | None:
        """The batch to run now (Triton's ``GetDynamicBatch``), or None to wait for more."""
        if not self._max_batch_size:
            return [self._queue.popleft() if self._queue else self._delayed.popleft()]
        waiting = itertools.chain(self._queue, self._delayed) if self._delayed else self._queue
        head = self._queue[0] if self._queue else self._delayed[0]
        key, oldest = head.key, head.arrival_ns
        rows = count = best_count = 0
        full = False
        for request in waiting:
            if count:
                grown = rows + request.rows
                if request.key != key or grown > self._max_batch_size:
                    full = True
                    break
                if grown > self._max_preferred and not best_count:
                    best_count = count  # past the largest preferred size: cap the batch here
                oldest = min(oldest, request.arrival_ns)  # DELAY-ed requests are older
            rows += request.rows
            count += 1
            if rows in self._preferred:
                best_count = count
        delay_exceeded = self._stopping or 0 < self._delay_ns <= now - oldest
        if best_count and not delay_exceeded:
            count = best_count
        elif not (full or rows >= self._max_preferred or not self._delay_ns or delay_exceeded):
            self._wake_at(oldest + self._delay_ns, now)
            return None
        return [
            self._queue.popleft() if self._queue else self._delayed.popleft() for _ in range(count)
        ]

    def _wake_at(self, wake_ns: int, now: int) -> None:
        assert self._loop is not None
        when = self._loop.time() + (wake_ns - now) / 1e9
        timer = self._delay_timer
        # the time is kept here: for a wake-up under half a millisecond away uvloop's
        # call_at returns a plain Handle (it runs it soon), which has no when()
        if timer is not None and self._delay_when <= when:
            return
        if timer is not None:
            timer.cancel()
        self._delay_timer = self._loop.call_at(when, self._on_delay_timer)
        self._delay_when = when

    def _on_delay_timer(self) -> None:
        self._delay_timer = None
        self._dispatch()

    def _arm_expiry(self, deadline_ns: int, now: int) -> None:
        assert self._loop is not None
        self._next_deadline = deadline_ns
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
        delay_ns = max(deadline_ns - now, EXPIRY_PERIOD_NS)
        self._expiry_timer = self._loop.call_later(delay_ns / 1e9, self._on_expiry_timer)

    def _on_expiry_timer(self) -> None:
        self._expiry_timer = None
        self._expire(_now())
        self._dispatch()

    def _expire(self, now: int) -> None:
        """Fail (REJECT) or move back (DELAY) the queued requests past their deadline."""
        expired = [request for request in self._queue if request.deadline_ns <= now]
        if expired:
            self._queue = deque(request for request in self._queue if request.deadline_ns > now)
            for request in expired:
                if self._delay_expired:
                    request.deadline_ns = NEVER
                    self._delayed.append(request)
                elif not request.future.done():
                    self.stats.record_failure("REJECTED", now - request.arrival_ns)
                    request.future.set_exception(RequestTimeout())
        self._next_deadline = min((request.deadline_ns for request in self._queue), default=NEVER)
        if self._next_deadline != NEVER:
            self._arm_expiry(self._next_deadline, now)

    def _work(self, instance: int, inbox: queue.SimpleQueue[list[Request] | None]) -> None:
        """One instance's worker thread: run the batches put in its inbox, one at a time."""
        while (batch := inbox.get()) is not None:
            outcome, timings = self._execute(instance, batch)
            assert self._loop is not None
            try:
                self._loop.call_soon_threadsafe(self._finish, instance, batch, outcome, timings)
            except RuntimeError:  # the event loop is closed: nobody is waiting any more
                return

    async def _execute_async(self, instance: int, batch: list[Request]) -> None:
        """``_execute`` for an async ``run``: a task on the loop, then ``_finish``."""
        try:
            started = _now()
            inputs = concatenate(batch, self._padded_sizes)
            concatenated = _now()
            outputs = await self._run_async(instance, inputs)
            ran = _now()
            outcome: Outcome = split(outputs, batch, self.name, self._max_batch_size,
                                      self._padded_sizes)
            timings = (concatenated - started, ran - concatenated, _now() - ran)
        except Exception as exc:
            outcome, timings = exc, (0, 0, 0)
        self._finish(instance, batch, outcome, timings)

    def _execute(self, instance: int, batch: list[Request]) -> tuple[Outcome, Timings]:
        """Concatenate, run and split one batch; the backend's failure is the batch's."""
        if self._per_request:
            return self._execute_each(instance, batch)
        try:
            started = _now()
            inputs = concatenate(batch, self._padded_sizes)
            concatenated = _now()
            outputs = self._run(instance, inputs)
            ran = _now()
            outcome = split(outputs, batch, self.name, self._max_batch_size, self._padded_sizes)
            return outcome, (concatenated - started, ran - concatenated, _now() - ran)
        except Exception as exc:
            return exc, (0, 0, 0)

    def _execute_each(self, instance: int, batch: list[Request]) -> tuple[Outcome, Timings]:
        """Run one batch request by request (``per_request``): one answer or failure each."""
        try:
            started = _now()
            answers = self._run_each(instance, [(r.inputs, r.context) for r in batch])
            if len(answers) != len(batch):
                raise BackendError(f"model '{self.name}' answered {len(answers)} of the "
                                   f"{len(batch)} requests of a batch")
            return answers, (0, _now() - started, 0)
        except Exception as exc:
            return exc, (0, 0, 0)

    def _finish(
        self, instance: int, batch: list[Request], outcome: Outcome, timings: Timings
    ) -> None:
        """Back on the loop from a worker: complete the batch, then dispatch the next.

        With ``preserve_ordering`` a batch that overtook an earlier one (on another
        instance) is held until the earlier ones are answered.
        """
        if self._in_order is None:
            self._complete(instance, batch, outcome, timings)
        else:
            self._idle.append(instance)
            for slot in self._in_order:
                if slot[0] is batch:
                    slot[1] = (outcome, timings)
                    break
            while self._in_order and self._in_order[0][1] is not None:
                done, result = self._in_order.popleft()
                assert result is not None
                self._resolve(done, *result)
        self._dispatch()

    def _complete(
        self, instance: int, batch: list[Request], outcome: Outcome, timings: Timings
    ) -> None:
        """Free the instance and resolve the batch."""
        self._idle.append(instance)
        self._resolve(batch, outcome, timings)

    def _resolve(self, batch: list[Request], outcome: Outcome, timings: Timings) -> None:
        """Resolve the batch's futures and record its stats (``batch_outcome.settle``)."""
        settle(batch, outcome, timings, self.stats,
               keep_errors=self._async or self._per_request, per_request=self._per_request)
