"""Helpers for the serving plane's tests (tests/localstack/serving)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from modelfn.localstack.plane import RevisionSpec, RevisionState
from modelfn.process.supervisor import alive as alive  # re-exported for the tests

if TYPE_CHECKING:
    from pathlib import Path

    from modelfn.localstack.serving import LocalServingPlane

NS = "default"
#: generous liveness bound for anything that waits on real processes
PATIENCE_S = 90.0


def spec(name: str, repo: Path | str, **overrides: Any) -> RevisionSpec:
    env = {"MODELFN_REPOSITORY": str(repo), "MODELFN_LOG_LEVEL": "warning"}
    env.update(overrides.pop("env", {}))
    return RevisionSpec(namespace=NS, service=overrides.pop("service", "digits"), name=name,
                        image=overrides.pop("image", "modelfn-digits:test"), env=env,
                        **overrides)


def wait_for(predicate: Any, what: str, timeout: float = PATIENCE_S) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {timeout:g} s waiting for {what}")
        time.sleep(0.02)


def wait_settled(plane: LocalServingPlane, name: str) -> RevisionState:
    """Wait until the revision is READY or FAILED (never stuck Unknown); its state."""
    wait_for(lambda: plane.revision_status(NS, name).state is not RevisionState.UNKNOWN,
             f"{name} to become ready or fail")
    return plane.revision_status(NS, name).state


