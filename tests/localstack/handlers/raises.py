"""A handler that raises."""

from __future__ import annotations

from typing import Any


def handler(event: Any, context: Any) -> None:
    raise ValueError(f"bad input: {event.get('value')}")
