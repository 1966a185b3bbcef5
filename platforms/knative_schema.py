"""Knative's Service CRD, and validation of objects against it as an API server does.

``knative_services.crd.yaml`` beside this module is a copy of
``config/core/300-resources/service.yaml`` from knative/serving (Apache-2.0; its licence
header is kept in the file). Its ``openAPIV3Schema`` validates every object with
``jsonschema`` (the ``knative`` extra, imported on first use); fields the schema does not
declare are pruned, as an API server prunes custom resources, or refused when the client
asks for ``fieldValidation=Strict`` (what ``kubectl`` asks by default). Then come the
checks Knative's admission webhook makes that the schema cannot express: names, the
revision-name prefix, the template (``read_template``: annotations, resources,
environment, limits) and traffic.

Deploy validates what it renders with ``admit`` before it sends or prints it; the local
platform's API admits every object with it. A refusal is ``Refused`` with a ``Cause`` per
field, in Kubernetes' words; ``Undecodable`` is what an API server answers 400,
``Inadmissible`` what it answers 422 (``Service.serving.knative.dev "x" is invalid``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

import yaml

from modelfn.platforms import knative as kn
from modelfn.platforms.knative_admission import read_annotations, spec_problems
from modelfn.platforms.kubernetes import cpu_cores, memory_bytes
from modelfn.runtime.errors import ModelfnError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    import jsonschema

CRD_FILE = "knative_services.crd.yaml"
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
#: paths of a template's parts, as causes name them
TEMPLATE = "spec.template"
ANNOTATIONS = f"{TEMPLATE}.metadata.annotations"
CONTAINER = f"{TEMPLATE}.spec.containers[0]"


@dataclass(frozen=True)
class Cause:
    """One field's problem: ``field`` is a path like ``spec.template.spec.containers[0]``."""

    field: str
    message: str
    reason: str = "FieldValueInvalid"

    def render(self) -> dict[str, str]:
        return {"reason": self.reason, "message": self.message, "field": self.field}


def invalid_message(name: str, causes: tuple[Cause, ...]) -> str:
    """How an API server says a Service is invalid: each field and its problem."""
    listed = ", ".join(f"{c.field}: {c.message}" for c in causes)
    if len(causes) > 1:
        listed = f"[{listed}]"
    return f'Service.{kn.GROUP} "{name}" is invalid: {listed}'


class Refused(ValueError):
    """An object Knative's API server refuses; ``causes`` names each field refused."""

    def __init__(self, message: str, *, name: str = "", causes: tuple[Cause, ...] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.name = name
        self.causes = causes


class Undecodable(Refused):
    """Not a Service the API server can decode (it answers 400 BadRequest)."""


class Inadmissible(Refused):
    """A Service that breaks the CRD's schema or Knative's webhook rules (422 Invalid)."""

    def __init__(self, name: str, causes: tuple[Cause, ...]) -> None:
        super().__init__(invalid_message(name, causes), name=name, causes=causes)


@dataclass(frozen=True)
class Template:
    """What a revision template asks for, read with Knative's names: its annotations as
    numbers (``knative_admission.read_annotations``), its first container's limits and
    the environment variables it gives by value."""

    annotations: dict[str, float]
    cpus: float | None
    memory_bytes: int | None
    env: dict[str, str]


def _limits(container: Mapping[str, Any]) -> tuple[float | None, int | None, list[Cause]]:
    limits = (container.get("resources") or {}).get("limits") or {}
    causes: list[Cause] = []
    cpus = memory = None
    try:
        cpus = cpu_cores(str(limits["cpu"])) if "cpu" in limits else None
    except ModelfnError as exc:
        causes.append(Cause(f"{CONTAINER}.resources.limits.cpu", exc.message))
    try:
        memory = memory_bytes(str(limits["memory"])) if "memory" in limits else None
    except ModelfnError as exc:
        causes.append(Cause(f"{CONTAINER}.resources.limits.memory", exc.message))
    return cpus, memory, causes


def _environment(container: Mapping[str, Any]) -> tuple[dict[str, str], list[Cause]]:
    """The variables given by value; a reserved name is refused (one given ``valueFrom``
    is a Secret's or ConfigMap's, left to the platform)."""
    env: dict[str, str] = {}
    causes: list[Cause] = []
    for i, entry in enumerate(container.get("env") or []):
        name = str(entry.get("name", ""))
        if name in kn.RESERVED_ENV:
            causes.append(Cause(f"{CONTAINER}.env[{i}].name",
                                f'Invalid value: "{name}": is a reserved environment variable'))
        elif "valueFrom" not in entry:
            env[name] = str(entry.get("value", ""))
    return env, causes


def read_template(template: Mapping[str, Any], defaults: kn.Defaults = kn.DEFAULTS
                  ) -> tuple[Template, list[Cause]]:
    """``template`` (a Service's ``spec.template``) read, and a ``Cause`` naming each field
    Knative's webhook refuses: annotations out of range, quantities it cannot read,
    reserved variables, concurrency and timeout past the cluster's limits."""
    raw = (template.get("metadata") or {}).get("annotations") or {}
    values, problems = read_annotations(raw)
    causes = [Cause(f"{ANNOTATIONS}.{p.field}", p.message) for p in problems]
    spec = template.get("spec") or {}
    containers = spec.get("containers") or []
    container: Mapping[str, Any] = containers[0] if containers else {}
    cpus, memory, found = _limits(container)
    causes += found
    env, found = _environment(container)
    causes += found
    causes += [Cause(f"{TEMPLATE}.spec.{p.field}", p.message)
               for p in spec_problems(spec, defaults)]
    return Template(values, cpus, memory, env), causes


def template_causes(template: Mapping[str, Any], defaults: kn.Defaults = kn.DEFAULTS
                    ) -> list[Cause]:
    """What Knative's webhook refuses of ``template``."""
    return read_template(template, defaults)[1]


if TYPE_CHECKING:
    #: what ``admit`` refuses of a ``spec.template``: ``template_causes``, or a platform's
    #: own check (the local platform adds its limits to Knative's)
    TemplateCheck = Callable[[Mapping[str, Any], kn.Defaults], list[Cause]]


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
    import jsonschema  # the knative (or local) extra: only validating needs it

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


def _webhook_causes(obj: dict[str, Any], defaults: kn.Defaults,
                    template_check: TemplateCheck) -> list[Cause]:
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
    causes += template_check(template, defaults)
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
                raise Undecodable(f'Service in version "{kn.VERSION}" cannot be handled as a '
                                  f"Service: json: cannot unmarshal {kind} into Go struct field "
                                  f"ObjectMeta.metadata.{field} of type {target}", name=name)


def admit(obj: dict[str, Any], *, strict: bool = False,
          defaults: kn.Defaults = kn.DEFAULTS,
          template_check: TemplateCheck = template_causes) -> dict[str, Any]:
    """``obj`` pruned to the schema, checked as Knative checks it and defaulted, or
    ``Inadmissible`` (an API server's 422); with ``strict``, an undeclared field is
    ``Undecodable`` (400) as the API server says. ``defaults``: the cluster's limits
    (timeouts, concurrency), a fresh install's unless given; ``template_check``: what of
    ``spec.template`` is refused (Knative's checks unless given)."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        raise Inadmissible("", (Cause("metadata", "Required value", "FieldValueRequired"),))
    name = str(meta.get("name", ""))
    _check_string_maps(meta, name)
    dropped = [f"metadata.{k}" for k in list(meta) if k not in OBJECT_META]
    for key in dropped:
        del meta[key.removeprefix("metadata.")]
    if obj.get("kind") != kn.KIND or obj.get("apiVersion") != kn.API_VERSION:
        raise Undecodable(f"the object is not a {kn.KIND} of {kn.API_VERSION} (kind "
                          f"{obj.get('kind')!r}, apiVersion {obj.get('apiVersion')!r})",
                          name=name)
    dropped += prune(obj, version()["schema"]["openAPIV3Schema"])
    if strict and dropped:
        unknown = ", ".join(f'unknown field "{d}"' for d in dropped)
        raise Undecodable(f"Service in version \"{kn.VERSION}\" cannot be handled as a "
                          f"Service: strict decoding error: {unknown}", name=name)
    causes = _schema_causes(obj)
    if not causes:
        causes = _webhook_causes(obj, defaults, template_check)
    if causes:
        raise Inadmissible(name, tuple(causes))
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
