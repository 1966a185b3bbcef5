"""Counts the invocations running at once: each marks itself busy in a shared directory
(``BUSY_DIR``), stays a moment, and returns how many were busy with it, with its version."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any


def handler(event: Any, context: Any) -> dict[str, Any]:
    busy = Path(os.environ["BUSY_DIR"])
    mark = busy / uuid.uuid4().hex
    mark.touch()
    try:
        time.sleep(0.2)
        running = len(list(busy.iterdir()))
    finally:
        mark.unlink()
    return {"running": running, "version": os.environ["AWS_LAMBDA_FUNCTION_VERSION"]}
