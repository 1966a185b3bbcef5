"""The Kubernetes REST API for ``serving.knative.dev/v1`` Services, on loopback.

The paths, verbs and bodies are those the official ``kubernetes`` client and ``kubectl``
use: discovery, list (one namespace or all, ``?watch=true`` for a stream of events), get,
create, replace, patch (JSON merge patch; a strategic merge patch is one for a custom
resource, as the API server treats it; server-side apply as a merge of the applied
configuration) and delete. Every error is a ``Status`` object.
``ApiServer`` runs the app with uvicorn over HTTPS in a background thread, behind the
``Door`` (``door.py``: the kubeconfig's token, no browsers, a body limit); bodies are read
by ``bodies.py`` (the Kubernetes API's content types, YAML with an alias budget).
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import re
import secrets
import threading
import time
from typing import TYPE_CHECKING, Any

import orjson
import uvicorn
import yaml
from starlette.applications import Starlette
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from modelfn.localstack.knative.bodies import (
    APPLY_PATCH,
    DELETES,
    JSON_PATCH,
    MERGE_PATCH,
    PATCHES,
    WRITES,
    content_type,
    read,
    read_object,
)
from modelfn.localstack.knative.door import Door
from modelfn.localstack.knative.errors import (
    ApiError,
    BadRequest,
    Gone,
    MethodNotAllowed,
    PathNotFound,
)
from modelfn.localstack.knative.patches import json_patch
from modelfn.localstack.knative.table import table
from modelfn.localstack.knative.tls import Certificate
from modelfn.localstack.state import CONTEXT, write_private
from modelfn.platforms import knative as kn
from modelfn.platforms.knative_schema import version
from modelfn.process.supervisor import free_port

if TYPE_CHECKING:
    import socket
    from collections.abc import AsyncIterator, Callable
    from pathlib import Path

    from starlette.requests import Request

    from modelfn.localstack.knative.store import Event, ServiceStore

HOST = "127.0.0.1"
#: what ``/version`` reports: the Kubernetes API this server speaks
#: (every field ``kubernetes.client.VersionInfo`` requires; no Go build behind it, so the
#: build fields say so)
KUBE_VERSION = {"major": "1", "minor": "29", "gitVersion": "v1.29.0+modelfn",
                "gitCommit": "0000000000000000000000000000000000000000",
                "gitTreeState": "clean", "buildDate": "1970-01-01T00:00:00Z",
                "goVersion": "none", "compiler": "modelfn", "platform": "linux/amd64"}
#: a watch with no ``timeoutSeconds`` ends after this long (the API server picks 30-60 min)
WATCH_TIMEOUT_S = 1800.0
#: the OpenAPI extension naming the kind a definition is the schema of
GVK = "x-kubernetes-group-version-kind"
#: the Service's definition, named as the API server names a CRD's (reversed group)
SERVICE = ".".join(reversed(kn.GROUP.split("."))) + f".{kn.VERSION}.{kn.KIND}"
META = "io.k8s.apimachinery.pkg.apis.meta.v1"
VERBS = ["delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"]


def _json(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")


def _error(exc: ApiError) -> Response:
    return _json(exc.status(), exc.status_code)


def _discovery() -> dict[str, dict[str, Any]]:
    group_version = {"groupVersion": kn.API_VERSION, "version": kn.VERSION}
    group = {"name": kn.GROUP, "versions": [group_version], "preferredVersion": group_version}
    resource = {"name": kn.PLURAL, "singularName": "service", "namespaced": True,
                "kind": kn.KIND, "verbs": VERBS, "shortNames": list(kn.SHORT_NAMES),
                "categories": ["all", "knative", "serving"]}
    status = {"name": f"{kn.PLURAL}/status", "singularName": "", "namespaced": True,
              "kind": kn.KIND, "verbs": ["get"]}
    openapi = _openapi()
    # the document's URL carries a hash of its content, as the API server's does: a
    # client that caches it by URL (kubectl's HTTP cache) never keeps a stale schema
    digest = hashlib.sha256(orjson.dumps(openapi, option=orjson.OPT_SORT_KEYS)).hexdigest()
    # the core group (``/api/v1``: pods, namespaces, ...) is not served, so ``/api`` lists
    # no versions: discovery (``kubectl api-resources``) then skips it rather than failing
    # on a group version with no resources
    return {
        "/api": {"kind": "APIVersions", "versions": [],
                 "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0",
                                                 "serverAddress": HOST}]},
        "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": [group]},
        f"/apis/{kn.GROUP}": {"kind": "APIGroup", "apiVersion": "v1", **group},
        f"/apis/{kn.API_VERSION}": {"kind": "APIResourceList", "apiVersion": "v1",
                                    "groupVersion": kn.API_VERSION,
                                    "resources": [resource, status]},
        "/version": KUBE_VERSION,
        "/openapi/v3": {"paths": {f"apis/{kn.API_VERSION}": {
            "serverRelativeURL": f"/openapi/v3/apis/{kn.API_VERSION}?hash={digest.upper()}"}}},
        f"/openapi/v3/apis/{kn.API_VERSION}": openapi,
    }


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _meta_field(name: str, description: str, **schema: Any) -> dict[str, Any]:
    """A field that is one of apimachinery's types, as the API server publishes it."""
    return {"description": description, "default": {}, "allOf": [_ref(f"{META}.{name}")],
            **schema}


def _schemas() -> dict[str, dict[str, Any]]:
    """``components.schemas`` as the API server publishes them for the Service CRD: the
    CRD's ``openAPIV3Schema`` (a copy) as the ``Service`` definition, tagged with its
    group, version and kind, ``metadata`` a reference to ``ObjectMeta`` (which the server
    fills in for every custom resource), and the list kind."""
    service: dict[str, Any] = copy.deepcopy(version()["schema"]["openAPIV3Schema"])
    properties = service.setdefault("properties", {})
    properties["metadata"] = _meta_field(
        "ObjectMeta", "Standard object's metadata. More info: https://git.k8s.io/community/"
        "contributors/devel/sig-architecture/api-conventions.md#metadata")
    service[GVK] = [{"group": kn.GROUP, "version": kn.VERSION, "kind": kn.KIND}]
    type_meta = {key: properties[key] for key in ("apiVersion", "kind") if key in properties}
    service_list = {
        "description": f"ServiceList is a list of {kn.KIND}", "type": "object",
        "required": ["items"],
        "properties": {
            **type_meta,
            "items": {"description": f"List of {kn.PLURAL}. More info: https://git.k8s.io/"
                      "community/contributors/devel/sig-architecture/api-conventions.md",
                      "type": "array", "items": {"default": {}, "allOf": [_ref(SERVICE)]}},
            "metadata": _meta_field(
                "ListMeta", "Standard list metadata. More info: https://git.k8s.io/community/"
                "contributors/devel/sig-architecture/api-conventions.md#types-kinds"),
        },
        GVK: [{"group": kn.GROUP, "version": kn.VERSION, "kind": f"{kn.KIND}List"}],
    }
    return {SERVICE: service, f"{SERVICE}List": service_list, **_apimachinery()}


def _apimachinery() -> dict[str, dict[str, Any]]:
    """The apimachinery types the Service's ``metadata`` refers to, described as
    Kubernetes describes them (the fields a client may set or will read)."""
    string = {"type": "string"}
    strings = {"type": "object", "additionalProperties": {"type": "string", "default": ""}}
    time_ = {"allOf": [_ref(f"{META}.Time")]}
    object_meta = {
        "description": "ObjectMeta is metadata that all persisted resources must have, which "
                       "includes all objects users must create.",
        "type": "object",
        "properties": {
            "annotations": {**strings, "description": "Annotations is an unstructured key "
                            "value map stored with a resource that may be set by external "
                            "tools to store and retrieve arbitrary metadata. They are not "
                            "queryable and should be preserved when modifying objects. More "
                            "info: https://kubernetes.io/docs/concepts/overview/"
                            "working-with-objects/annotations"},
            "creationTimestamp": {**time_, "description": "CreationTimestamp is a timestamp "
                                  "representing the server time when this object was "
                                  "created. Populated by the system. Read-only."},
            "deletionGracePeriodSeconds": {
                "type": "integer", "format": "int64",
                "description": "Number of seconds allowed for this object to gracefully "
                               "terminate before it will be removed from the system. Only "
                               "set when deletionTimestamp is also set. Read-only."},
            "deletionTimestamp": {**time_, "description": "DeletionTimestamp is RFC 3339 "
                                  "date and time at which this resource will be deleted. "
                                  "Populated by the system when a graceful deletion is "
                                  "requested. Read-only."},
            "finalizers": {"type": "array", "items": {"type": "string", "default": ""},
                           "x-kubernetes-list-type": "set",
                           "description": "Must be empty before the object is deleted from "
                                          "the registry. Each entry is an identifier for the "
                                          "responsible component that will remove the entry "
                                          "from the list."},
            "generateName": {**string, "description": "GenerateName is an optional prefix, "
                             "used by the server, to generate a unique name ONLY IF the Name "
                             "field has not been provided."},
            "generation": {"type": "integer", "format": "int64",
                           "description": "A sequence number representing a specific "
                                          "generation of the desired state. Populated by the "
                                          "system. Read-only."},
            "labels": {**strings, "description": "Map of string keys and values that can be "
                       "used to organize and categorize (scope and select) objects. More "
                       "info: https://kubernetes.io/docs/concepts/overview/"
                       "working-with-objects/labels"},
            "managedFields": {"type": "array", "items": {
                "type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "description": "ManagedFields maps workflow-id and version to the set of "
                               "fields that are managed by that workflow."},
            "name": {**string, "description": "Name must be unique within a namespace. Is "
                     "required when creating resources. Cannot be updated. More info: "
                     "https://kubernetes.io/docs/concepts/overview/working-with-objects/"
                     "names#names"},
            "namespace": {**string, "description": "Namespace defines the space within which "
                          "each name must be unique. Cannot be updated. More info: "
                          "https://kubernetes.io/docs/concepts/overview/"
                          "working-with-objects/namespaces"},
            "ownerReferences": {"type": "array", "items": {
                "type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "description": "List of objects depended by this object."},
            "resourceVersion": {**string, "description": "An opaque value that represents "
                                "the internal version of this object. Populated by the "
                                "system. Read-only."},
            "selfLink": {**string, "description": "Deprecated: selfLink is a legacy "
                         "read-only field that is no longer populated by the system."},
            "uid": {**string, "description": "UID is the unique in time and space value for "
                    "this object. Populated by the system. Read-only."},
        },
    }
    list_meta = {
        "description": "ListMeta describes metadata that synthetic resources must have, "
                       "including lists and various status objects.",
        "type": "object",
        "properties": {
            "continue": {**string, "description": "continue may be set if the user set a "
                         "limit on the number of items returned."},
            "remainingItemCount": {"type": "integer", "format": "int64",
                                   "description": "The number of subsequent items in the "
                                                  "list which are not included in this list "
                                                  "response."},
            "resourceVersion": {**string, "description": "String that identifies the "
                                "server's internal version of this object. Read-only."},
            "selfLink": {**string, "description": "Deprecated: selfLink is a legacy "
                         "read-only field that is no longer populated by the system."},
        },
    }
    time_schema = {"description": "Time is a wrapper around time.Time which supports correct "
                                  "marshaling to YAML and JSON.",
                   "type": "string", "format": "date-time"}
    return {f"{META}.ObjectMeta": object_meta, f"{META}.ListMeta": list_meta,
            f"{META}.Time": time_schema}


def _openapi() -> dict[str, Any]:
    """The group version's OpenAPI v3 document: the schemas ``kubectl explain`` reads
    (``components.schemas``, found by ``x-kubernetes-group-version-kind``) and the paths
    that tell ``kubectl`` POST and PATCH take ``fieldValidation``, so it validates on the
    server rather than against the schema. No PATCH takes a strategic merge patch (none
    does for a custom resource), so ``kubectl apply`` patches with a JSON merge patch."""
    gvk = {"group": kn.GROUP, "version": kn.VERSION, "kind": kn.KIND}
    params = [{"name": "fieldValidation", "in": "query", "schema": {"type": "string"}},
              {"name": "fieldManager", "in": "query", "schema": {"type": "string"}}]
    body = {"schema": _ref(SERVICE)}
    ok = {"200": {"description": "OK", "content": {"application/json": body}}}
    post = {"x-kubernetes-group-version-kind": gvk, "parameters": params,
            "requestBody": {"content": {"application/json": body}}, "responses": ok}
    patch = {"x-kubernetes-group-version-kind": gvk, "parameters": params,
             "requestBody": {"content": {kind: {"schema": {"type": "object"}} for kind in (
                 JSON_PATCH, MERGE_PATCH, APPLY_PATCH)}},
             "responses": ok}
    base = f"/apis/{kn.API_VERSION}/namespaces/{{namespace}}/{kn.PLURAL}"
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes CRD Swagger", "version": "v0.1.0"},
            "paths": {base: {"post": post}, f"{base}/{{name}}": {"patch": patch}},
            "components": {"schemas": _schemas()}}


class KnativeApi:
    """The ASGI app over a ``ServiceStore``; ``close_watches()`` ends every open watch."""

    def __init__(self, store: ServiceStore) -> None:
        self.store = store
        self._watches: set[Callable[[], None]] = set()
        base = f"/apis/{kn.API_VERSION}"
        routes = [Route(path, self._static(body)) for path, body in _discovery().items()]
        routes += [
            Route(f"{base}/{kn.PLURAL}", self.collection, methods=["GET"]),
            Route(f"{base}/namespaces/{{namespace}}/{kn.PLURAL}", self.collection,
                  methods=["GET", "POST"]),
            Route(f"{base}/namespaces/{{namespace}}/{kn.PLURAL}/{{name}}", self.item,
                  methods=["GET", "PUT", "PATCH", "DELETE"]),
            Route(f"{base}/namespaces/{{namespace}}/{kn.PLURAL}/{{name}}/status", self.item,
                  methods=["GET"]),
        ]
        self.app = Starlette(routes=routes, exception_handlers={
            ApiError: self._api_error, 404: self._not_found, 405: self._not_allowed,
            Exception: self._internal})

    # -- errors, always Status ---------------------------------------------------------

    async def _api_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return _error(exc)

    async def _not_found(self, request: Request, exc: Exception) -> Response:
        return _error(PathNotFound(request.url.path))

    async def _not_allowed(self, request: Request, exc: Exception) -> Response:
        return _error(MethodNotAllowed(f"{request.method} is not allowed on "
                                       f"{request.url.path}"))

    async def _internal(self, request: Request, exc: Exception) -> Response:
        return _error(ApiError(f"internal error: {type(exc).__name__}: {exc}"))

    @staticmethod
    def _static(body: dict[str, Any]) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            return _json(body)

        return endpoint

    # -- the resource ------------------------------------------------------------------

    async def collection(self, request: Request) -> Response:
        namespace = request.path_params.get("namespace")
        if request.method == "POST":
            created = self.store.create(str(namespace), await read_object(request, WRITES),
                                        strict=_strict(request))
            return _json(created, 201)
        params = request.query_params
        match = _selector(params.get("fieldSelector", ""), params.get("labelSelector", ""))
        if params.get("watch", "").lower() in ("true", "1"):
            return self._watch(request, namespace, match)
        items, version = self.store.list(namespace)
        items = [o for o in items if match(o)]
        if "as=Table" in request.headers.get("accept", ""):
            return _json(table(items, version,
                               include_object=params.get("includeObject") == "Object"))
        return _json({"kind": f"{kn.KIND}List", "apiVersion": kn.API_VERSION,
                      "metadata": {"resourceVersion": version}, "items": items})

    async def item(self, request: Request) -> Response:
        namespace = str(request.path_params["namespace"])
        name = str(request.path_params["name"])
        if request.method == "GET":
            obj = self.store.get(namespace, name)
            if "as=Table" in request.headers.get("accept", ""):
                return _json(table([obj], obj["metadata"]["resourceVersion"]))
            return _json(obj)
        if request.method == "PUT":
            return _json(self.store.replace(namespace, name,
                                            await read_object(request, WRITES),
                                            strict=_strict(request)))
        if request.method == "PATCH":
            return await self._patch(request, namespace, name)
        _strict(request)  # a dry run deletes nothing here either
        uid, resource_version = await _preconditions(request)
        deleted = self.store.delete(namespace, name, uid=uid,
                                    resource_version=resource_version)
        return _json({"kind": "Status", "apiVersion": "v1", "metadata": {},
                      "status": "Success",
                      "details": {"name": name, "group": kn.GROUP, "kind": kn.PLURAL,
                                  "uid": deleted["metadata"]["uid"]}})

    async def _patch(self, request: Request, namespace: str, name: str) -> Response:
        strict = _strict(request)
        kind = content_type(request)
        if kind == JSON_PATCH:
            operations = await read(request, PATCHES)
            return _json(self.store.patch(namespace, name, operations, strict=strict,
                                          apply=json_patch))
        patch = await read_object(request, PATCHES)
        if kind == APPLY_PATCH:
            if self.store.find(namespace, name) is None:
                return _json(self.store.create(namespace, patch, strict=strict), 201)
        return _json(self.store.patch(namespace, name, patch, strict=strict))

    # -- watch ---------------------------------------------------------------------------

    def _watch(self, request: Request, namespace: str | None,
               match: Callable[[dict[str, Any]], bool]) -> Response:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Event | None] = asyncio.Queue()
        since = _resource_version(request.query_params.get("resourceVersion", ""))
        timeout = _timeout(request.query_params.get("timeoutSeconds", ""))

        def push(event: Event | None) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, event)
            except RuntimeError:  # the server's loop is gone: this watch is over
                pass

        def end() -> None:
            push(None)

        try:
            unsubscribe = self.store.subscribe(push, since=since, initial=since is None)
        except Gone as exc:  # as the API server: an ERROR event in the stream, not a 410
            error = orjson.dumps({"type": "ERROR", "object": exc.status()}) + b"\n"
            return Response(error, media_type="application/json")
        self._watches.add(end)
        as_table = "as=Table" in request.headers.get("accept", "")
        include = request.query_params.get("includeObject") == "Object"

        def render(event: Event) -> dict[str, Any]:  # kubectl get -w asks for table rows
            if not as_table:
                return event.object
            return table([event.object], str(event.resource_version), include_object=include)

        async def stream() -> AsyncIterator[bytes]:
            deadline = loop.time() + timeout
            try:
                while (left := deadline - loop.time()) > 0:
                    try:
                        event = await asyncio.wait_for(queue.get(), left)
                    except TimeoutError:
                        return
                    if event is None:
                        return
                    ns, _ = event.key
                    if (namespace is None or ns == namespace) and match(event.object):
                        yield orjson.dumps({"type": event.type, "object": render(event)}) + b"\n"
            finally:
                unsubscribe()
                self._watches.discard(end)

        return StreamingResponse(stream(), media_type="application/json")

    def close_watches(self) -> None:
        for end in list(self._watches):
            end()


def _strict(request: Request) -> bool:
    """Whether undeclared fields are refused; a server-side dry run is refused outright
    (the local platform cannot promise a write it does not make)."""
    if request.query_params.get("dryRun"):
        raise BadRequest("the local Knative API does not support dryRun; leave it out")
    return request.query_params.get("fieldValidation", "") == "Strict"


def _resource_version(value: str) -> int | None:
    """A watch's ``resourceVersion``: None to start from now ("" or "0"), else the
    version after which events are wanted."""
    if value in ("", "0"):
        return None
    if not value.isdigit() or not value.isascii():
        raise BadRequest(f"invalid resource version {value!r}: it must be a non-negative "
                         "integer, as a list or an object gave it")
    return int(value)


def _timeout(value: str) -> float:
    """A watch's ``timeoutSeconds``: a non-negative integer, 0 or none for the default."""
    if value == "":
        return WATCH_TIMEOUT_S
    if not value.isdigit() or not value.isascii():
        raise BadRequest(f"invalid timeoutSeconds {value!r}: it must be a non-negative "
                         "integer")
    return float(value) or WATCH_TIMEOUT_S


async def _preconditions(request: Request) -> tuple[str | None, str | None]:
    """The ``uid`` and ``resourceVersion`` preconditions of a delete's DeleteOptions (its
    body, if it has one); a dry run in them is refused as in the query."""
    if not await request.body():
        return None, None
    options = await read_object(request, DELETES)
    if options.get("dryRun"):
        raise BadRequest("the local Knative API does not support dryRun; leave it out")
    preconditions = options.get("preconditions") or {}
    if not isinstance(preconditions, dict):
        raise BadRequest("DeleteOptions.preconditions must be an object with uid and "
                         "resourceVersion")
    found = (preconditions.get("uid"), preconditions.get("resourceVersion"))
    if any(value is not None and not isinstance(value, str) for value in found):
        raise BadRequest("DeleteOptions.preconditions.uid and .resourceVersion must be "
                         "strings")
    return found


#: a label selector's tokens: operators, parentheses, commas and the words between them
_LABEL_TOKEN = re.compile(r"\s*(==|!=|=|!|\(|\)|,|<|>|[^\s=!(),<>]+)\s*")
_NAME = r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)"
_LABEL_KEY = re.compile(rf"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                        rf"{_NAME}")
_LABEL_VALUE = re.compile(f"{_NAME}?")
#: the fields a custom resource can be selected by (the API server's own two)
FIELDS = ("metadata.name", "metadata.namespace")
Labels = dict[str, Any]
Requirement = tuple[str, str, frozenset[str]]


def _selector(fields: str, labels: str) -> Callable[[dict[str, Any]], bool]:
    """A field selector (``metadata.name=x``, ``metadata.namespace!=y``) and a label
    selector in Kubernetes' grammar (``a=1,b!=2,c in (x,y),d notin (z),e,!f``), ANDed; a
    selector that does not parse is a ``BadRequest``, as the API server answers it."""
    wanted_fields = _field_selector(fields)
    wanted_labels = _label_selector(labels)

    def match(obj: dict[str, Any]) -> bool:
        meta = obj.get("metadata") or {}
        for key, op, value in wanted_fields:
            if (str(meta.get(key.removeprefix("metadata."), "")) == value) != (op == "="):
                return False
        have = meta.get("labels") or {}
        return all(_label_matches(have, req) for req in wanted_labels)

    return match


def _field_selector(selector: str) -> list[tuple[str, str, str]]:
    """``field=value``, ``field==value``, ``field!=value`` terms, comma-separated (a
    backslash escapes a comma, an ``=`` or itself in a value)."""
    terms: list[str] = [""]
    escaped = False
    for char in selector:
        if escaped:
            terms[-1] += "\\" + char
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == ",":
            terms.append("")
        else:
            terms[-1] += char
    if escaped:
        raise BadRequest(f"invalid field selector {selector!r}: it ends with a lone '\\'")
    out = []
    for term in terms:
        if not term.strip():
            continue
        found = re.match(r"((?:[^=!\\]|\\.|!(?!=))*)(!=|==|=)(.*)", term)
        if found is None:
            raise BadRequest(f"invalid field selector {selector!r}: {term!r} is not "
                             "field=value, field==value or field!=value")
        key, op, value = found.group(1).strip(), found.group(2), found.group(3)
        if key not in FIELDS:
            raise BadRequest(f'field label not supported: "{key}" is not a known field '
                             f"selector: only {', '.join(repr(f) for f in FIELDS)}")
        out.append((key, "!=" if op == "!=" else "=", re.sub(r"\\(.)", r"\1", value)))
    return out


def _label_selector(selector: str) -> list[Requirement]:
    """Kubernetes' label selector grammar: comma-separated requirements, ANDed."""
    if not selector.strip():
        return []
    tokens: list[str] = []
    at = 0
    while at < len(selector):
        found = _LABEL_TOKEN.match(selector, at)
        if found is None or found.end() == at:
            break  # only trailing whitespace is left
        tokens.append(found.group(1))
        at = found.end()

    def bad(why: str) -> BadRequest:
        return BadRequest(f"unable to parse requirement: invalid label selector "
                          f"{selector!r}: {why}")

    def take(expected: str) -> str:
        if not tokens:
            raise bad(f"found end of string, expected {expected}")
        return tokens.pop(0)

    def key_of(token: str) -> str:
        if token in "==!=(),<>" or len(token.split("/")[-1]) > 63 \
                or not _LABEL_KEY.fullmatch(token):
            raise bad(f"{token!r} is not a label key (a name of at most 63 alphanumerics, "
                      "'-', '_' or '.', optionally prefixed by a DNS subdomain and '/')")
        return token

    def value_of(token: str) -> str:
        if len(token) > 63 or not _LABEL_VALUE.fullmatch(token):
            raise bad(f"{token!r} is not a label value (at most 63 alphanumerics, '-', '_' "
                      "or '.', starting and ending with an alphanumeric)")
        return token

    requirements: list[Requirement] = []
    while True:
        token = take("'!' or a label key")
        if token == "!":
            requirements.append((key_of(take("a label key")), "!", frozenset()))
        else:
            key = key_of(token)
            op = tokens[0] if tokens else ","
            if op == ",":
                requirements.append((key, "exists", frozenset()))
            elif op in ("=", "==", "!="):
                tokens.pop(0)
                value = "" if not tokens or tokens[0] == "," else value_of(tokens.pop(0))
                requirements.append((key, "!=" if op == "!=" else "=", frozenset([value])))
            elif op in ("<", ">"):
                tokens.pop(0)
                number = take("an integer")
                if not re.fullmatch(r"-?\d+", number):
                    raise bad(f"for '<' and '>', the value must be an integer, not {number!r}")
                requirements.append((key, op, frozenset([number])))
            elif op in ("in", "notin"):
                tokens.pop(0)
                if take("'('") != "(":
                    raise bad(f"expected '(' after {op!r}")
                values: set[str] = set()
                while (token := take("a value or ')'")) != ")" or not values:
                    if token == ")":
                        raise bad(f"for {op!r}, the set of values cannot be empty")
                    values.add(value_of(token))
                    if (token := take("',' or ')'")) == ")":
                        break
                    if token != ",":
                        raise bad(f"found {token!r} in the set of values, expected ',' or ')'")
                requirements.append((key, op, frozenset(values)))
            else:
                raise bad(f"found {op!r} after {key!r}, expected one of '=', '==', '!=', "
                          "'in', 'notin', '<', '>', ',' or the end")
        if not tokens:
            return requirements
        if (token := tokens.pop(0)) != ",":
            raise bad(f"found {token!r}, expected ',' or the end")


def _label_matches(labels: Labels, requirement: Requirement) -> bool:
    key, op, values = requirement
    present = key in labels
    value = labels.get(key)
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    if op == "exists":
        return present
    if op == "!":
        return not present
    if op in ("=", "in"):
        return present and text in values
    if op in ("!=", "notin"):
        return not present or text not in values
    try:  # '<' and '>': an integer label against an integer
        have, bound = int(text), int(next(iter(values)))
    except ValueError:
        return False
    return present and (have < bound if op == "<" else have > bound)


class _Server(uvicorn.Server):
    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """Drop idle connections at once: over TLS a plain close waits for the client's
        close_notify, which a client idling in a connection pool never sends."""
        for connection in list(self.server_state.connections):
            cycle = getattr(connection, "cycle", None)
            if cycle is None or cycle.response_complete:
                connection.transport.abort()
        await super().shutdown(sockets)


class ApiServer:
    """``KnativeApi`` served by uvicorn over HTTPS on ``127.0.0.1`` in a background thread,
    behind the ``Door`` that asks every request for ``token``. ``write_kubeconfig(path)``
    gives clients the URL, the token and the certificate to trust."""

    def __init__(self, store: ServiceStore, *, port: int = 0, token: str | None = None
                 ) -> None:
        self.api = KnativeApi(store)
        #: the bearer token every request must carry (a fresh secret unless given)
        self.token = token or secrets.token_urlsafe(32)
        self.certificate = Certificate.make()
        self.port = port or free_port(HOST)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"https://{HOST}:{self.port}"

    def start(self) -> ApiServer:
        certfile, keyfile = self.certificate.files()
        try:
            config = uvicorn.Config(Door(self.api.app, self.token), host=HOST, port=self.port,
                                    ssl_certfile=certfile, ssl_keyfile=keyfile,
                                    log_level="warning", access_log=False, lifespan="off",
                                    timeout_graceful_shutdown=2)
            self._server = server = _Server(config)
            self._thread = threading.Thread(target=server.run, name="knative-api",
                                            daemon=True)
            self._thread.start()
            while not server.started:
                if not self._thread.is_alive():
                    raise RuntimeError(f"the Knative API could not listen on {self.url}")
                time.sleep(0.01)
        finally:
            self.certificate.remove()  # loaded by now: the key stays in memory only
        return self

    def write_kubeconfig(self, path: Path, context: str = CONTEXT,
                         namespace: str = "default") -> None:
        """A kubeconfig that reaches this server (see ``write_kubeconfig``)."""
        write_kubeconfig(path, self.url, self.token, self.certificate.authority_data,
                         context=context, namespace=namespace)

    def stop(self) -> None:
        if self._server is None or self._thread is None:
            return
        self.api.close_watches()
        self._server.should_exit = True
        self._thread.join()
        self._server = self._thread = None


def write_kubeconfig(path: Path, server_url: str, token: str, authority_data: str, *,
                     context: str = CONTEXT, namespace: str = "default") -> None:
    """A kubeconfig whose ``context`` (the current one) reaches ``server_url`` with
    ``token``, trusting the certificate ``authority_data`` (base64 PEM); only its owner
    may read it (mode 0600)."""
    config = {
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [{"name": context, "cluster": {
            "server": server_url, "certificate-authority-data": authority_data}}],
        "users": [{"name": context, "user": {"token": token}}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": context,
                                                   "namespace": namespace}}],
        "current-context": context,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    write_private(path, yaml.safe_dump(config, sort_keys=False).encode())
