"""Start-up runs without cyclic collections and leaves its heap frozen."""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING

import pytest

from modelfn.handlers.startup import paused_collector

if TYPE_CHECKING:
    from collections.abc import Iterator


@pytest.fixture
def collections() -> Iterator[list[int]]:
    seen: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    gc.callbacks.append(count)
    try:
        yield seen
    finally:
        gc.callbacks.remove(count)
        gc.unfreeze()


def test_no_collection_runs_during_start_up_and_its_heap_is_frozen(
        collections: list[int]) -> None:
    before = gc.get_freeze_count()
    with paused_collector():
        assert not gc.isenabled()
        made = []
        for _ in range(50_000):  # far past generation 0's threshold, in cycles
            node: list[object] = []
            node.append(node)
            made.append(node)
    assert collections == []
    assert gc.isenabled()
    assert gc.get_freeze_count() >= before + len(made)


def test_a_disabled_collector_stays_disabled(collections: list[int]) -> None:
    gc.disable()
    try:
        with paused_collector():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
