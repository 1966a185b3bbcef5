"""What the local Knative API says about itself: discovery, version and OpenAPI.

``documents(host)`` gives each path's body: the API groups and resources ``kubectl``
discovers (``api-resources``), the ``/version`` it reports, and the OpenAPI v3 document
with the Service's schema (``kubectl explain``) as the API server publishes it for a CRD.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

import orjson

from modelfn.localstack.knative.bodies import APPLY_PATCH, JSON_PATCH, MERGE_PATCH
from modelfn.platforms import knative as kn
from modelfn.platforms.knative_schema import version

#: what ``/version`` reports: the Kubernetes API this server speaks
#: (every field ``kubernetes.client.VersionInfo`` requires; no Go build behind it, so the
#: build fields say so)
KUBE_VERSION = {"major": "1", "minor": "29", "gitVersion": "v1.29.0+modelfn",
                "gitCommit": "0000000000000000000000000000000000000000",
                "gitTreeState": "clean", "buildDate": "1970-01-01T00:00:00Z",
                "goVersion": "none", "compiler": "modelfn", "platform": "linux/amd64"}
#: the OpenAPI extension naming the kind a definition is the schema of
GVK = "x-kubernetes-group-version-kind"
#: the Service's definition, named as the API server names a CRD's (reversed group)
SERVICE = ".".join(reversed(kn.GROUP.split("."))) + f".{kn.VERSION}.{kn.KIND}"
META = "io.k8s.apimachinery.pkg.apis.meta.v1"
VERBS = ["delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"]


def documents(host: str) -> dict[str, dict[str, Any]]:
    """What the API server serves about itself, by path: discovery (``/api``, ``/apis``,
    the group and its resources), ``/version`` and the OpenAPI v3 document."""
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
                                                 "serverAddress": host}]},
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
