"""A platform client for ``--dry-run``: reads reach the platform, changes are recorded.

Wrapped around a boto3 Lambda client or a ``kubernetes`` ``CustomObjectsApi``, it lets the
same target code that changes a platform say, instead, which calls it would make now: it
still reads the current state (``get_*``, ``list_*``), so an idempotent change that is
already made records nothing. Each recorded call is ``{"call": method, "params": {...}}``,
positional arguments named as the real client's method names them.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

#: method name prefixes that only read
READS = ("get_", "list_")

def _no_answer(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {}


class _NoWait:
    def wait(self, **kwargs: Any) -> None:
        return None


class CallRecorder:
    """``client``'s reads go through; any other method is recorded and answered by
    ``answer`` (an empty dict by default). Waiters return at once: nothing changed."""

    def __init__(self, client: Any,
                 answer: Callable[[str, dict[str, Any]], Any] = _no_answer) -> None:
        self._client = client
        self._answer = answer
        self.calls: list[dict[str, Any]] = []

    def get_waiter(self, name: str) -> _NoWait:
        return _NoWait()

    def __getattr__(self, method: str) -> Any:
        real = getattr(self._client, method)
        if method.startswith(READS):
            return real

        def record(*args: Any, **kwargs: Any) -> Any:
            params = _named(real, args, kwargs)
            self.calls.append({"call": method, "params": params})
            return self._answer(method, params)

        return record


def _named(method: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
           ) -> dict[str, Any]:
    """The call's arguments by the names ``method`` gives them (``**kwargs`` spread)."""
    try:
        bound = inspect.signature(method).bind(*args, **kwargs)
    except (TypeError, ValueError):  # no signature to read: keep what was passed
        return {**{f"arg{i}": a for i, a in enumerate(args)}, **kwargs}
    named: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        if bound.signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
            named.update(value)
        elif bound.signature.parameters[name].kind is inspect.Parameter.VAR_POSITIONAL:
            named.update({f"arg{i}": a for i, a in enumerate(value)})
        else:
            named[name] = value
    return named
