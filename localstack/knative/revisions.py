"""A Service's ``spec.template`` as the serving plane's ``RevisionSpec``.

The annotations, concurrency and resources of a template are read with Knative's own
names and defaults (``platforms.knative``), and bounded as Knative's webhook bounds them
(``platforms.knative_admission``). A value that cannot be read is a ``Cause``
naming its field: the API refuses such an object with 422 before it is stored, as
Knative's webhook does, so the reconciler never meets one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from modelfn.deploy.deployment import cpu_cores, memory_bytes
from modelfn.localstack.knative.errors import Cause
from modelfn.localstack.plane import Resources, RevisionSpec
from modelfn.platforms import knative as kn
from modelfn.platforms.knative_admission import read_annotations, spec_problems
from modelfn.runtime.errors import ModelfnError

if TYPE_CHECKING:
    from collections.abc import Mapping

TEMPLATE = "spec.template"
ANNOTATIONS = f"{TEMPLATE}.metadata.annotations"
CONTAINER = f"{TEMPLATE}.spec.containers[0]"


class TemplateError(Exception):
    def __init__(self, causes: tuple[Cause, ...]) -> None:
        super().__init__("; ".join(f"{c.field}: {c.message}" for c in causes))
        self.causes = causes


def _annotations(template: Mapping[str, Any]) -> tuple[dict[str, float], list[Cause]]:
    raw = (template.get("metadata") or {}).get("annotations") or {}
    values, problems = read_annotations(raw)
    return values, [Cause(f"{ANNOTATIONS}.{p.field}", p.message) for p in problems]


def _resources(container: Mapping[str, Any]) -> tuple[Resources, list[Cause]]:
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
    return Resources(cpus=cpus, memory_bytes=memory), causes


def _environment(container: Mapping[str, Any]) -> tuple[dict[str, str], list[Cause]]:
    env: dict[str, str] = {}
    causes: list[Cause] = []
    for i, entry in enumerate(container.get("env") or []):
        name = str(entry.get("name", ""))
        if name in kn.RESERVED_ENV:
            causes.append(Cause(f"{CONTAINER}.env[{i}].name",
                                f'Invalid value: "{name}": is a reserved environment variable'))
        elif "valueFrom" in entry:
            causes.append(Cause(f"{CONTAINER}.env[{i}].valueFrom",
                                "Forbidden: the local platform has no Secrets or ConfigMaps; "
                                "use value"))
        else:
            env[name] = str(entry.get("value", ""))
    return env, causes


def revision_spec(namespace: str, service: str, name: str,
                  template: Mapping[str, Any], defaults: kn.Defaults = kn.DEFAULTS
                  ) -> RevisionSpec:
    """The revision ``name`` of ``service``, as its template asks; ``TemplateError`` naming
    each field that cannot be read."""
    spec = template.get("spec") or {}
    containers = spec.get("containers") or []
    causes: list[Cause] = []
    if len(containers) != 1:
        causes.append(Cause(f"{TEMPLATE}.spec.containers",
                            f"Invalid value: {len(containers)}: the local platform runs "
                            "exactly one container per revision"))
    container: Mapping[str, Any] = containers[0] if containers else {}
    values, found = _annotations(template)
    causes += found
    resources, found = _resources(container)
    causes += found
    env, found = _environment(container)
    causes += found
    causes += [Cause(f"{TEMPLATE}.spec.{p.field}", p.message)
               for p in spec_problems(spec, defaults)]
    if causes:
        raise TemplateError(tuple(causes))

    cc = int(spec.get("containerConcurrency", defaults.container_concurrency))
    timeout = int(spec.get("timeoutSeconds") or defaults.revision_timeout_s)  # 0: default
    target = values.get(kn.TARGET, defaults.container_concurrency_target_default)
    if cc > 0:
        utilisation = values.get(kn.TARGET_UTILIZATION,
                                 defaults.container_concurrency_target_percentage)
        target = min(target, cc * utilisation / 100)
    window = values.get(kn.WINDOW, defaults.stable_window_s)
    readiness = container.get("readinessProbe") or {}
    probe = (readiness.get("httpGet") or {}).get("path")
    tcp = "tcpSocket" in readiness and "httpGet" not in readiness
    command = tuple(str(a) for a in (container.get("command") or [])
                    + (container.get("args") or []))
    return RevisionSpec(
        namespace=namespace, service=service, name=name,
        image=str(container.get("image", "")), env=env, command=command,
        container_concurrency=cc, target=max(target, 0.01),
        min_scale=int(values.get(kn.MIN_SCALE, values.get(kn.MIN_SCALE_CAMEL,
                                                            defaults.min_scale))),
        max_scale=int(values.get(kn.MAX_SCALE, values.get(kn.MAX_SCALE_CAMEL,
                                                            defaults.max_scale))),
        initial_scale=int(values.get(kn.INITIAL_SCALE, defaults.initial_scale)),
        retention_s=values.get(kn.RETENTION, defaults.scale_to_zero_pod_retention_s),
        idle_s=window, timeout_s=float(timeout),
        progress_deadline_s=values.get(kn.PROGRESS_DEADLINE, defaults.progress_deadline_s),
        resources=resources,
        readiness_path=None if tcp else str(probe) if probe else RevisionSpec.readiness_path)
