"""The worker channel: framed pickles over a socketpair, large buffers in memfds."""

from __future__ import annotations

import mmap
from typing import Any

import numpy as np
import pytest

from modelfn.runtime.backends.python.channel import (
    SHARED_MEMORY_BYTES,
    Channel,
    ChannelClosed,
    pair,
)


def _backing(array: np.ndarray) -> Any:
    """The object at the bottom of an array's buffer chain."""
    base: Any = array
    while True:
        if isinstance(base, memoryview):
            base = base.obj
        elif getattr(base, "base", None) is not None:
            base = base.base
        else:
            return base


def test_large_arrays_cross_in_shared_memory_and_small_ones_inline() -> None:
    ours, theirs = pair()
    other = Channel(theirs)
    big = np.arange(SHARED_MEMORY_BYTES // 4 * 3, dtype=np.float32).reshape(3, -1)
    small = np.arange(6, dtype=np.int64)
    text = np.array([b"a", b"\x00b"], dtype=object)
    ours.send(("execute", {"big": big, "small": small, "text": text}))
    kind, arrays = other.receive()
    assert kind == "execute"
    assert np.array_equal(arrays["big"], big) and np.array_equal(arrays["small"], small)
    assert arrays["text"].tolist() == [b"a", b"\x00b"]
    assert isinstance(_backing(arrays["big"]), mmap.mmap)
    assert isinstance(_backing(arrays["small"]), bytearray)
    arrays["big"][0, 0] = arrays["small"][0] = 5  # writable, as a model may expect
    ours.close()
    other.close()


def test_many_messages_in_a_row_keep_their_frames() -> None:
    ours, theirs = pair()
    other = Channel(theirs)
    sizes = [0, 10, SHARED_MEMORY_BYTES, 3 * SHARED_MEMORY_BYTES + 1, 7]
    for n in sizes:
        ours.send(np.full(n, n % 251, dtype=np.uint8))
    for n in sizes:
        got = other.receive()
        assert got.shape == (n,) and (got == n % 251).all()
    ours.close()
    other.close()


def test_the_end_of_the_channel_is_channel_closed() -> None:
    ours, theirs = pair()
    other = Channel(theirs)
    ours.close()
    with pytest.raises(ChannelClosed):
        other.receive()
    with pytest.raises(ChannelClosed):
        other.send("anyone there?")
    other.close()
