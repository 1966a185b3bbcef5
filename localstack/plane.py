"""The contract between the local Knative reconciler and the serving plane that runs revisions.

The reconciler (control) reads Services from the local Knative API and decides which
revisions must exist and how traffic is split; it never starts a process or opens a
socket for a request. The serving plane (data) runs each revision's instances, holds
requests while a revision scales from zero, scales it with load and back to zero, and
serves the URLs routes get. They meet here: plain frozen specs one way, a status and a
change callback the other way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping


@dataclass(frozen=True)
class ResourceLimits:
    """What the OS can enforce of a container's ``resources.limits``."""

    cpus: float | None = None  # CPU limit in cores ("500m" = 0.5); pinned to that many CPUs
    memory_bytes: int | None = None


@dataclass(frozen=True)
class RevisionSpec:
    """Everything the serving plane needs to run one revision, derived from its template."""

    namespace: str
    service: str
    name: str
    image: str  # run by ``--containers``; process mode runs the installed modelfn instead
    env: Mapping[str, str]  # the container's env, without PORT (the plane assigns it)
    command: tuple[str, ...] = ()  # the container's command + args, when the template sets them
    container_concurrency: int = 0  # hard per-instance limit; 0 = unlimited
    target: float = 100.0  # soft in-flight target per instance (already × utilisation)
    min_scale: int = 0
    max_scale: int = 0  # 0 = unlimited (the plane applies a local cap)
    initial_scale: int = 1
    retention_s: float = 0.0  # scale-to-zero-pod-retention-period
    idle_s: float = 60.0  # how long without requests before scale-down (stable window)
    timeout_s: float = 300.0  # per request (timeoutSeconds)
    progress_deadline_s: float = 600.0  # how long an instance may take to become ready
    #: ``GET`` it for readiness; None: a TCP connect is readiness (a ``tcpSocket`` probe,
    #: what a gRPC function on an ``h2c`` port has)
    readiness_path: str | None = "/v2/health/ready"
    resources: ResourceLimits = field(default_factory=ResourceLimits)


@dataclass(frozen=True)
class TrafficTarget:
    """One entry of a route: a revision, its percent of unpinned traffic, its optional tag."""

    revision: str
    percent: int
    tag: str | None = None


@dataclass(frozen=True)
class RouteSpec:
    """The traffic of one Service: the split of its main URL, and one pinned URL per tag."""

    namespace: str
    service: str
    traffic: tuple[TrafficTarget, ...]


@dataclass(frozen=True)
class RouteUrls:
    """The URLs the plane serves a route at, reachable from this machine with no DNS setup."""

    url: str  # the Service's URL: follows the split
    tags: Mapping[str, str]  # tag -> the tagged revision's pinned URL


#: a revision's reason when the platform's cap on instances keeps it from starting one
INSTANCE_LIMIT = "InstanceLimit"


class RevisionState(Enum):
    UNKNOWN = "Unknown"  # not yet decided: the first instance is starting
    READY = "True"
    FAILED = "False"


@dataclass(frozen=True)
class RevisionStatus:
    state: RevisionState
    reason: str = ""
    message: str = ""  # for FAILED: the function's own error (its last words)
    instances: int = 0  # instances running now (ready or starting)
    ready_instances: int = 0
    in_flight: int = 0  # requests being served or held
    cold_starts: int = 0  # instances started since the revision was created
    requests: int = 0  # requests answered since the revision was created


class ServingPlane(Protocol):
    """What the reconciler asks of the plane; every call is idempotent."""

    def ensure_revision(self, spec: RevisionSpec) -> None:
        """Create the revision if new (starting ``initial_scale`` instances to prove it can
        become ready, as Knative does); a known name with the same spec changes nothing."""

    def remove_revision(self, namespace: str, name: str) -> None:
        """Drain and stop the revision's instances and forget it."""

    def set_route(self, route: RouteSpec) -> RouteUrls:
        """Serve the route (or change its split) and return its URLs; stable per Service."""

    def remove_route(self, namespace: str, service: str) -> None:
        """Stop serving the Service's URLs."""

    def revision_status(self, namespace: str, name: str) -> RevisionStatus:
        """The revision's state now."""

    def on_change(self, callback: Callable[[str, str], None]) -> None:
        """Call ``callback(namespace, revision)`` whenever a revision's state changes
        (ready, failed, scaled); the reconciler then refreshes the owning Service's status."""
