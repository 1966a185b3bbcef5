"""Counts invocations in a module global: a warm process keeps counting."""

from __future__ import annotations

import os
from typing import Any

COUNT = 0


def handler(event: Any, context: Any) -> dict[str, int]:
    global COUNT
    COUNT += 1
    return {"count": COUNT, "pid": os.getpid()}
