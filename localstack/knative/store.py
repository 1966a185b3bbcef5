"""Services with cluster semantics: uid, resourceVersion, generation, and a platform status.

``ServiceStore`` is the local API server's storage. One counter gives every write a
``resourceVersion`` (a string, as clients must treat it); a replace or patch that names a
stale one is a 409 ``Conflict``, and so is a delete whose preconditions fail. The counter
starts from the clock (microseconds), so a version from an earlier run of the platform is
older than any this store gives: a watch resumed from it is told it expired. Admission
checks every object (``schema.admit``), its annotations' size and, with the revisions
made so far (``know_revisions``), that a template which keeps its name does not change
(``schema.revision_causes``). ``generation`` moves only when
``spec`` does; ``status`` is written only by the platform (``set_status``): what clients
send there is ignored. Every change is an ``Event`` to subscribers, and the last events
are kept so a watch can resume from a ``resourceVersion``. Safe to call from any thread.
"""

from __future__ import annotations

import collections
import copy
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from modelfn.localstack.knative.errors import (
    AlreadyExists,
    Gone,
    Invalid,
    MalformedRequest,
    NotFound,
    ObjectModified,
    PreconditionFailed,
    TooLargeResourceVersion,
)
from modelfn.localstack.knative.patches import merge_patch
from modelfn.localstack.knative.schema import admit, revision_causes
from modelfn.platforms.knative_schema import Cause

if TYPE_CHECKING:
    from collections.abc import Callable

    from modelfn.localstack.knative.schema import Made

    #: (namespace, revision) -> the revision made under that name, if there is one
    Revisions = Callable[[str, str], Made | None]

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"
#: events kept for watches that resume from a resourceVersion
HISTORY = 1000
#: metadata the server owns: kept from the stored object on every update
SYSTEM_META = ("uid", "creationTimestamp", "generation", "name", "namespace")
#: the most ``metadata.annotations`` may hold, keys and values together (Kubernetes' own)
ANNOTATIONS_MAX_BYTES = 256 * 1024

Key = tuple[str, str]


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Event:
    type: str  # ADDED, MODIFIED or DELETED
    object: dict[str, Any]
    resource_version: int

    @property
    def key(self) -> Key:
        meta = self.object["metadata"]
        return meta["namespace"], meta["name"]


class ServiceStore:
    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._objects: dict[Key, dict[str, Any]] = {}
        #: the version before this store's first write
        self._first = self._version = time.time_ns() // 1000
        self._history: collections.deque[Event] = collections.deque(maxlen=HISTORY)
        self._subscribers: list[Callable[[Event], None]] = []
        self._revisions: Revisions | None = None

    def know_revisions(self, lookup: Revisions | None) -> None:
        """Where admission finds the revisions already made (the reconciler's); None
        forgets it. ``lookup`` is called under the store's lock: it must not call back."""
        with self._lock:
            self._revisions = lookup

    def _check_revision(self, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        template = obj["spec"].get("template") or {}
        revision = (template.get("metadata") or {}).get("name")
        made = None
        if revision and self._revisions is not None:
            made = self._revisions(obj["metadata"]["namespace"], str(revision))
        causes = revision_causes(obj, old, made)
        if causes:
            raise Invalid(obj["metadata"]["name"], tuple(causes))

    # -- reads -------------------------------------------------------------------------

    @property
    def resource_version(self) -> str:
        with self._lock:
            return str(self._version)

    def get(self, namespace: str, name: str) -> dict[str, Any]:
        with self._lock:
            obj = self._objects.get((namespace, name))
            if obj is None:
                raise NotFound(name)
            return copy.deepcopy(obj)

    def find(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            obj = self._objects.get((namespace, name))
            return None if obj is None else copy.deepcopy(obj)

    def list(self, namespace: str | None = None) -> tuple[list[dict[str, Any]], str]:
        """The objects (in one namespace, or all), and the resourceVersion they are as of."""
        with self._lock:
            items = [copy.deepcopy(o) for (ns, _), o in sorted(self._objects.items())
                     if namespace is None or ns == namespace]
            return items, str(self._version)

    def subscribe(self, callback: Callable[[Event], None], *, since: int | None = None,
                  initial: bool = False) -> Callable[[], None]:
        """Call ``callback(event)`` for every change from now on (under the store's lock:
        keep it short), after an ADDED event per object when ``initial`` (a watch from
        "now"), or the kept events newer than ``since``; returns a function that
        unsubscribes. ``Gone`` (410) when ``since`` is older than the kept history (or than
        this store), ``TooLargeResourceVersion`` when this store has not reached it."""
        with self._lock:
            if initial:
                for _, obj in sorted(self._objects.items()):
                    callback(Event(ADDED, copy.deepcopy(obj),
                                   int(obj["metadata"]["resourceVersion"])))
            elif since is not None:
                after = since
                if after > self._version:
                    raise TooLargeResourceVersion(after, self._version)
                forgotten = after < self._version and (
                    not self._history or self._history[0].resource_version > after + 1)
                if after < self._first or forgotten:
                    raise Gone(f"too old resource version: {after} ({self._version})")
                for event in self._history:
                    if event.resource_version > after:
                        callback(event)
            self._subscribers.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)

        return unsubscribe

    # -- writes ------------------------------------------------------------------------

    def _emit(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        event = Event(kind, copy.deepcopy(obj), self._version)
        self._history.append(event)
        for callback in list(self._subscribers):
            callback(event)
        return copy.deepcopy(obj)

    def _bump(self, obj: dict[str, Any]) -> None:
        self._version += 1
        obj["metadata"]["resourceVersion"] = str(self._version)

    def create(self, namespace: str, body: dict[str, Any], *, strict: bool = False
               ) -> dict[str, Any]:
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {}) if isinstance(obj, dict) else None
        if isinstance(meta, dict):
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = f"{meta['generateName']}{uuid.uuid4().hex[:5]}"
            _same_namespace(meta, namespace)
        obj = admit(obj, strict=strict)
        _check_annotations(obj)
        meta = obj["metadata"]
        with self._lock:
            key = (namespace, meta["name"])
            if key in self._objects:
                raise AlreadyExists(meta["name"])
            for field in ("resourceVersion", "deletionTimestamp", "managedFields"):
                meta.pop(field, None)
            self._check_revision(obj, None)
            meta.update(uid=str(uuid.uuid4()), creationTimestamp=now(), generation=1)
            obj.pop("status", None)
            self._bump(obj)
            self._objects[key] = obj
            return self._emit(ADDED, obj)

    def replace(self, namespace: str, name: str, body: dict[str, Any], *,
                strict: bool = False, require_version: bool = True) -> dict[str, Any]:
        """PUT: the whole object. Its ``metadata.resourceVersion`` must be the stored one
        (a stale one is ``ObjectModified``); ``require_version=False`` lets a patch omit it."""
        obj = copy.deepcopy(body)
        if isinstance(obj, dict) and isinstance(obj.get("metadata"), dict):
            obj["metadata"].setdefault("name", name)
            _same_namespace(obj["metadata"], namespace)
        obj = admit(obj, strict=strict)
        _check_annotations(obj)
        with self._lock:
            if obj["metadata"]["name"] != name:
                raise MalformedRequest(f"the name of the object ({obj['metadata']['name']}) "
                                       f"does not match the name on the URL ({name})",
                                       name=name)
            old = self._objects.get((namespace, name))
            if old is None:
                raise NotFound(name)
            given = obj["metadata"].get("resourceVersion")
            if given is None and require_version:
                raise Invalid(name, (Cause("metadata.resourceVersion",
                                           "Invalid value: 0: must be specified for an update"),))
            if given is not None and given != old["metadata"]["resourceVersion"]:
                raise ObjectModified(name)
            self._check_revision(obj, old)
            meta = obj["metadata"]
            for field in SYSTEM_META:
                meta[field] = old["metadata"][field]
            if obj.get("spec") != old.get("spec"):
                meta["generation"] = old["metadata"]["generation"] + 1
            if "status" in old:
                obj["status"] = old["status"]
            else:
                obj.pop("status", None)
            if _same(obj, old):
                return copy.deepcopy(old)  # a no-op write changes nothing, as in a cluster
            self._bump(obj)
            self._objects[(namespace, name)] = obj
            return self._emit(MODIFIED, obj)

    def patch(self, namespace: str, name: str, patch: Any, *, strict: bool = False,
              apply: Callable[[Any, Any], Any] = merge_patch) -> dict[str, Any]:
        """A patch (by default a JSON merge patch; ``apply(current, patch)`` makes the new
        object); a ``metadata.resourceVersion`` the patch sets is a precondition."""
        with self._lock:
            current = self.get(namespace, name)
            merged = apply(current, patch)
            if not isinstance(merged, dict) or not isinstance(merged.get("metadata"), dict):
                raise MalformedRequest("the patched object has no metadata")
            given = merged["metadata"].get("resourceVersion")
            if given is None or given == current["metadata"]["resourceVersion"]:
                merged["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            return self.replace(namespace, name, merged, strict=strict)

    def delete(self, namespace: str, name: str, *, uid: str | None = None,
               resource_version: str | None = None) -> dict[str, Any]:
        """Delete the object, if it still has ``uid`` and ``resource_version`` (when
        given: a delete's preconditions); ``PreconditionFailed`` keeps it."""
        with self._lock:
            obj = self._objects.get((namespace, name))
            if obj is None:
                raise NotFound(name)
            meta = obj["metadata"]
            for field, wanted, have in (("UID", uid, meta["uid"]), (
                    "ResourceVersion", resource_version, meta["resourceVersion"])):
                if wanted is not None and wanted != have:
                    raise PreconditionFailed(name, field, wanted, have)
            del self._objects[(namespace, name)]
            self._bump(obj)
            return self._emit(DELETED, obj)

    def set_status(self, namespace: str, name: str, status: dict[str, Any], *,
                   uid: str | None = None) -> dict[str, Any] | None:
        """The platform's write of ``status`` (None if the object is gone, or is not the
        object ``uid`` any more); an unchanged status writes nothing."""
        with self._lock:
            obj = self._objects.get((namespace, name))
            if obj is None or uid is not None and obj["metadata"]["uid"] != uid:
                return None
            if obj.get("status") == status:
                return copy.deepcopy(obj)
            obj["status"] = copy.deepcopy(status)
            self._bump(obj)
            return self._emit(MODIFIED, obj)


def _same_namespace(meta: dict[str, Any], namespace: str) -> None:
    """Fill in the URL's namespace; a body naming another is ``MalformedRequest``."""
    given = meta.get("namespace")
    if given not in (None, "", namespace):
        raise MalformedRequest("the namespace of the provided object does not match the namespace "
                               f"sent on the request ({given!r} in the object, {namespace!r} on "
                               "the URL)")
    meta["namespace"] = namespace


def _check_annotations(obj: dict[str, Any]) -> None:
    """``metadata.annotations`` fit Kubernetes' limit (keys and values, in bytes)."""
    annotations = obj["metadata"].get("annotations") or {}
    size = sum(len(key.encode()) + len(str(value).encode())
               for key, value in annotations.items())
    if size > ANNOTATIONS_MAX_BYTES:
        raise Invalid(obj["metadata"]["name"], (Cause(
            "metadata.annotations",
            f"Too long: must have at most {ANNOTATIONS_MAX_BYTES} bytes", "FieldValueTooLong"),))


def _same(new: dict[str, Any], old: dict[str, Any]) -> bool:
    def strip(o: dict[str, Any]) -> dict[str, Any]:
        out = dict(o)
        out["metadata"] = {k: v for k, v in o["metadata"].items()
                           if k not in ("resourceVersion", "managedFields")}
        return out

    return strip(new) == strip(old)
