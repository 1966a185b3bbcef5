"""The dynamic batcher, driven directly with a numpy stand-in for the backend.

``FakeModel`` blocks every call on a gate (a ``threading.Condition``) so a test
decides when instances are busy; batches are then formed from whatever queued
meanwhile, which makes batch composition deterministic.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from typing import TYPE_CHECKING

import numpy as np
import pytest

from modelfn.runtime.batch_assembly import padded_batch
from modelfn.runtime.batch_request import RequestContext
from modelfn.runtime.batching import Batcher
from modelfn.runtime.config import DynamicBatching, QueuePolicy
from modelfn.runtime.errors import (
    BackendError,
    InvalidInput,
    ModelfnError,
    ModelNotReady,
    QueueFull,
    RequestTimeout,
)
from modelfn.runtime.stats import ModelStats

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    Make = Callable[..., tuple["Batcher", "FakeModel"]]

Tensors = dict[str, np.ndarray]


class FakeModel:
    """y = 2 * x and s = row sums, on worker threads that each wait for a pass through the gate."""

    def __init__(self, *, open_gate: bool = True) -> None:
        self._gate = threading.Condition()
        self._open = False
        self._passes = 0
        if open_gate:
            self.open()
        self.calls: list[tuple[int, Tensors]] = []  # (instance, inputs) per batch
        self.threads: list[int] = []  # the thread that ran each batch
        self.running = 0
        self.max_running = 0
        self.fail_next = 0  # how many of the next batches raise
        self.bad_rows = False  # return one row too many
        self._lock = threading.Lock()

    def allow(self, batches: int) -> None:
        """Let that many batches through the gate."""
        with self._gate:
            self._passes += batches
            self._gate.notify_all()

    def open(self) -> None:
        with self._gate:
            self._open = True
            self._gate.notify_all()

    def _wait_at_gate(self) -> None:
        with self._gate:
            passed = self._gate.wait_for(lambda: self._open or self._passes > 0, timeout=10)
            assert passed, "the test never opened the gate"
            if not self._open:
                self._passes -= 1

    def __call__(self, instance: int, inputs: Tensors) -> Tensors:
        with self._lock:
            self.calls.append((instance, inputs))
            self.threads.append(threading.get_ident())
            self.running += 1
            self.max_running = max(self.max_running, self.running)
        try:
            self._wait_at_gate()
            if self.fail_next:
                self.fail_next -= 1
                raise RuntimeError("ORT: invalid dimensions for input x")
            x = inputs["x"]
            if self.bad_rows:
                return {"y": np.concatenate([x, x[:1]]) * 2}
            return {"y": x * 2, "s": x.reshape(len(x), -1).sum(axis=1)}
        finally:
            with self._lock:
                self.running -= 1

    @property
    def batch_rows(self) -> list[int]:
        return [len(inputs["x"]) for _, inputs in self.calls]


@pytest.fixture
async def make() -> AsyncIterator[Make]:
    made: list[tuple[Batcher, FakeModel]] = []

    def factory(
        *,
        max_batch_size: int = 8,
        instances: int = 1,
        policy: DynamicBatching | None = None,
        open_gate: bool = True,
        inline_rows: int = 0,
        padded_sizes: tuple[int, ...] = (),
    ) -> tuple[Batcher, FakeModel]:
        model = FakeModel(open_gate=open_gate)
        batcher = Batcher(
            model,
            instances=instances,
            max_batch_size=max_batch_size,
            policy=policy,
            stats=ModelStats("m", "1"),
            name="m",
            inline_rows=inline_rows,
            padded_sizes=padded_sizes,
        )
        batcher.start()
        made.append((batcher, model))
        return batcher, model

    yield factory
    for batcher, model in made:
        model.open()
        await batcher.stop()


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.001)


def rows_of(value: float, rows: int = 1, width: int = 3) -> np.ndarray:
    return np.full((rows, width), value, dtype=np.float32)


def submit(batcher: Batcher, x: np.ndarray, **kwargs: int) -> asyncio.Task[Tensors]:
    return asyncio.create_task(batcher.infer({"x": x}, len(x), **kwargs))


async def busy(batcher: Batcher, model: FakeModel) -> asyncio.Task[Tensors]:
    """Occupy the (single) instance with a one-row request held at the closed gate."""
    blocker = submit(batcher, rows_of(-1))
    await until(lambda: len(model.calls) == 1)
    return blocker


async def test_single_request_runs_alone_at_once(make: Make) -> None:
    batcher, model = make()
    x = rows_of(3, rows=2)
    out = await batcher.infer({"x": x}, 2)
    assert model.batch_rows == [2]
    assert model.calls[0][1]["x"] is x  # a batch of one is passed through untouched
    np.testing.assert_array_equal(out["y"], x * 2)


async def test_requests_queued_behind_a_busy_instance_form_one_batch(
    make: Make,
) -> None:
    batcher, model = make(open_gate=False)
    blocker = await busy(batcher, model)
    tasks = [submit(batcher, rows_of(i)) for i in range(5)]
    await until(lambda: batcher.stats.pending == 5)
    model.open()
    results = await asyncio.gather(blocker, *tasks)
    assert model.batch_rows == [1, 5]
    for i, out in enumerate(results[1:]):
        np.testing.assert_array_equal(out["y"], rows_of(2 * i))
        assert out["y"].base is not None  # a view into the batch output
    stats = batcher.stats
    assert (stats.execution_count, stats.inference_count, stats.success.count) == (2, 6, 6)
    assert stats.pending == 0


async def batched_behind_a_busy_instance(batcher: Batcher, model: FakeModel,
                                         sizes: list[int]) -> list[np.ndarray]:
    """Requests of ``sizes`` rows queued behind a busy instance, so they form one batch;
    each caller's answer checked against its own rows. Their inputs, in order."""
    blocker = await busy(batcher, model)
    inputs = [np.arange(n * 3, dtype=np.float32).reshape(n, 3) + 100 * i + 1
              for i, n in enumerate(sizes)]
    tasks = [submit(batcher, x) for x in inputs]
    await until(lambda: batcher.stats.pending == len(tasks))
    model.open()
    await blocker
    for x, out in zip(inputs, await asyncio.gather(*tasks), strict=True):
        np.testing.assert_array_equal(out["y"], x * 2)
        np.testing.assert_array_equal(out["s"], x.sum(axis=1))
    return inputs


async def test_each_caller_gets_exactly_its_own_rows(
    make: Make,
) -> None:
    batcher, model = make(open_gate=False)
    await batched_behind_a_busy_instance(batcher, model, [1, 3, 2, 1])
    assert model.batch_rows == [1, 7]


async def test_a_padded_batch_is_built_at_its_size_and_each_caller_gets_its_rows(
    make: Make,
) -> None:
    """The batch reaches the backend at the size it runs (zeros after the requests' rows),
    in one copy, and the answers are cut back to each caller's rows: the padding's rows
    reach nobody, and the stats count the requests' rows only."""
    batcher, model = make(open_gate=False, padded_sizes=(1, 4, 8))
    inputs = await batched_behind_a_busy_instance(batcher, model, [2, 3])
    assert model.batch_rows == [1, 8]  # the busy one's row runs at 1, unpadded
    ran = model.calls[1][1]["x"]
    np.testing.assert_array_equal(ran[:5], np.concatenate(inputs))
    assert not ran[5:].any()
    assert batcher.stats.inference_count == 6  # 1 + 2 + 3 rows, not the padding


async def test_a_lone_request_is_padded_too_and_gets_only_its_rows(make: Make) -> None:
    batcher, model = make(padded_sizes=(1, 4, 8))
    out = await submit(batcher, rows_of(3.0, rows=3))
    assert model.batch_rows == [4]
    np.testing.assert_array_equal(out["y"], rows_of(6.0, rows=3))


def test_padded_batch_fills_bytes_with_empty_strings() -> None:
    parts = [np.array([["a"]], dtype=object), np.array([["b"], ["c"]], dtype=object)]
    batch = padded_batch(parts, 5)
    assert batch.tolist() == [["a"], ["b"], ["c"], [""], [""]]


async def test_max_batch_size_is_never_exceeded_and_requests_are_never_split(
    make: Make,
) -> None:
    batcher, model = make(max_batch_size=4, open_gate=False)
    blocker = await busy(batcher, model)
    sizes = [3, 2, 1, 2, 4]
    tasks = [submit(batcher, rows_of(i, rows=n)) for i, n in enumerate(sizes)]
    await until(lambda: batcher.stats.pending == len(sizes))
    model.open()
    results = await asyncio.gather(blocker, *tasks)
    # in order: 3 (3+2 overflows), 2+1 (+2 overflows), 2 (+4 overflows), 4
    assert model.batch_rows == [1, 3, 3, 2, 4]
    for i, (n, out) in enumerate(zip(sizes, results[1:], strict=True)):
        np.testing.assert_array_equal(out["y"], rows_of(2 * i, rows=n))


async def test_rows_over_max_batch_size_are_invalid(
    make: Make,
) -> None:
    batcher, model = make(max_batch_size=4)
    with pytest.raises(InvalidInput, match="batch-size must be <= 4"):
        await batcher.infer({"x": rows_of(1, rows=5)}, 5)
    assert model.calls == []
    assert batcher.stats.failures["OTHER"] == 1


async def test_incompatible_requests_start_the_next_batch_in_order(
    make: Make,
) -> None:
    batcher, model = make(open_gate=False)
    blocker = await busy(batcher, model)
    queued = [
        rows_of(1, width=3),
        rows_of(2, width=3),
        rows_of(3, width=4),  # another non-batch shape
        rows_of(4, width=4).astype(np.float64),  # another dtype
        rows_of(5, width=3),
    ]
    tasks = [submit(batcher, x) for x in queued]
    await until(lambda: batcher.stats.pending == len(queued))
    model.open()
    results = await asyncio.gather(blocker, *tasks)
    assert model.batch_rows == [1, 2, 1, 1, 1]
    assert [inputs["x"].shape[1] for _, inputs in model.calls[1:]] == [3, 4, 4, 3]
    for x, out in zip(queued, results[1:], strict=True):
        np.testing.assert_array_equal(out["y"], x * 2)
        assert out["y"].dtype == x.dtype


async def test_requests_with_other_input_names_are_not_batched_together(
    make: Make,
) -> None:
    batcher, model = make(open_gate=False)
    blocker = await busy(batcher, model)
    extra = asyncio.create_task(batcher.infer({"x": rows_of(1), "z": rows_of(0)}, 1))
    plain = submit(batcher, rows_of(2))
    await until(lambda: batcher.stats.pending == 2)
    model.open()
    await asyncio.gather(blocker, extra, plain)
    assert [sorted(inputs) for _, inputs in model.calls] == [["x"], ["x", "z"], ["x"]]


async def test_max_batch_size_zero_runs_each_request_alone(
    make: Make,
) -> None:
    batcher, model = make(max_batch_size=0, open_gate=False)
    first = asyncio.create_task(batcher.infer({"x": np.ones(3, np.float32)}, 0))
    await until(lambda: len(model.calls) == 1)
    rest = [
        asyncio.create_task(batcher.infer({"x": np.full(3, i, np.float32)}, 0)) for i in range(3)
    ]
    await until(lambda: batcher.stats.pending == 3)
    model.open()
    results = await asyncio.gather(first, *rest)
    assert [inputs["x"].shape for _, inputs in model.calls] == [(3,)] * 4
    for i, out in enumerate(results[1:]):
        np.testing.assert_array_equal(out["y"], np.full(3, 2 * i, np.float32))
    stats = batcher.stats
    assert (stats.execution_count, stats.inference_count, stats.success.count) == (4, 4, 4)


async def test_instances_run_batches_concurrently(
    make: Make,
) -> None:
    batcher, model = make(instances=2, open_gate=False)
    tasks = [submit(batcher, rows_of(0))]
    await until(lambda: model.running == 1)
    tasks.append(submit(batcher, rows_of(1)))  # the first instance is busy: the second takes it
    await until(lambda: model.running == 2)  # both instances inside run() at once
    assert sorted(instance for instance, _ in model.calls) == [0, 1]
    queued = [submit(batcher, rows_of(i)) for i in range(2, 5)]
    await until(lambda: batcher.stats.pending == 3)
    model.open()
    await asyncio.gather(*tasks, *queued)
    assert model.batch_rows[:2] == [1, 1]
    assert sum(model.batch_rows) == 5
    assert model.max_running == 2


async def test_requests_arriving_in_one_loop_iteration_share_a_batch(
    make: Make,
) -> None:
    batcher, model = make(instances=2)
    results = await asyncio.gather(*(batcher.infer({"x": rows_of(i)}, 1) for i in range(3)))
    assert model.batch_rows == [3]  # one handoff for the three, not three batches of one
    for i, outputs in enumerate(results):
        np.testing.assert_array_equal(outputs["y"], rows_of(i) * 2)


async def test_preferred_batch_size_caps_batches_at_the_largest_reachable(
    make: Make,
) -> None:
    policy = DynamicBatching(preferred_batch_size=(2, 4))
    batcher, model = make(policy=policy, open_gate=False)
    blocker = await busy(batcher, model)
    tasks = [submit(batcher, rows_of(i)) for i in range(7)]
    await until(lambda: batcher.stats.pending == 7)
    model.open()
    await asyncio.gather(blocker, *tasks)
    assert model.batch_rows == [1, 4, 2, 1]


async def test_queue_delay_holds_a_batch_until_it_is_full(
    make: Make,
) -> None:
    policy = DynamicBatching(max_queue_delay_microseconds=60_000_000)
    batcher, model = make(max_batch_size=4, policy=policy)
    first = submit(batcher, rows_of(0))
    await until(lambda: batcher.stats.pending == 1)
    await asyncio.sleep(0.01)
    assert model.calls == []  # an idle instance waits for the delay
    rest = [submit(batcher, rows_of(i)) for i in range(1, 4)]
    results = await asyncio.gather(first, *rest)  # max_batch_size reached: runs at once
    assert model.batch_rows == [4]
    for i, out in enumerate(results):
        np.testing.assert_array_equal(out["y"], rows_of(2 * i))


async def test_queue_delay_runs_a_preferred_batch_at_once(
    make: Make,
) -> None:
    policy = DynamicBatching(preferred_batch_size=(2,), max_queue_delay_microseconds=60_000_000)
    batcher, model = make(max_batch_size=8, policy=policy)
    await asyncio.gather(submit(batcher, rows_of(0)), submit(batcher, rows_of(1)))
    assert model.batch_rows == [2]


async def test_queue_delay_expiry_runs_the_batch_as_it_is(
    make: Make,
) -> None:
    policy = DynamicBatching(max_queue_delay_microseconds=20_000)
    batcher, model = make(max_batch_size=8, policy=policy)
    out = await asyncio.wait_for(batcher.infer({"x": rows_of(1)}, 1), timeout=5)
    np.testing.assert_array_equal(out["y"], rows_of(2))
    assert model.batch_rows == [1]


async def test_stop_runs_a_batch_waiting_for_its_delay(
    make: Make,
) -> None:
    policy = DynamicBatching(max_queue_delay_microseconds=60_000_000)
    batcher, model = make(policy=policy)
    task = submit(batcher, rows_of(1))
    await until(lambda: batcher.stats.pending == 1)
    await batcher.stop()
    np.testing.assert_array_equal((await task)["y"], rows_of(2))


async def test_full_queue_rejects_at_once(make: Make) -> None:
    policy = DynamicBatching(default_queue_policy=QueuePolicy(max_queue_size=2))
    batcher, model = make(policy=policy, open_gate=False)
    blocker = await busy(batcher, model)
    queued = [submit(batcher, rows_of(i)) for i in range(2)]
    await until(lambda: batcher.stats.pending == 2)
    with pytest.raises(QueueFull, match="Exceeds maximum queue size") as caught:
        await batcher.infer({"x": rows_of(9)}, 1)  # the gate is still closed
    assert caught.value.status_code == 503
    assert batcher.stats.failures["REJECTED"] == 1
    model.open()
    await asyncio.gather(blocker, *queued)
    assert batcher.stats.success.count == 3


async def test_queued_request_times_out_while_the_instance_is_busy(
    make: Make,
) -> None:
    policy = DynamicBatching(default_queue_policy=QueuePolicy(default_timeout_microseconds=20_000))
    batcher, model = make(policy=policy, open_gate=False)
    blocker = await busy(batcher, model)
    with pytest.raises(RequestTimeout, match="Request timeout expired") as caught:
        await asyncio.wait_for(batcher.infer({"x": rows_of(1)}, 1), timeout=5)
    assert caught.value.status_code == 503
    assert model.running == 1  # rejected while the only instance was still busy
    assert batcher.stats.failures["REJECTED"] == 1
    assert batcher.stats.pending == 0
    model.open()
    await blocker
    assert model.batch_rows == [1]


async def test_timeout_override_only_shortens_the_default(
    make: Make,
) -> None:
    queue_policy = QueuePolicy(default_timeout_microseconds=60_000_000, allow_timeout_override=True)
    batcher, model = make(
        policy=DynamicBatching(default_queue_policy=queue_policy), open_gate=False
    )
    blocker = await busy(batcher, model)
    patient = submit(batcher, rows_of(1), timeout_us=120_000_000)  # longer: the default applies
    with pytest.raises(RequestTimeout):
        await asyncio.wait_for(batcher.infer({"x": rows_of(2)}, 1, timeout_us=20_000), timeout=5)
    assert not patient.done()
    model.open()
    await asyncio.gather(blocker, patient)
    assert model.batch_rows == [1, 1]


async def test_timeout_override_is_ignored_unless_allowed(
    make: Make,
) -> None:
    batcher, model = make(open_gate=False)
    blocker = await busy(batcher, model)
    task = submit(batcher, rows_of(1), timeout_us=1_000)
    await asyncio.sleep(0.02)
    assert not task.done()
    model.open()
    await asyncio.gather(blocker, task)


async def test_timeout_action_delay_moves_expired_requests_behind_the_others(
    make: Make,
) -> None:
    queue_policy = QueuePolicy(
        default_timeout_microseconds=60_000_000, allow_timeout_override=True, timeout_action="DELAY"
    )
    policy = DynamicBatching(default_queue_policy=queue_policy)
    batcher, model = make(max_batch_size=1, policy=policy, open_gate=False)
    blocker = await busy(batcher, model)
    late = submit(batcher, rows_of(1), timeout_us=5_000)
    await until(lambda: batcher.stats.pending == 1)
    await asyncio.sleep(0.02)  # past its deadline: it must now wait behind fresh requests
    fresh = submit(batcher, rows_of(2))
    await until(lambda: batcher.stats.pending == 2)
    model.open()
    late_out, fresh_out = await asyncio.gather(late, fresh)
    await blocker
    assert [float(inputs["x"][0, 0]) for _, inputs in model.calls] == [-1, 2, 1]
    np.testing.assert_array_equal(late_out["y"], rows_of(2))
    assert batcher.stats.failures["REJECTED"] == 0


async def test_backend_failure_fails_the_whole_batch_and_the_next_batch_succeeds(
    make: Make,
) -> None:
    batcher, model = make(open_gate=False)
    blocker = await busy(batcher, model)
    model.fail_next = 2  # the blocker's batch and the batch queued behind it
    doomed = [submit(batcher, rows_of(i)) for i in range(3)]
    await until(lambda: batcher.stats.pending == 3)
    model.open()
    results = await asyncio.gather(blocker, *doomed, return_exceptions=True)
    assert model.batch_rows == [1, 3]
    for error in results:
        assert isinstance(error, BackendError)
        assert error.status_code == 500
        assert "invalid dimensions for input x" in error.message
    out = await batcher.infer({"x": rows_of(5)}, 1)
    np.testing.assert_array_equal(out["y"], rows_of(10))
    stats = batcher.stats
    assert stats.failures["BACKEND"] == 4
    assert (stats.success.count, stats.execution_count, stats.inference_count) == (1, 1, 1)


async def test_output_without_one_row_per_input_row_is_a_backend_error(
    make: Make,
) -> None:
    batcher, model = make(open_gate=False)
    blocker = await busy(batcher, model)
    model.bad_rows = True
    tasks = [submit(batcher, rows_of(i)) for i in range(2)]
    await until(lambda: batcher.stats.pending == 2)
    model.open()
    results = await asyncio.gather(blocker, *tasks, return_exceptions=True)
    for error in results:
        assert isinstance(error, BackendError)
        assert "output 'y'" in error.message
    assert [str(e) for e in results[1:]] == [
        "model 'm' returned output 'y' with shape [3, 3], "
        "but a batch of 2 rows must give 2 rows along the first dimension"
    ] * 2


async def test_cancelled_queued_request_leaves_the_batch(
    make: Make,
) -> None:
    batcher, model = make(open_gate=False)
    blocker = await busy(batcher, model)
    gone, staying = submit(batcher, rows_of(1)), submit(batcher, rows_of(2))
    await until(lambda: batcher.stats.pending == 2)
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert batcher.stats.pending == 1
    model.open()
    np.testing.assert_array_equal((await staying)["y"], rows_of(4))
    await blocker
    assert model.batch_rows == [1, 1]
    stats = batcher.stats
    assert (stats.failures["CANCELED"], stats.success.count, stats.pending) == (1, 2, 0)


async def test_cancelled_running_request_does_not_break_its_batch(
    make: Make,
) -> None:
    batcher, model = make(open_gate=False)
    blocker = await busy(batcher, model)
    tasks = [submit(batcher, rows_of(i)) for i in range(3)]
    await until(lambda: batcher.stats.pending == 3)
    model.allow(1)
    await blocker
    await until(lambda: len(model.calls) == 2)  # the batch of three is running
    tasks[1].cancel()
    model.open()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(results[1], asyncio.CancelledError)
    for i in (0, 2):
        np.testing.assert_array_equal(results[i]["y"], rows_of(2 * i))  # type: ignore[index]
    await until(lambda: batcher.stats.success.count == 3)
    assert batcher.stats.failures["CANCELED"] == 1
    assert batcher.stats.inference_count == 4  # the cancelled row still ran


async def test_stop_drains_queued_requests_then_refuses_new_ones(
    make: Make,
) -> None:
    batcher, model = make(open_gate=False)
    blocker = await busy(batcher, model)
    tasks = [submit(batcher, rows_of(i)) for i in range(3)]
    await until(lambda: batcher.stats.pending == 3)
    stopping = asyncio.create_task(batcher.stop())
    await asyncio.sleep(0.01)
    assert not stopping.done()
    with pytest.raises(ModelNotReady):
        await batcher.infer({"x": rows_of(1)}, 1)
    model.open()
    await stopping
    await asyncio.gather(blocker, *tasks)
    assert model.batch_rows == [1, 3]
    assert not any(
        t.is_alive() for t in threading.enumerate() if t.name.startswith("modelfn-batcher-m-")
    )


async def test_stop_without_drain_fails_queued_requests(
    make: Make,
) -> None:
    batcher, model = make(open_gate=False)
    blocker = await busy(batcher, model)
    tasks = [submit(batcher, rows_of(i)) for i in range(2)]
    await until(lambda: batcher.stats.pending == 2)
    stopping = asyncio.create_task(batcher.stop(drain=False))
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(error, ModelNotReady) for error in results)
    model.open()
    await stopping
    await blocker  # the running batch still finished
    assert batcher.stats.failures["REJECTED"] == 2
    assert batcher.stats.pending == 0


async def test_stats_stay_consistent_under_mixed_load(
    make: Make,
) -> None:
    batcher, model = make(max_batch_size=6, instances=3)
    rng = np.random.default_rng(7)
    sizes = [int(n) for n in rng.integers(1, 5, size=60)]
    inputs = [rows_of(i, rows=n) for i, n in enumerate(sizes)]
    results = await asyncio.gather(*(submit(batcher, x) for x in inputs))
    for x, out in zip(inputs, results, strict=True):
        np.testing.assert_array_equal(out["y"], x * 2)
    stats = batcher.stats
    assert max(model.batch_rows) <= 6
    assert stats.success.count == stats.queue.count == len(sizes)
    assert stats.inference_count == sum(sizes) == sum(model.batch_rows)
    assert stats.execution_count == len(model.calls) < len(sizes)
    assert sum(b.compute_infer.count for b in stats.batches.values()) == len(model.calls)
    # Triton's compute durations count requests (each with its batch's time), not batches
    assert stats.compute_infer.count == stats.compute_input.count == len(sizes)
    batch_ns = sum(b.compute_infer.ns for b in stats.batches.values())
    assert stats.compute_infer.ns >= batch_ns
    assert stats.fail.count == 0
    assert stats.pending == 0


async def test_inline_batches_run_on_the_event_loop_thread(make: Make) -> None:
    before = threading.active_count()
    batcher, model = make(inline_rows=8)  # every batch: max_batch_size is 8
    results = await asyncio.gather(*(batcher.infer({"x": rows_of(i, rows=2)}, 2)
                                     for i in range(3)))
    assert threading.active_count() == before  # no worker thread was started
    assert model.batch_rows == [6]
    assert model.threads == [threading.get_ident()]
    for i, outputs in enumerate(results):
        np.testing.assert_array_equal(outputs["y"], rows_of(i, rows=2) * 2)
    stats = batcher.stats
    assert (stats.success.count, stats.inference_count, stats.execution_count) == (3, 6, 1)


async def test_small_batches_run_inline_and_larger_ones_on_the_worker(make: Make) -> None:
    before = threading.active_count()
    batcher, model = make(inline_rows=2)
    assert threading.active_count() == before + 1  # the worker, for batches over 2 rows
    loop_thread = threading.get_ident()
    await batcher.infer({"x": rows_of(1)}, 1)
    together = await asyncio.gather(*(batcher.infer({"x": rows_of(i)}, 1) for i in range(3)))
    await batcher.infer({"x": rows_of(4, rows=2)}, 2)
    assert model.batch_rows == [1, 3, 2]
    assert [thread == loop_thread for thread in model.threads] == [True, False, True]
    for i, outputs in enumerate(together):
        np.testing.assert_array_equal(outputs["y"], rows_of(i) * 2)
    assert batcher.stats.execution_count == 3


def test_inline_batches_need_a_single_instance() -> None:
    with pytest.raises(ValueError, match="single instance"):
        Batcher(lambda instance, inputs: inputs, instances=2, max_batch_size=4, policy=None,
                stats=ModelStats("m", "1"), inline_rows=2)


async def test_inline_backend_failure_fails_its_batch_and_serving_goes_on(make: Make) -> None:
    batcher, model = make(inline_rows=8)
    model.fail_next = 1
    with pytest.raises(BackendError, match="invalid dimensions"):
        await batcher.infer({"x": rows_of(1)}, 1)
    out = await batcher.infer({"x": rows_of(2)}, 1)
    np.testing.assert_array_equal(out["y"], rows_of(2) * 2)
    assert batcher.stats.failures["BACKEND"] == 1


async def test_inline_batches_respect_max_batch_size(make: Make) -> None:
    batcher, model = make(inline_rows=4, max_batch_size=4)
    await asyncio.gather(*(batcher.infer({"x": rows_of(i)}, 1) for i in range(10)))
    assert model.batch_rows == [4, 4, 2]


async def test_preserve_ordering_holds_a_batch_that_overtook_an_earlier_one() -> None:
    first_may_finish = threading.Event()

    def run(instance: int, inputs: Tensors) -> Tensors:
        if instance == 0:  # the first batch goes to instance 0 and is slow
            assert first_may_finish.wait(10)
        return {"y": inputs["x"] * 2}

    batcher = Batcher(run, instances=2, max_batch_size=4,
                      policy=DynamicBatching(preserve_ordering=True),
                      stats=ModelStats("m", "1"), name="m")
    batcher.start()
    try:
        first = submit(batcher, rows_of(1))
        await until(lambda: batcher._idle == [1])  # instance 0 took the first batch
        second = submit(batcher, rows_of(2))
        held = batcher._in_order
        assert held is not None
        # instance 1 has answered the second batch; it is held behind the first
        await until(lambda: len(held) == 2 and held[1][1] is not None)
        await asyncio.sleep(0.01)
        assert not second.done() and not first.done()
        first_may_finish.set()
        out1, out2 = await asyncio.gather(first, second)
        np.testing.assert_array_equal(out1["y"], rows_of(1) * 2)
        np.testing.assert_array_equal(out2["y"], rows_of(2) * 2)
    finally:
        first_may_finish.set()
        await batcher.stop()


async def test_without_preserve_ordering_a_fast_batch_answers_first() -> None:
    first_may_finish = threading.Event()

    def run(instance: int, inputs: Tensors) -> Tensors:
        if instance == 0:
            assert first_may_finish.wait(10)
        return {"y": inputs["x"] * 2}

    batcher = Batcher(run, instances=2, max_batch_size=4, policy=None,
                      stats=ModelStats("m", "1"), name="m")
    batcher.start()
    try:
        first = submit(batcher, rows_of(1))
        await until(lambda: batcher._idle == [1])
        second = await submit(batcher, rows_of(2))
        np.testing.assert_array_equal(second["y"], rows_of(2) * 2)
        assert not first.done()
        first_may_finish.set()
        await first
    finally:
        first_may_finish.set()
        await batcher.stop()


class Upstream:
    """An async backend like the gateway's: each batch is one awaited call, held on an event."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []  # (instance, rows) per batch
        self.in_flight = 0
        self.max_in_flight = 0
        self.release = asyncio.Event()
        self.error: Exception | None = None

    async def __call__(self, instance: int, inputs: Tensors) -> Tensors:
        self.calls.append((instance, len(inputs["x"])))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await self.release.wait()
            if self.error is not None:
                raise self.error
            return {"y": inputs["x"] * 2}
        finally:
            self.in_flight -= 1


async def test_an_async_backend_batches_what_waits_behind_busy_calls() -> None:
    upstream = Upstream()
    batcher = Batcher(upstream, instances=2, max_batch_size=8, policy=None,
                      stats=ModelStats("fn", "1"), name="fn")
    batcher.start()
    rows = [np.full((1, 3), i, np.float32) for i in range(10)]
    first = [asyncio.create_task(batcher.infer({"x": rows[i]}, 1)) for i in range(2)]
    await asyncio.sleep(0)  # one loop iteration: both land in the first batch
    await asyncio.sleep(0)
    rest = [asyncio.create_task(batcher.infer({"x": rows[i]}, 1)) for i in range(2, 10)]
    await asyncio.sleep(0.01)
    upstream.release.set()
    answers = await asyncio.gather(*first, *rest)
    for i, answer in enumerate(answers):
        np.testing.assert_array_equal(answer["y"], rows[i] * 2)
    assert upstream.calls[0] == (0, 2)
    assert sum(r for _, r in upstream.calls) == 10
    assert len(upstream.calls) < 10
    assert upstream.max_in_flight <= 2
    assert not [t for t in threading.enumerate() if t.name.startswith("modelfn-batcher-fn")]
    await batcher.stop()


async def test_an_async_backend_error_keeps_its_status_and_fails_only_its_batch() -> None:
    upstream = Upstream()
    upstream.error = ModelNotReady("digits", 1, "the function is cold")
    batcher = Batcher(upstream, instances=1, max_batch_size=4, policy=None,
                      stats=ModelStats("fn", "1"), name="fn")
    batcher.start()
    failing = [asyncio.create_task(batcher.infer({"x": np.ones((1, 3), np.float32)}, 1))
               for _ in range(2)]
    await asyncio.sleep(0.01)
    upstream.release.set()
    for task in failing:
        with pytest.raises(ModelNotReady) as err:
            await task
        assert err.value.status_code == 503
    upstream.error = None
    answer = await batcher.infer({"x": np.ones((1, 3), np.float32)}, 1)
    np.testing.assert_array_equal(answer["y"], np.full((1, 3), 2, np.float32))
    await batcher.stop()


async def test_stop_drains_async_batches_in_flight() -> None:
    upstream = Upstream()
    batcher = Batcher(upstream, instances=1, max_batch_size=4, policy=None,
                      stats=ModelStats("fn", "1"), name="fn")
    batcher.start()
    pending = asyncio.create_task(batcher.infer({"x": np.ones((1, 3), np.float32)}, 1))
    await asyncio.sleep(0.01)
    stopping = asyncio.create_task(batcher.stop())
    await asyncio.sleep(0.01)
    assert not pending.done()
    upstream.release.set()
    await stopping
    assert (await pending)["y"].tolist() == [[2.0, 2.0, 2.0]]


class _Unavailable(ModelfnError):
    """Like the gateway's upstream errors: built from domain arguments, not a message."""

    status_code = 503

    def __init__(self, where: str, seconds: float) -> None:
        super().__init__(f"{where} did not answer within {seconds:.0f} s")
        self.where = where


@pytest.mark.parametrize("error", [QueueFull(), _Unavailable("fn", 30.0)],
                         ids=["no-arguments", "domain-arguments"])
async def test_an_async_backend_error_reaches_every_caller_whatever_its_init_takes(
    error: ModelfnError,
) -> None:
    upstream = Upstream()
    upstream.error = error
    batcher = Batcher(upstream, instances=1, max_batch_size=4, policy=None,
                      stats=ModelStats("fn", "1"), name="fn")
    batcher.start()
    failing = [asyncio.create_task(batcher.infer({"x": np.ones((1, 3), np.float32)}, 1))
               for _ in range(3)]
    await asyncio.sleep(0.01)
    upstream.release.set()
    seen = []
    for task in failing:
        with pytest.raises(type(error)) as err:
            await asyncio.wait_for(task, 5)
        assert (err.value.status_code, err.value.message, str(err.value)) == (
            error.status_code, error.message, str(error))
        assert vars(err.value) == vars(error)
        seen.append(err.value)
    assert len({id(e) for e in seen}) == 3  # one exception per caller
    await batcher.stop()


def test_a_queue_delay_under_half_a_millisecond_on_uvloop() -> None:
    """uvloop's call_at returns a plain Handle, with no when(), for a wake-up under half
    a millisecond away: the next dispatch raised AttributeError inside a loop callback
    (logged, and the rest of that pass lost). Servers run on uvloop, so this does."""
    uvloop = pytest.importorskip("uvloop")
    errors: list[dict[str, object]] = []

    async def main() -> list[Tensors]:
        asyncio.get_running_loop().set_exception_handler(lambda _, ctx: errors.append(ctx))
        model = FakeModel(open_gate=True)
        batcher = Batcher(model, instances=1, max_batch_size=8, stats=ModelStats("m", "1"),
                          policy=DynamicBatching(preferred_batch_size=(8,),
                                                 max_queue_delay_microseconds=400),
                          name="m")
        batcher.start()
        try:  # a request each loop iteration: each dispatches while a wake-up is pending
            tasks = []
            for i in range(6):
                tasks.append(asyncio.ensure_future(batcher.infer({"x": rows_of(i)}, 1)))
                await asyncio.sleep(0)
            return await asyncio.gather(*tasks)
        finally:
            await batcher.stop()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        outputs = runner.run(main())
    assert errors == []
    for i, out in enumerate(outputs):
        np.testing.assert_array_equal(out["y"], rows_of(2 * i))


async def test_callers_answered_by_callback_share_the_batch_and_each_gets_its_rows(
    make: Make, caplog: pytest.LogCaptureFixture
) -> None:
    """``submit`` (the HTTP edge's shortcut): each ``Answer`` calls its callback as the batch
    resolves. A callback that raises is logged, and the batch's other callers still get
    their rows."""
    batcher, model = make(open_gate=False)
    blocker = await busy(batcher, model)
    got: dict[int, Tensors | Exception] = {}

    counted: list[int] = []

    def record(i: int, outcome: Tensors | Exception) -> None:
        # the success is counted before the callback, which may take it back (an answer
        # that cannot be encoded)
        counted.append(batcher.stats.success.count)
        if i == 1:
            raise RuntimeError("this caller's answer cannot be written")
        got[i] = outcome

    answers = [batcher.submit({"x": rows_of(i, rows=i + 1)}, i + 1) for i in range(3)]
    for i, answer in enumerate(answers):
        assert not answer.done() and not answer.cancelled()
        answer.then(functools.partial(record, i))
    model.open()
    await blocker
    await until(lambda: len(got) == 2)
    assert model.batch_rows == [1, 6]
    assert counted == [2, 3, 4]  # the blocker's, then each of the batch's in turn
    for i in (0, 2):
        outcome = got[i]
        assert not isinstance(outcome, Exception)
        np.testing.assert_array_equal(outcome["y"], rows_of(2 * i, rows=i + 1))
    assert "answering a request failed" in caplog.text
    assert all(answer.done() for answer in answers)
    # a callback given after the answer settled is called at once
    late: list[Tensors | Exception] = []
    answers[0].then(late.append)
    assert len(late) == 1


async def test_a_refused_batch_settles_every_answer_with_the_failure(make: Make) -> None:
    batcher, model = make(open_gate=False)
    blocker = await busy(batcher, model)
    model.fail_next = 2
    failures: list[Tensors | Exception] = []
    answer = batcher.submit({"x": rows_of(1)}, 1)
    answer.then(failures.append)
    model.open()
    await asyncio.gather(blocker, return_exceptions=True)
    await until(lambda: bool(failures))
    assert isinstance(failures[0], BackendError)
    with pytest.raises(asyncio.InvalidStateError):
        answer.set_result({})


async def test_a_cancelled_answer_leaves_the_queue_and_is_never_called(make: Make) -> None:
    """The edge cancels the ``Answer`` of a client that hung up: queued, its request leaves
    the queue before any batch takes it; running, its batch still answers the others. Each
    counts CANCELED, not a success, and its callback is never called."""
    batcher, model = make(open_gate=False)
    blocker = await busy(batcher, model)
    got: dict[int, Tensors | Exception] = {}
    answers = [batcher.submit({"x": rows_of(i)}, 1) for i in range(3)]
    for i, answer in enumerate(answers):
        answer.then(functools.partial(got.__setitem__, i))
    await until(lambda: batcher.stats.pending == 3)
    assert answers[1].cancel()
    assert answers[1].done() and answers[1].cancelled()
    assert not answers[1].cancel()  # once
    assert batcher.stats.pending == 2
    model.allow(1)
    await blocker
    await until(lambda: len(model.calls) == 2)  # the batch of the other two is running
    assert model.batch_rows == [1, 2]
    assert answers[2].cancel()
    model.open()
    await until(lambda: len(got) == 1)
    await until(lambda: batcher.stats.pending == 0 and not batcher._busy)
    np.testing.assert_array_equal(got[0]["y"], rows_of(0))  # type: ignore[index]
    stats = batcher.stats
    assert (stats.failures["CANCELED"], stats.success.count) == (2, 2)  # the blocker's, 0's
    assert stats.inference_count == 3  # the row cancelled while running still ran
    assert list(got) == [0]


async def test_an_answer_settled_cannot_be_cancelled(make: Make) -> None:
    batcher, _ = make()
    answer = batcher.submit({"x": rows_of(1)}, 1)
    await until(answer.done)
    assert not answer.cancel() and not answer.cancelled()
    assert batcher.stats.failures["CANCELED"] == 0
    got: list[Tensors | Exception] = []
    answer.then(got.append)
    np.testing.assert_array_equal(got[0]["y"], rows_of(2))  # type: ignore[index]


class PerRequestModel:
    """A per-request run (Triton's Python backend): each request answered alone, a request
    whose ``fail`` parameter is set failing alone, one whose input is negative failing the
    whole batch."""

    def __init__(self) -> None:
        self.batches: list[list[tuple[Tensors, RequestContext | None]]] = []
        self.gate = threading.Event()
        self.gate.set()

    def __call__(self, instance: int, requests: list[tuple[Tensors, RequestContext | None]]
                 ) -> list[Tensors | Exception]:
        assert self.gate.wait(10)
        self.batches.append(requests)
        if any((inputs["x"] < 0).any() for inputs, _ in requests):
            raise RuntimeError("negative input")
        answers: list[Tensors | Exception] = []
        for inputs, context in requests:
            if context is not None and context.parameters.get("fail"):
                answers.append(InvalidInput(f"request {context.id} asked to fail"))
            else:
                answers.append({"y": inputs["x"] + 1})
        return answers


async def test_a_per_request_run_answers_each_request_alone() -> None:
    model = PerRequestModel()
    batcher = Batcher(model, instances=1, max_batch_size=8, policy=None,
                      stats=ModelStats("py", "1"), name="py", per_request=True)
    batcher.start()
    try:
        model.gate.clear()
        first = asyncio.create_task(batcher.infer({"x": rows_of(0)}, 1))
        await asyncio.sleep(0.05)  # the first batch holds the instance
        shapes = [rows_of(1, rows=2, width=3), rows_of(2, rows=1, width=5),
                  rows_of(3, rows=3, width=1)]
        ok = [asyncio.create_task(batcher.infer(
            {"x": x}, len(x), context=RequestContext(id=f"r{i}"))) for i, x in enumerate(shapes)]
        failing = asyncio.create_task(batcher.infer(
            {"x": rows_of(4)}, 1, context=RequestContext(id="bad", parameters={"fail": True})))
        await asyncio.sleep(0.01)
        model.gate.set()
        await first
        for task, x in zip(ok, shapes, strict=True):
            np.testing.assert_array_equal((await task)["y"], x + 1)
        with pytest.raises(InvalidInput, match="request bad asked to fail"):
            await failing
        # shapes that could not be concatenated went in one batch, with their contexts
        second = model.batches[1]
        assert [inputs["x"].shape for inputs, _ in second] == [x.shape for x in shapes] + [(1, 3)]
        assert [c.id for _, c in second if c is not None] == ["r0", "r1", "r2", "bad"]
        stats = batcher.stats
        assert stats.success.count == 4 and stats.fail.count == 1
        assert stats.inference_count == 1 + 2 + 1 + 3  # the failed request's row did not run
        assert stats.compute_infer.count == 4
        assert stats.execution_count == 2
    finally:
        await batcher.stop()


async def test_a_per_request_run_that_raises_fails_its_batch_and_serves_on() -> None:
    model = PerRequestModel()
    batcher = Batcher(model, instances=1, max_batch_size=4, policy=None,
                      stats=ModelStats("py", "1"), name="py", per_request=True)
    batcher.start()
    try:
        with pytest.raises(BackendError, match="negative input"):
            await batcher.infer({"x": rows_of(-1)}, 1)
        with pytest.raises(InvalidInput, match="batch-size must be <= 4"):
            await batcher.infer({"x": rows_of(1, rows=5)}, 5)
        np.testing.assert_array_equal((await batcher.infer({"x": rows_of(1)}, 1))["y"],
                                      rows_of(2))
    finally:
        await batcher.stop()


def test_a_per_request_run_is_never_inline_nor_async() -> None:
    async def run(instance: int, inputs: Tensors) -> Tensors:
        return inputs

    with pytest.raises(ValueError, match="per-request"):
        Batcher(PerRequestModel(), instances=1, max_batch_size=4, policy=None,
                stats=ModelStats("py", "1"), inline_rows=4, per_request=True)
    with pytest.raises(ValueError, match="per-request"):
        Batcher(run, instances=1, max_batch_size=4, policy=None,
                stats=ModelStats("py", "1"), per_request=True)
