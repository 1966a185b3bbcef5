"""A module whose import outlasts any reasonable init budget."""

from __future__ import annotations

import time
from typing import Any

time.sleep(60)


def handler(event: Any, context: Any) -> None:
    return None
