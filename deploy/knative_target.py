"""A rendered Knative Service applied with the official ``kubernetes`` client, then awaited.

Create, or on 409 a JSON merge patch (containers and traffic are lists, so a merge patch
replaces them whole, which is what a deploy means). Then the Service is read until its
``status.observedGeneration`` reaches ``metadata.generation`` and ``Ready`` is ``True``
(deployed: ``status.url`` and the tags' URLs) or ``False`` (the platform's reason and
message), within a deadline, reporting progress on the way (never the conditions of an
older generation: those may be the failure of a deploy before). A Service the deploy
created that fails is deleted again. Applying a Service whose
spec already holds everything rendered changes nothing.

A model's Service is found by its name (``knative.service_name``: ``simple_string`` is
``simple-string``) and must say it serves that model (``knative.model_of``): a Service
that serves another model whose name maps to the same one (``a_b`` and ``a-b``) is a
``Conflict``, never deployed over, split or deleted.

API errors become ``DeployError`` subclasses with the platform's own message.
``served_split`` reads the split a Service serves, whoever set it; ``revisions`` which
revision each model version's tag (``v<version>``) points at, so a split can be set
without knowing the template hashes in revision names.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from modelfn.deploy.deployment import version_of
from modelfn.deploy.errors import (
    Conflict,
    DeployError,
    Forbidden,
    ImageMissing,
    InvalidObject,
    PlatformNotFound,
    QuotaExceeded,
    Unauthorised,
)
from modelfn.deploy.recorder import CallRecorder
from modelfn.deploy.split import ServedSplit
from modelfn.platforms import knative as kn

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping


class NotReady(DeployError):
    status_code = 503


class ClusterUnreachable(DeployError):
    """The Kubernetes API does not answer (a cluster that is down, a wrong kubeconfig)."""

    status_code = 503


#: the traffic tag of a model version: v<version>
VERSION_TAG = re.compile(r"v([1-9][0-9]*)")
#: Ready=False reasons (revision and route) that mean the image cannot be had
_IMAGE_REASONS = ("ImagePullBackOff", "ErrImagePull", "InvalidImageName", "ContainerMissing")


def knative_error(status: int, what: str, message: str) -> DeployError:
    """An API server's refusal as the ``DeployError`` a user can act on (its own message)."""
    text = f"{what}: HTTP {status}: {message}"
    if status == 401:
        return Unauthorised(f"{text} (check the kubeconfig's credentials)")
    if status == 403:
        if "exceeded quota" in message:
            return QuotaExceeded(text)
        return Forbidden(text)
    if status == 404:
        return PlatformNotFound(text)
    if status == 409:
        return Conflict(text)
    if status in (400, 422):
        return InvalidObject(text)
    if status == 429:
        return QuotaExceeded(text)
    return DeployError(text)


@dataclass(frozen=True)
class KnativeResult:
    name: str
    namespace: str
    url: str
    tag_urls: dict[str, str]
    latest_ready: str
    changed: bool


def _subset(wanted: Any, have: Any) -> bool:
    """Whether everything in ``wanted`` is in ``have`` (dicts by key, lists item by item)."""
    if isinstance(wanted, dict):
        return isinstance(have, dict) and all(
            k in have and _subset(v, have[k]) for k, v in wanted.items())
    if isinstance(wanted, list):
        return (isinstance(have, list) and len(wanted) == len(have)
                and all(_subset(w, h) for w, h in zip(wanted, have, strict=True)))
    return bool(wanted == have) or str(wanted) == str(have)


def _message(exc: Any) -> str:
    import json

    try:
        status = json.loads(exc.body)
        return str(status.get("message") or exc.reason)
    except (TypeError, ValueError, AttributeError):
        return str(getattr(exc, "reason", exc))


def _tagged_version(entry: Mapping[str, Any]) -> int | None:
    found = VERSION_TAG.fullmatch(str(entry.get("tag") or ""))
    return int(found.group(1)) if found else None


def revisions(service: Mapping[str, Any] | None) -> dict[int, str]:
    """Model version -> its revision now: the revision its tag ``v<version>`` points at in
    ``spec.traffic`` (an untagged entry by its name: ``<model>-v<N>[-<hash>]``)."""
    if service is None:
        return {}
    model = str(service.get("metadata", {}).get("name", ""))
    found: dict[int, str] = {}
    untagged: dict[int, str] = {}
    for entry in (service.get("spec") or {}).get("traffic") or []:
        name = entry.get("revisionName")
        if not name:
            continue
        version = _tagged_version(entry)
        if version is not None:
            found[version] = str(name)
        elif (version := version_of(model, str(name))) is not None:
            untagged.setdefault(version, str(name))
    return {**untagged, **found}


def check_model(service: Mapping[str, Any], model: str) -> None:
    """``Conflict`` when ``service`` serves another model than ``model``."""
    from modelfn.deploy.knative import model_of

    owner = model_of(service)
    if owner != model:
        meta = service.get("metadata") or {}
        raise Conflict(f"Knative service {meta.get('namespace', '')}/{meta.get('name')} "
                       f"serves model '{owner}', not '{model}' (both names map to that "
                       "service name): push one of them under another name (modelfn push DIR "
                       "--name NAME)")


def served_split(service: Mapping[str, Any]) -> ServedSplit:
    """The split ``service`` serves: its ``status.traffic`` (the route the platform made,
    the latest revision resolved), or its ``spec.traffic`` while the platform has reported
    no route; a revision named ``<model>-v<N>`` or ``<model>-v<N>-<hash>`` is model version
    N (one of another name, by its tag ``v<N>``)."""
    meta = service.get("metadata", {})
    model = str(meta.get("name", ""))
    status = service.get("status") or {}
    entries = status.get("traffic")
    where = "status.traffic"
    if not entries:
        entries = (service.get("spec") or {}).get("traffic") or [{"latestRevision": True,
                                                                   "percent": 100}]
        where = "spec.traffic"
    versions: dict[int, int] = {}
    others: dict[str, int] = {}
    for entry in entries:
        name = str(entry.get("revisionName") or status.get("latestReadyRevisionName")
                   or "(latest revision)")
        percent = int(entry.get("percent") or 0)
        version = version_of(model, name)
        if version is None and entry.get("revisionName"):
            version = _tagged_version(entry)
        if version is None:
            others[name] = others.get(name, 0) + percent
        else:
            versions[version] = versions.get(version, 0) + percent
    return ServedSplit(versions, f"{where} of service {meta.get('namespace', 'default')}/"
                       f"{model}", others)


class KnativeTarget:
    def __init__(self, api: Any, *, poll_s: float = 0.5, waits: bool = True) -> None:
        """``api``: a ``kubernetes.client.CustomObjectsApi``. ``waits`` False: a change
        returns without reading the Service until it is Ready (what ``recording`` makes)."""
        self.api = api
        self.poll_s = poll_s
        self.waits = waits

    def recording(self) -> tuple[KnativeTarget, CallRecorder]:
        """A target that reads this one's cluster and records its changes (``--dry-run``)."""
        recorder = CallRecorder(self.api)
        return KnativeTarget(recorder, poll_s=self.poll_s, waits=False), recorder

    def _call(self, what: str, method: str, *args: Any) -> Any:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            return getattr(self.api, method)(kn.GROUP, kn.VERSION, *args)
        except ApiException as exc:
            raise knative_error(exc.status, what, _message(exc)) from exc
        except HTTPError as exc:  # no answer at all: connection refused, TLS, DNS
            host = getattr(getattr(self.api, "api_client", None), "configuration", None)
            raise ClusterUnreachable(f"{what}: cannot reach the Kubernetes API at "
                                     f"{getattr(host, 'host', '?')}: {exc}") from exc

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = self._call(f"reading service {namespace}/{name}",
                                               "get_namespaced_custom_object", namespace,
                                               kn.PLURAL, name)
        except PlatformNotFound:
            return None
        return found

    def service_of(self, namespace: str, model: str) -> dict[str, Any] | None:
        """The Service that serves ``model`` (None when there is none); ``Conflict`` when
        the Service of its name serves another model."""
        from modelfn.deploy.knative import service_name

        found = self.get(namespace, service_name(model))
        if found is not None:
            check_model(found, model)
        return found

    def apply(self, service: Mapping[str, Any], *, timeout_s: float = 600.0,
              progress: Callable[[str], None] | None = None) -> KnativeResult:
        """Create or update ``service`` (``knative.render``'s); ``Conflict`` when a Service
        of its name serves another model."""
        from modelfn.deploy.knative import model_of

        meta = service["metadata"]
        name = meta["name"]
        namespace = meta.get("namespace", "default")
        what = f"service {namespace}/{name}"
        existing = self.get(namespace, name)
        changed = True
        if existing is None:
            self._call(f"creating {what}", "create_namespaced_custom_object", namespace,
                       kn.PLURAL, dict(service))
            return self._created(namespace, name, timeout_s, progress)
        check_model(existing, model_of(service))
        mine = {k: meta[k] for k in ("labels", "annotations") if k in meta}
        if _subset(service["spec"], existing.get("spec", {})) and _subset(
                mine, existing["metadata"]):
            changed = False
        else:
            patch = {"metadata": mine, "spec": service["spec"]}
            self._call(f"updating {what}", "patch_namespaced_custom_object", namespace,
                       kn.PLURAL, name, patch)
        return self.wait(namespace, name, changed=changed, timeout_s=timeout_s,
                         progress=progress)

    def _created(self, namespace: str, name: str, timeout_s: float,
                 progress: Callable[[str], None] | None) -> KnativeResult:
        """``wait`` for a Service this deploy created: one that never gets Ready is deleted
        again, so a failed first deploy leaves nothing behind that no routing table names."""
        try:
            return self.wait(namespace, name, timeout_s=timeout_s, progress=progress)
        except (NotReady, ImageMissing) as exc:
            if not self.waits:
                raise
            self._delete(namespace, name)
            raise type(exc)(f"{exc.message}; the service this deploy created was removed "
                            "again") from exc

    def wait(self, namespace: str, name: str, *, changed: bool = True,
             timeout_s: float = 600.0, progress: Callable[[str], None] | None = None
             ) -> KnativeResult:
        """Read the Service until this generation is Ready (or failed, or out of time)."""
        if not self.waits:
            return KnativeResult(name, namespace, "", {}, "", changed)
        deadline = time.monotonic() + timeout_s
        said = ""
        while True:
            found = self.get(namespace, name)
            if found is None:
                raise NotReady(f"service {namespace}/{name} disappeared while deploying")
            status = found.get("status", {})
            conditions = {c.get("type"): c for c in status.get("conditions", [])}
            ready = conditions.get("Ready", {})
            current = status.get("observedGeneration") == found["metadata"].get("generation")
            if current and ready.get("status") == "True":
                tags = {t["tag"]: t["url"] for t in status.get("traffic", [])
                        if t.get("tag") and t.get("url")}
                return KnativeResult(name, namespace, str(status.get("url", "")), tags,
                                     str(status.get("latestReadyRevisionName", "")), changed)
            if current and ready.get("status") == "False":
                text = (f"service {namespace}/{name} is not ready: "
                        f"{ready.get('reason', '')}: {ready.get('message', '')}")
                if any(reason in text for reason in _IMAGE_REASONS):
                    raise ImageMissing(text)
                raise NotReady(text)
            if current:
                note = ready.get("message") or ready.get("reason") or "waiting for the platform"
            else:  # its conditions still speak of the generation before (maybe its failure)
                note = (f"waiting for the platform to take generation "
                        f"{found['metadata'].get('generation')}")
            if progress is not None and note != said:
                progress(note)
                said = note
            if time.monotonic() >= deadline:
                raise NotReady(f"service {namespace}/{name} was not ready after "
                               f"{timeout_s:.0f} s: {note}")
            time.sleep(self.poll_s)

    def set_traffic(self, namespace: str, name: str, traffic: list[dict[str, Any]], *,
                    timeout_s: float = 600.0, progress: Callable[[str], None] | None = None
                    ) -> KnativeResult:
        """Replace the Service's ``spec.traffic`` (a merge patch replaces the list whole) and
        wait until the route is Ready; the same split again changes nothing."""
        what = f"service {namespace}/{name}"
        existing = self.get(namespace, name)
        if existing is None:
            raise PlatformNotFound(f"changing the traffic of {what}: {what} does not exist")
        changed = not _subset(traffic, existing.get("spec", {}).get("traffic", []))
        if changed:
            self._call(f"changing the traffic of {what}", "patch_namespaced_custom_object",
                       namespace, kn.PLURAL, name, {"spec": {"traffic": traffic}})
        return self.wait(namespace, name, changed=changed, timeout_s=timeout_s,
                         progress=progress)

    def revisions(self, namespace: str, model: str) -> dict[int, str]:
        """Each version's revision now (``revisions`` of ``model``'s Service; {} if none)."""
        return revisions(self.service_of(namespace, model))

    def set_split(self, namespace: str, model: str, split: Mapping[int, int], *,
                  timeout_s: float = 600.0, progress: Callable[[str], None] | None = None
                  ) -> KnativeResult:
        """``set_traffic`` of ``model``'s Service for a model-version split, each version at
        the revision its tag points at now; a version the Service has no revision of is
        ``PlatformNotFound``."""
        from modelfn.deploy.knative import service_name, traffic

        name = service_name(model)
        what = f"service {namespace}/{name}"
        existing = self.service_of(namespace, model)
        if existing is None:
            raise PlatformNotFound(f"changing the traffic of {what}: {what} does not exist")
        known = revisions(existing)
        missing = sorted(set(split) - set(known))
        if missing:
            raise PlatformNotFound(
                f"changing the traffic of {what}: it has no revision tagged "
                f"{', '.join(f'v{v}' for v in missing)} (deploy the version again: "
                f"modelfn deploy {model}:{missing[0]} --traffic 0)")
        return self.set_traffic(namespace, name, traffic(name, split, known),
                                timeout_s=timeout_s, progress=progress)

    def delete(self, namespace: str, model: str) -> bool:
        """Delete ``model``'s Service; False when there was none."""
        from modelfn.deploy.knative import service_name

        if self.service_of(namespace, model) is None:
            return False
        self._delete(namespace, service_name(model))
        return True

    def _delete(self, namespace: str, name: str) -> None:
        self._call(f"deleting service {namespace}/{name}", "delete_namespaced_custom_object",
                   namespace, kn.PLURAL, name)
