"""Per model-version statistics: the one record behind ``/stats`` and ``/metrics``.

The hot path only adds to plain integers here; Prometheus reads them through a
collector at scrape time (``metrics``), so no metric-label lookup or lock is
paid per request. Counting follows Triton: a request counts once in
``success``/``fail``, each of its rows once in ``inference_count``, and each
batch execution once in ``execution_count``, so
``inference_count / execution_count`` is the average batch size. The compute
durations (``compute_input``, ``compute_infer``, ``compute_output``) count each request
that ran, with its batch's durations, as Triton's do (success less cache hits); the
per-batch-size ``batches`` count each execution once, with its durations.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal

FailureReason = Literal["REJECTED", "CANCELED", "BACKEND", "OTHER"]
FAILURE_REASONS: tuple[FailureReason, ...] = ("REJECTED", "CANCELED", "BACKEND", "OTHER")


@dataclass(slots=True)
class Duration:
    count: int = 0
    ns: int = 0

    def add(self, ns: int) -> None:
        self.count += 1
        self.ns += ns

    def to_json(self) -> dict[str, int]:
        return {"count": self.count, "ns": self.ns}


@dataclass(slots=True)
class ComputeTimes:
    """The compute durations of one ensemble request's steps, summed as each step's batch
    resolves (Triton's ensemble statistics: the composing models' compute time)."""

    input_ns: int = 0
    infer_ns: int = 0
    output_ns: int = 0

    def add(self, input_ns: int, infer_ns: int, output_ns: int) -> None:
        self.input_ns += input_ns
        self.infer_ns += infer_ns
        self.output_ns += output_ns


@dataclass(slots=True)
class BatchStats:
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)


@dataclass
class ModelStats:
    name: str
    version: str
    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    queue: Duration = field(default_factory=Duration)
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)
    inference_count: int = 0
    execution_count: int = 0
    pending: int = 0
    last_inference_ms: int = 0
    failures: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FAILURE_REASONS, 0))
    batches: dict[int, BatchStats] = field(default_factory=dict)
    load_duration_s: float = 0.0

    def record_execution(
        self, batch_size: int, requests: int, input_ns: int, infer_ns: int, output_ns: int
    ) -> None:
        """One batch of ``batch_size`` rows from ``requests`` requests ran on the backend:
        each request is counted with the batch's durations, the batch once per size."""
        self.execution_count += 1
        self.inference_count += batch_size
        for total, ns in ((self.compute_input, input_ns), (self.compute_infer, infer_ns),
                          (self.compute_output, output_ns)):
            total.count += requests
            total.ns += ns * requests
        per = self.batches.get(batch_size)
        if per is None:
            per = self.batches[batch_size] = BatchStats()
        per.compute_input.add(input_ns)
        per.compute_infer.add(infer_ns)
        per.compute_output.add(output_ns)
        self.last_inference_ms = time.time_ns() // 1_000_000

    def record_success(self, request_ns: int, queue_ns: int) -> None:
        self.success.add(request_ns)
        self.queue.add(queue_ns)

    def record_failure(self, reason: FailureReason, request_ns: int) -> None:
        self.fail.add(request_ns)
        self.failures[reason] += 1

    def fail_a_success(self, reason: FailureReason, request_ns: int) -> None:
        """A request the batcher counted a success failed after all (its outputs do not fit
        the config): counted once, as a failure. ``request_ns`` is the caller's measure of
        it, which is what moves from success's time to failure's."""
        self.success.count -= 1
        self.success.ns -= min(self.success.ns, request_ns)
        self.record_failure(reason, request_ns)

    def to_json(self) -> dict[str, Any]:
        """Triton's statistics-extension form of this model version."""
        return {
            "name": self.name,
            "version": self.version,
            "last_inference": self.last_inference_ms,
            "inference_count": self.inference_count,
            "execution_count": self.execution_count,
            "inference_stats": {
                "success": self.success.to_json(),
                "fail": self.fail.to_json(),
                "queue": self.queue.to_json(),
                "compute_input": self.compute_input.to_json(),
                "compute_infer": self.compute_infer.to_json(),
                "compute_output": self.compute_output.to_json(),
                "cache_hit": {"count": 0, "ns": 0},
                "cache_miss": {"count": 0, "ns": 0},
            },
            "batch_stats": [
                {
                    "batch_size": size,
                    "compute_input": b.compute_input.to_json(),
                    "compute_infer": b.compute_infer.to_json(),
                    "compute_output": b.compute_output.to_json(),
                }
                for size, b in sorted(self.batches.items())
            ],
        }


@dataclass
class EdgeStats:
    """What the HTTP edge refused or dropped, for ``/metrics`` (one per process)."""

    client_disconnects: int = 0  # clients gone before their answer
    heads_too_large: int = 0  # 431
    head_timeouts: int = 0  # 408: no complete head in time
    body_timeouts: int = 0  # a body stalled: closed
    bad_requests: int = 0  # unparseable HTTP: 400
    pipelines_too_deep: int = 0  # more requests pipelined unanswered than allowed: closed


EDGE = EdgeStats()
