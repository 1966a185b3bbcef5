"""Parallel transfers with one thread-safe progress callback, and verified downloads."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, TypeAlias

from modelfn.model_store import manifest as mf
from modelfn.model_store.errors import CorruptObject, TransferCorrupted

if TYPE_CHECKING:
    from pathlib import Path

#: ``progress(advance_bytes, total_bytes)``; called from worker threads, one call at a time
Progress: TypeAlias = Callable[[int, int], None]


class Counter:
    """The byte callback of one file; ``rollback`` takes back what a failed try counted."""

    def __init__(self, reporter: Reporter) -> None:
        self._reporter = reporter
        self.count = 0

    def __call__(self, advance: int) -> None:
        self.count += advance
        self._reporter.advance(advance)

    def rollback(self) -> None:
        self._reporter.advance(-self.count)
        self.count = 0


class Reporter:
    """Funnels byte counts from worker threads into one progress callback."""

    def __init__(self, progress: Progress | None, total: int) -> None:
        self._progress = progress
        self._total = total
        self._lock = threading.Lock()

    def counter(self) -> Counter:
        return Counter(self)

    def advance(self, n: int) -> None:
        if self._progress is not None and n:
            with self._lock:
                self._progress(n, self._total)


def run_parallel(fn: Callable[..., None], jobs: list[tuple[object, ...]], workers: int) -> None:
    """Run ``fn(*job)`` for every job on a thread pool; the first failure is raised."""
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        futures = [pool.submit(fn, *job) for job in jobs]
        try:
            for future in futures:
                future.result()
        finally:
            for future in futures:
                future.cancel()


def download_verified(
    get_file: Callable[[str, Path, Callable[[int], None]], None],
    pairs: list[tuple[str, mf.FileEntry]],
    dest_root: Path,
    progress: Progress | None,
    workers: int,
    location: str,
) -> None:
    """Get each ``(key, entry)`` to ``dest_root/entry.path`` and check its size and sha256.

    A mismatch, or a transfer whose own checksum failed, is downloaded once more (a torn
    read, a flaky proxy), then reported as ``CorruptObject`` naming the object.
    """
    report = Reporter(progress, sum(entry.size for _, entry in pairs))

    def one(key: str, entry: mf.FileEntry) -> None:
        dest = dest_root / entry.path
        dest.parent.mkdir(parents=True, exist_ok=True)
        reason = ""
        for _attempt in range(2):
            received = report.counter()
            try:
                get_file(key, dest, received)
            except TransferCorrupted as exc:  # caught in transit: the same retry as sha256
                reason = f"the transfer checksum failed ({exc.reason})"
            else:
                reason = mf.mismatch(dest, entry) or ""
                if not reason:
                    return
            received.rollback()
        raise CorruptObject(f"{location}/{key}", f"{reason}, after one retry")

    run_parallel(one, list(pairs), workers)


def upload(
    put_file: Callable[[str, Path, Callable[[int], None]], None],
    pairs: list[tuple[str, Path, int]],
    progress: Progress | None,
    workers: int,
) -> None:
    """Put each ``(key, local path, size)`` in parallel."""
    report = Reporter(progress, sum(size for _, _, size in pairs))
    jobs: list[tuple[object, ...]] = [(key, path) for key, path, _ in pairs]
    run_parallel(lambda key, path: put_file(key, path, report.counter()), jobs, workers)
