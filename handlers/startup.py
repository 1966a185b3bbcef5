"""A function's start-up without the cyclic garbage collector.

Start-up (imports, the repository's load, sessions, warmup) makes objects that live as
long as the process. Collecting over them finds nothing, yet a full collection during
start-up costs tens of milliseconds, and where one lands moves with any change to the
modules imported. ``paused_collector`` switches the collector off for start-up, then
freezes what start-up made (``gc.freeze``: the permanent generation, never scanned
again) and switches it back on, so requests also never pay to re-scan the start-up heap.
"""

from __future__ import annotations

import contextlib
import gc
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator


@contextlib.contextmanager
def paused_collector() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()
