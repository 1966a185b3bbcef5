"""A handler that writes a line to stdout and one to stderr per call, as a function's
logging does, and returns its event."""

from __future__ import annotations

import sys
from typing import Any


def handler(event: Any, context: Any) -> Any:
    mark = event.get("mark", "")
    print(f"out {mark}", flush=True)
    print(f"err {mark}", file=sys.stderr, flush=True)
    return event
