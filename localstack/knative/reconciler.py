"""The reconciler: Services in the store become revisions and routes on the serving plane.

One thread works a queue of Service keys, filled by the store's events and the plane's
``on_change``. For a key it makes the world match the Service: a template it has not
seen is a new revision (``spec.template.metadata.name`` or ``<service>-00001``, ...),
``spec.traffic`` (default: 100% to the latest ready revision) becomes the route once the
revisions it names are ready, the oldest revisions nothing routes to are removed beyond the
20 most recent, and ``status`` says what is true now, with Knative's
conditions (``ConfigurationsReady``, ``RoutesReady``, ``Ready``). Revisions are immutable:
``revision()`` tells the store's admission what each name was made from, and a template
that reuses a name for other content never replaces that revision.

What the reconciler made belongs to one object, known by its ``uid``, not by its name: a
Service deleted and created again (even before the reconciler saw the delete) is a new
object whose first revision is its own. The old object's revisions, instances and route
are removed before the new object gets any, and a revision name the old object used is
free again for the new one.
"""

from __future__ import annotations

import copy
import logging
import queue
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from modelfn.localstack.knative.store import DELETED, Event, ServiceStore, now
from modelfn.localstack.knative.template import TemplateError, revision_spec
from modelfn.localstack.plane import (
    INSTANCE_LIMIT,
    RevisionState,
    RevisionStatus,
    RouteSpec,
    RouteUrls,
    ServingPlane,
    TrafficTarget,
)
from modelfn.platforms import knative as kn

if TYPE_CHECKING:
    from collections.abc import Callable

    from modelfn.localstack.knative.schema import Made

log = logging.getLogger("modelfn.knative")
Key = tuple[str, str]
TRUE, FALSE, UNKNOWN = "True", "False", "Unknown"
#: revisions without traffic kept beyond the latest ones (Knative's min-non-active-revisions)
KEEP_NON_ACTIVE = 20
#: Ready takes the worst of ConfigurationsReady and RoutesReady (the first of them on a tie)
_SEVERITY = {FALSE: 0, UNKNOWN: 1, TRUE: 2}


@dataclass
class _Service:
    """What the reconciler has made of one Service (the object ``uid``) so far."""

    uid: str
    revisions: dict[str, Any] = field(default_factory=dict)  # name -> template, in order
    count: int = 0  # templates seen: the n of <service>-0000n
    ever_ready: set[str] = field(default_factory=set)
    route: RouteSpec | None = None
    latest_flags: tuple[bool, ...] = ()  # per route target: it follows the latest revision
    urls: RouteUrls | None = None


@dataclass(frozen=True)
class _Condition:
    status: str
    reason: str = ""
    message: str = ""


class Reconciler:
    def __init__(self, store: ServiceStore, plane: ServingPlane) -> None:
        self.store = store
        self.plane = plane
        self._services: dict[Key, _Service] = {}
        #: (namespace, revision) -> (the owner's uid, (service, template))
        self._made: dict[Key, tuple[str, Made]] = {}
        self._live: dict[Key, str] = {}  # (namespace, service) -> the stored object's uid
        self._made_lock = threading.Lock()  # taken under the store's lock: never call out
        self._queue: queue.Queue[Key | None] = queue.Queue()
        self._pending: set[Key] = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._unsubscribe: Callable[[], None] | None = None

    def start(self) -> Reconciler:
        self.plane.on_change(self._revision_changed)
        self.store.know_revisions(self.revision)
        self._unsubscribe = self.store.subscribe(self._event, initial=True)
        self._thread = threading.Thread(target=self._run, name="knative-reconciler",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.store.know_revisions(None)
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None

    # -- the queue -----------------------------------------------------------------------

    def _enqueue(self, key: Key) -> None:
        with self._lock:
            if key in self._pending:
                return
            self._pending.add(key)
        self._queue.put(key)

    def _event(self, event: Event) -> None:
        uid = str(event.object["metadata"].get("uid", ""))
        with self._made_lock:
            if event.type != DELETED:
                self._live[event.key] = uid
            elif self._live.get(event.key) == uid:
                del self._live[event.key]
        self._enqueue(event.key)

    def revision(self, namespace: str, revision: str) -> Made | None:
        """The Service a revision was made for and its template, if it exists and its
        Service does (a deleted Service's revisions are going, and their names free)."""
        with self._made_lock:
            owned = self._made.get((namespace, revision))
            if owned is None or self._live.get((namespace, owned[1][0])) != owned[0]:
                return None
            return owned[1]

    def _revision_changed(self, namespace: str, revision: str) -> None:
        made = self.revision(namespace, revision)
        if made is not None:
            self._enqueue((namespace, made[0]))

    def _run(self) -> None:
        while (key := self._queue.get()) is not None:
            with self._lock:
                self._pending.discard(key)
            try:
                self.reconcile(*key)
            except Exception:
                log.exception("reconciling %s/%s failed", *key)

    # -- one Service ---------------------------------------------------------------------

    def reconcile(self, namespace: str, name: str) -> None:
        obj = self.store.find(namespace, name)
        uid = None if obj is None else str(obj["metadata"]["uid"])
        known = self._services.get((namespace, name))
        if known is not None and known.uid != uid:
            self._forget(namespace, name)  # deleted, or deleted and created again
        if obj is None or uid is None:
            return
        state = self._services.setdefault((namespace, name), _Service(uid))
        template = obj["spec"].get("template") or {}
        latest, refused = self._revision_for(namespace, name, state, template)
        statuses = {r: self._status(namespace, r) for r in state.revisions}
        for revision, status in statuses.items():
            if status.state is RevisionState.READY:
                state.ever_ready.add(revision)
        config = refused or self._configuration(str(latest), statuses.get(str(latest)))
        ready = [r for r in state.revisions if r in state.ever_ready]
        latest_ready = ready[-1] if ready else None
        route, routes = self._route(namespace, name, obj, latest_ready, statuses,
                                    routed=state.route is not None)
        if route is not None and route != state.route:
            state.urls = self.plane.set_route(route)
            state.route = route
        if route is not None:
            state.latest_flags = tuple(
                bool(e.get("latestRevision", not e.get("revisionName")))
                for e in obj["spec"].get("traffic") or [{"latestRevision": True}])
        self._collect(namespace, state, latest, latest_ready)
        overall = min((config, routes), key=lambda c: _SEVERITY[c.status])
        rendered = self._render(obj, state, latest, latest_ready, {
            "ConfigurationsReady": config, "RoutesReady": routes,
            "Ready": overall if overall.status != TRUE else _Condition(TRUE)})
        self.store.set_status(namespace, name, rendered, uid=uid)

    def _revision_for(self, namespace: str, name: str, state: _Service,
                      template: dict[str, Any]) -> tuple[str | None, _Condition | None]:
        """The revision the template is: the latest if unchanged, else a new one (even when
        it equals an older template, as Knative makes a new revision for any change). A
        name already made from another template (admission refuses that, but a name of
        another Service's, or an update that raced the last revision, can get here) is left
        as it was: (the latest revision so far, a RevisionFailed condition)."""
        latest = next(reversed(state.revisions)) if state.revisions else None
        if latest is not None and state.revisions[latest] == template:
            return latest, None
        revision = (template.get("metadata") or {}).get("name") or \
            kn.revision_name(name, state.count + 1)
        with self._made_lock:
            owned = self._made.get((namespace, revision))
        made = None if owned is None else owned[1]
        if owned is not None and (owned[0] != state.uid or made != (name, template)):
            log.error("%s/%s: revision %s exists with another template", namespace, name,
                      revision)
            return latest, _Condition(
                FALSE, "RevisionFailed", f'Revision creation failed with message: revision '
                f'"{revision}" already exists with another template; give the template a '
                "new name.")
        try:
            spec = revision_spec(namespace, name, revision, template)
        except TemplateError:  # refused at admission, so only a bug gets here
            log.error("the template of %s/%s cannot be run", namespace, name)
            raise
        made_from = copy.deepcopy(template)
        with self._made_lock:
            self._made[(namespace, revision)] = (state.uid, (name, made_from))
        self.plane.ensure_revision(spec)
        state.count += 1
        state.revisions.pop(revision, None)
        state.revisions[revision] = made_from
        return revision, None

    def _status(self, namespace: str, revision: str) -> RevisionStatus:
        try:
            return self.plane.revision_status(namespace, revision)
        except Exception as exc:
            return RevisionStatus(RevisionState.FAILED, "RevisionMissing", str(exc))

    @staticmethod
    def _configuration(latest: str, status: RevisionStatus | None) -> _Condition:
        if status is None or status.state is RevisionState.UNKNOWN:
            return _Condition(UNKNOWN, "RevisionMissing",
                              f'Configuration is waiting for Revision "{latest}" to be ready.')
        if status.state is RevisionState.FAILED and status.reason == INSTANCE_LIMIT:
            return _Condition(FALSE, INSTANCE_LIMIT, f'Revision "{latest}" has no instance: '
                              f"{status.message}")
        if status.state is RevisionState.FAILED:
            return _Condition(FALSE, "RevisionFailed",
                              f'Revision "{latest}" failed with message: {status.message}'
                              + (f" ({status.reason})" if status.reason else ""))
        return _Condition(TRUE)

    def _route(self, namespace: str, name: str, obj: dict[str, Any], latest_ready: str | None,
               statuses: dict[str, RevisionStatus], *, routed: bool
               ) -> tuple[RouteSpec | None, _Condition]:
        """The route ``spec.traffic`` asks for, or None to keep the one there is: as Knative's
        route reconciler, traffic moves only once every revision it names is ready, so a
        revision that is still starting, or fails, never takes over a route that serves
        (``routed``). A Service's first route is programmed at once (its requests are held
        until the revision is ready; there is nothing else to serve them)."""
        traffic = obj["spec"].get("traffic") or [{"latestRevision": True, "percent": 100}]
        targets = []
        for entry in traffic:
            revision = entry.get("revisionName")
            if entry.get("latestRevision", not revision):
                if latest_ready is None:
                    return None, _Condition(UNKNOWN, "RevisionMissing",
                                            "Waiting for the latest revision to be ready.")
                revision = latest_ready
            if revision not in statuses:
                return None, _Condition(FALSE, "RevisionMissing",
                                        f'Revision "{revision}" referenced in traffic not '
                                        "found.")
            targets.append(TrafficTarget(str(revision), int(entry.get("percent") or 0),
                                         entry.get("tag")))
        condition = _Condition(TRUE)
        for target in targets:  # a pinned revision must serve too
            state = statuses[target.revision].state
            if state is RevisionState.FAILED:
                return None, _Condition(FALSE, "RevisionFailed",
                                        f'Revision "{target.revision}" referenced in traffic '
                                        f"failed: {statuses[target.revision].message}")
            if state is RevisionState.UNKNOWN:
                condition = _Condition(UNKNOWN, "RevisionMissing",
                                       f'Waiting for revision "{target.revision}" to be ready.')
        if condition.status is UNKNOWN and routed:
            return None, condition  # the current route serves until the new one can
        return RouteSpec(namespace, name, tuple(targets)), condition

    def _collect(self, namespace: str, state: _Service, latest: str | None,
                 latest_ready: str | None) -> None:
        """Remove the oldest revisions beyond the ``KEEP_NON_ACTIVE`` most recent that are
        neither latest nor routed to. As Knative's garbage collection (which keeps at least
        20 such revisions), a revision that just stopped taking traffic can take it again:
        a rollback, or a split back to the previous revision. Kept, it has no instances
        once idle, as any revision without traffic."""
        keep = {latest, latest_ready}
        if state.route is not None:
            keep |= {t.revision for t in state.route.traffic}
        inactive = [r for r in state.revisions if r not in keep]
        for revision in inactive[:max(0, len(inactive) - KEEP_NON_ACTIVE)]:
            self.plane.remove_revision(namespace, revision)
            del state.revisions[revision]
            state.ever_ready.discard(revision)
            self._unmake(namespace, revision, state.uid)

    def _render(self, obj: dict[str, Any], state: _Service, latest: str | None,
                latest_ready: str | None, conditions: dict[str, _Condition]
                ) -> dict[str, Any]:
        before = {c["type"]: c for c in (obj.get("status") or {}).get("conditions", [])}
        rendered = []
        for kind, condition in conditions.items():
            item = {"type": kind, "status": condition.status}
            if condition.reason:
                item["reason"] = condition.reason
            if condition.message:
                item["message"] = condition.message
            old = before.get(kind, {})
            same = all(old.get(k) == item.get(k) for k in ("status", "reason", "message"))
            item["lastTransitionTime"] = old["lastTransitionTime"] if same else now()
            rendered.append(item)
        status: dict[str, Any] = {"observedGeneration": obj["metadata"]["generation"],
                                  "conditions": rendered}
        if latest is not None:
            status["latestCreatedRevisionName"] = latest
        if latest_ready is not None:
            status["latestReadyRevisionName"] = latest_ready
        if state.urls is not None and state.route is not None:
            status["url"] = state.urls.url
            status["address"] = {"url": state.urls.url}
            status["traffic"] = []
            for follows, target in zip(state.latest_flags, state.route.traffic, strict=True):
                out: dict[str, Any] = {"revisionName": target.revision,
                                       "percent": target.percent, "latestRevision": follows}
                if target.tag:
                    out["tag"] = target.tag
                    out["url"] = state.urls.tags[target.tag]
                status["traffic"].append(out)
        return status

    def _forget(self, namespace: str, name: str) -> None:
        """Remove what was made for the Service's object that is gone: its revisions (their
        instances drained) and its route (its URLs' connections closed)."""
        state = self._services.pop((namespace, name), None)
        # the revisions first: a request held for an instance gets its 503 ("revision ...
        # was removed") on its connection before the route's listener closes them all
        for revision in state.revisions if state else ():
            self.plane.remove_revision(namespace, revision)
            self._unmake(namespace, revision, state.uid if state else "")
        self.plane.remove_route(namespace, name)

    def _unmake(self, namespace: str, revision: str, uid: str) -> None:
        with self._made_lock:
            owned = self._made.get((namespace, revision))
            if owned is not None and owned[0] == uid:
                del self._made[(namespace, revision)]

