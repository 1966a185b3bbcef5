"""Knative's Service CRD, and validation of objects against it as an API server does.

``services.crd.yaml`` beside this module is a copy of
``config/core/300-resources/service.yaml`` from knative/serving (Apache-2.0; its licence
header is kept in the file). Its ``openAPIV3Schema`` validates every object with
``jsonschema``; fields the schema does not declare are pruned, as an API server prunes
custom resources, or refused when the client asks for ``fieldValidation=Strict`` (what
``kubectl`` asks by default). Then come the checks Knative's admission webhook makes
that the schema cannot express: names, the revision-name prefix, traffic; and on an
update, that a template which keeps its name is the template that name was made from
(``revision_causes``: revisions are immutable).
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import TYPE_CHECKING, Any

import jsonschema
import yaml

from modelfn.localstack.knative.errors import BadRequest, Cause, Invalid
from modelfn.localstack.knative.revisions import TemplateError, revision_spec
from modelfn.platforms import knative as kn

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

CRD_FILE = "services.crd.yaml"
PRESERVE = "x-kubernetes-preserve-unknown-fields"
INT_OR_STRING = "x-kubernetes-int-or-string"
#: fields of ``metadata`` a client may send (ObjectMeta); others are pruned
OBJECT_META = frozenset({
    "name", "generateName", "namespace", "labels", "annotations", "uid", "resourceVersion",
    "generation", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
    "finalizers", "ownerReferences", "managedFields", "selfLink",
})
#: RFC 1035 label, as Kubernetes checks ``metadata.name`` of Knative objects
DNS_1035 = kn.DNS_1035
DNS_1035_MAX = kn.DNS_1035_MAX
#: the name Knative gives a template's only container when it has none
USER_CONTAINER = "user-container"
#: a revision already made: the Service it belongs to and the template it was made from
Made = tuple[str, "Mapping[str, Any]"]
#: changes a refusal lists before it says how many more there are
SHOWN_CHANGES = 5


@functools.cache
def crd() -> dict[str, Any]:
    """The CustomResourceDefinition, as shipped."""
    text = resources.files(__package__).joinpath(CRD_FILE).read_text()
    loaded: dict[str, Any] = yaml.safe_load(text)
    return loaded


@functools.cache
def version() -> dict[str, Any]:
    """The CRD's ``v1`` version entry (schema, printer columns, subresources)."""
    entry: dict[str, Any] = next(v for v in crd()["spec"]["versions"] if v["name"] == kn.VERSION)
    return entry


def _int_or_string(node: Any) -> Any:
    """The schema with ``x-kubernetes-int-or-string`` spelled as JSON Schema."""
    if isinstance(node, list):
        return [_int_or_string(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _int_or_string(v) for k, v in node.items() if k != "description"}
    if out.get(INT_OR_STRING) and "anyOf" not in out:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    return out


@functools.cache
def _validator() -> jsonschema.protocols.Validator:
    schema = _int_or_string(version()["schema"]["openAPIV3Schema"])
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft4Validator)
    return cls(schema)


def _path(parts: Iterable[Any]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out


def prune(obj: Any, schema: dict[str, Any], at: str = "") -> list[str]:
    """Drop from ``obj`` (in place) what ``schema`` does not declare; the dropped paths."""
    dropped: list[str] = []
    if isinstance(obj, dict) and not schema.get(PRESERVE):
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key in list(obj):
            where = f"{at}.{key}" if at else key
            if properties is not None and key in properties:
                dropped += prune(obj[key], properties[key], where)
            elif isinstance(extra, dict):
                dropped += prune(obj[key], extra, where)
            elif properties is not None and extra is None:
                del obj[key]
                dropped.append(where)
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(obj):
            dropped += prune(item, schema["items"], f"{at}[{i}]")
    return dropped


def _schema_causes(obj: dict[str, Any]) -> list[Cause]:
    causes = []
    for error in sorted(_validator().iter_errors(obj), key=lambda e: list(e.absolute_path)):
        field = _path(error.absolute_path) or "<root>"
        if error.validator == "required":
            missing = str(error.message).split("'")[1]
            field = f"{field}.{missing}" if error.absolute_path else missing
            causes.append(Cause(field, "Required value", "FieldValueRequired"))
        elif error.validator == "type":
            causes.append(Cause(field, f"Invalid value: {error.instance!r}: {field} in body "
                                       f"must be of type {error.validator_value}"))
        elif error.validator == "enum":
            causes.append(Cause(field, f"Unsupported value: {error.instance!r}: supported "
                                       f"values: {error.validator_value}",
                                "FieldValueNotSupported"))
        else:
            causes.append(Cause(field, f"Invalid value: {error.instance!r}: {error.message}"))
    return causes


def _webhook_causes(obj: dict[str, Any], defaults: kn.Defaults = kn.DEFAULTS) -> list[Cause]:
    """What Knative's validating webhook refuses that the schema lets through."""
    causes: list[Cause] = []
    name = str(obj.get("metadata", {}).get("name", ""))
    if len(name) > DNS_1035_MAX or not DNS_1035.match(name):
        causes.append(Cause("metadata.name", f'Invalid value: "{name}": a DNS-1035 label '
                            "must consist of lower case alphanumeric characters or '-', start "
                            "with an alphabetic character, and end with an alphanumeric "
                            f"character (at most {DNS_1035_MAX} characters)"))
    spec = obj.get("spec") or {}
    template = spec.get("template") or {}
    revision = (template.get("metadata") or {}).get("name")
    if revision is not None and not str(revision).startswith(f"{name}-"):
        causes.append(Cause("spec.template.metadata.name",
                            f'Invalid value: "{revision}": must have prefix "{name}-"'))
    elif revision is not None and (len(str(revision)) > DNS_1035_MAX
                                   or not DNS_1035.match(str(revision))):
        causes.append(Cause("spec.template.metadata.name",
                            f'Invalid value: "{revision}": a revision name must be a DNS-1035 '
                            f"label of at most {DNS_1035_MAX} characters"))
    try:
        revision_spec(str(obj["metadata"].get("namespace", "")), name, "check", template,
                      defaults)
    except TemplateError as exc:
        causes += exc.causes
    causes += traffic_causes(spec.get("traffic"), revision)
    return causes


def traffic_causes(traffic: list[dict[str, Any]] | None, revision: Any = None) -> list[Cause]:
    if traffic is None:
        return []
    causes: list[Cause] = []
    tags: set[str] = set()
    total = 0
    for i, entry in enumerate(traffic):
        at = f"spec.traffic[{i}]"
        latest = entry.get("latestRevision")
        named = entry.get("revisionName")
        if latest is True and named:
            causes.append(Cause(f"{at}.revisionName", "expected exactly one, got both "
                                "(latestRevision true and revisionName)"))
        elif not latest and not named:
            causes.append(Cause(f"{at}.revisionName", "expected exactly one, got neither "
                                "(revisionName or latestRevision: true)",
                                "FieldValueRequired"))
        tag = entry.get("tag")
        if tag is not None:
            if tag in tags:
                causes.append(Cause(f"{at}.tag", f'Duplicate value: "{tag}"',
                                    "FieldValueDuplicate"))
            elif not DNS_1035.match(str(tag)):
                causes.append(Cause(f"{at}.tag", f'Invalid value: "{tag}": a tag must be a '
                                    "DNS-1035 label"))
            tags.add(tag)
        percent = entry.get("percent", 0)
        if isinstance(percent, int) and not 0 <= percent <= 100:
            causes.append(Cause(f"{at}.percent", f"Invalid value: {percent}: must be between "
                                "0 and 100"))
        total += percent if isinstance(percent, int) else 0
    if traffic and total != 100:
        causes.append(Cause("spec.traffic", f"Invalid value: {total}: Traffic targets sum to "
                            f"{total}, want 100"))
    return causes


def _changes(old: Any, new: Any, at: str = "") -> list[str]:
    """Where ``new`` differs from ``old``: ``path: -old +new`` per changed leaf."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for key in [*old, *(k for k in new if k not in old)]:
            where = f"{at}.{key}" if at else str(key)
            if key not in new:
                out.append(f"{where}: -{json.dumps(old[key])}")
            elif key not in old:
                out.append(f"{where}: +{json.dumps(new[key])}")
            else:
                out += _changes(old[key], new[key], where)
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [c for i, (o, n) in enumerate(zip(old, new, strict=True))
                for c in _changes(o, n, f"{at}[{i}]")]
    return [] if old == new else [f"{at or '<template>'}: -{json.dumps(old)} +{json.dumps(new)}"]


def revision_causes(obj: Mapping[str, Any], old: Mapping[str, Any] | None,
                    made: Made | None) -> list[Cause]:
    """Revisions are immutable: a template that keeps its name must be the template the
    name was given before, in the Service's previous object ``old`` (what Knative's webhook
    checks) and in the revision already ``made`` under that name (which must be this
    Service's). ``obj`` and ``old`` are admitted (defaulted) objects."""
    template = obj["spec"].get("template") or {}
    revision = (template.get("metadata") or {}).get("name")
    if not revision:
        return []
    field = "spec.template.metadata.name"
    service = obj["metadata"]["name"]
    if made is not None and made[0] != service:
        return [Cause(field, f'Invalid value: "{revision}": a revision of that name already '
                      f'exists, made for Service "{made[0]}"')]
    before = [made[1]] if made is not None else []
    old_template = (old or {}).get("spec", {}).get("template") or {}
    if (old_template.get("metadata") or {}).get("name") == revision:
        before.insert(0, old_template)
    for earlier in before:
        changes = _changes(earlier, template)
        if changes:
            shown = "; ".join(changes[:SHOWN_CHANGES])
            if len(changes) > SHOWN_CHANGES:
                shown += f"; and {len(changes) - SHOWN_CHANGES} more"
            return [Cause(field, "Saw the following changes without a name change (-old "
                          f"+new): {shown} (revisions are immutable: give the template a new "
                          f'name, not "{revision}", to make a new revision)')]
    return []


def _check_string_maps(meta: dict[str, Any], name: str) -> None:
    """``metadata.labels`` and ``metadata.annotations`` are maps of strings, as the API
    server decodes ObjectMeta: another value is refused, not stored (a label ``a: 1`` was
    kept as a number that no selector found)."""
    for field in ("labels", "annotations"):
        value = meta.get(field)
        if value is None:
            continue
        items = value.items() if isinstance(value, dict) else [(None, value)]
        for _, item in items:
            if not isinstance(item, str):
                kind = {bool: "bool", int: "number", float: "number", list: "array",
                        dict: "object"}.get(type(item), "value")
                target = "string" if isinstance(value, dict) else "map[string]string"
                raise BadRequest(f'Service in version "{kn.VERSION}" cannot be handled as a '
                                 f"Service: json: cannot unmarshal {kind} into Go struct field "
                                 f"ObjectMeta.metadata.{field} of type {target}", name=name)


def admit(obj: dict[str, Any], *, strict: bool = False,
          defaults: kn.Defaults = kn.DEFAULTS) -> dict[str, Any]:
    """``obj`` pruned to the schema and checked as Knative checks it, or ``Invalid`` (422);
    with ``strict``, an undeclared field is ``BadRequest`` (400) as the API server says.
    ``defaults``: the cluster's limits (timeouts, concurrency), a fresh install's unless
    given."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        raise Invalid("", (Cause("metadata", "Required value", "FieldValueRequired"),))
    name = str(meta.get("name", ""))
    _check_string_maps(meta, name)
    dropped = [f"metadata.{k}" for k in list(meta) if k not in OBJECT_META]
    for key in dropped:
        del meta[key.removeprefix("metadata.")]
    if obj.get("kind") != kn.KIND or obj.get("apiVersion") != kn.API_VERSION:
        raise BadRequest(f"the object is not a {kn.KIND} of {kn.API_VERSION} (kind "
                         f"{obj.get('kind')!r}, apiVersion {obj.get('apiVersion')!r})",
                         name=name)
    dropped += prune(obj, version()["schema"]["openAPIV3Schema"])
    if strict and dropped:
        unknown = ", ".join(f'unknown field "{d}"' for d in dropped)
        raise BadRequest(f"Service in version \"{kn.VERSION}\" cannot be handled as a Service: "
                         f"strict decoding error: {unknown}", name=name)
    causes = _schema_causes(obj)
    if not causes:
        causes = _webhook_causes(obj, defaults)
    if causes:
        raise Invalid(name, tuple(causes))
    return default(obj, defaults)


def default(obj: dict[str, Any], defaults: kn.Defaults = kn.DEFAULTS) -> dict[str, Any]:
    """Knative's defaulting webhook, the part clients see: a container name, the revision
    timeout and concurrency, and all traffic to the latest revision."""
    spec = obj.setdefault("spec", {})
    template = spec.setdefault("template", {}).setdefault("spec", {})
    template.setdefault("containerConcurrency", defaults.container_concurrency)
    if not template.get("timeoutSeconds"):  # absent or 0
        template["timeoutSeconds"] = defaults.revision_timeout_s
    for container in template.get("containers") or []:
        container.setdefault("name", USER_CONTAINER)
    if not spec.get("traffic"):
        spec["traffic"] = [{"latestRevision": True, "percent": 100}]
    return obj
