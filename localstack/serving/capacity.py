"""The local platform's cap on instances running at once, over all revisions.

A machine runs so many model processes before it swaps; a Service asking for more
(min-scale 50, a burst of traffic) must not start them all. Every instance holds a place
from its start until its process is gone; a revision that finds no place waits for one
(its autoscaler tries again each tick) and says why it has no instance: reason
``InstanceLimit``, naming the cap.
"""

from __future__ import annotations

from modelfn.localstack.plane import INSTANCE_LIMIT
from modelfn.runtime.errors import ModelfnError

__all__ = ["INSTANCE_LIMIT", "InstanceCap", "InstanceLimitReached", "default_limit"]


def default_limit(usable_cpus: int) -> int:
    """Two instances per usable CPU (a model process is mostly idle between requests),
    and never fewer than four."""
    return max(4, 2 * usable_cpus)


class InstanceCap:
    """Places for instances; owned by the plane's event loop (not thread safe)."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"the instance limit must be 1 or more, not {limit}")
        self.limit = limit
        self._held: set[object] = set()

    @property
    def running(self) -> int:
        return len(self._held)

    @property
    def full(self) -> bool:
        return len(self._held) >= self.limit

    def take(self, holder: object) -> bool:
        """A place for ``holder``, if one is free."""
        if self.full:
            return False
        self._held.add(holder)
        return True

    def give(self, holder: object) -> None:
        """``holder``'s place back (again is harmless)."""
        self._held.discard(holder)

    def describe(self) -> str:
        return (f"the local platform runs at most {self.limit} instances at once and all "
                f"{self.limit} are in use (raise max_instances to run more)")


class InstanceLimitReached(ModelfnError):
    status_code = 503

    def __init__(self, revision: str, waited_s: float, cap: InstanceCap) -> None:
        super().__init__(f"revision {revision}: no instance could start within "
                         f"{waited_s:g} s: {cap.describe()}")
