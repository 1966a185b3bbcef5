"""A Service's ``spec.template`` as the serving plane's ``RevisionSpec``.

The annotations, concurrency and resources of a template are read with Knative's own
names and defaults (``platforms.knative``). A value that cannot be read is a ``Cause``
naming its field: the API refuses such an object with 422 before it is stored, as
Knative's webhook does, so the reconciler never meets one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from modelfn.deploy.deployment import cpu_cores, memory_bytes
from modelfn.localstack.knative.errors import Cause
from modelfn.localstack.plane import Resources, RevisionSpec
from modelfn.platforms import knative as kn
from modelfn.runtime.errors import ModelfnError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

TEMPLATE = "spec.template"
ANNOTATIONS = f"{TEMPLATE}.metadata.annotations"
CONTAINER = f"{TEMPLATE}.spec.containers[0]"


class TemplateError(Exception):
    def __init__(self, causes: tuple[Cause, ...]) -> None:
        super().__init__("; ".join(f"{c.field}: {c.message}" for c in causes))
        self.causes = causes


def _number(text: str) -> float:
    value = float(text)
    if value < 0:
        raise ValueError("must be 0 or more")
    return value


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError("must be 0 or more")
    return value


def _percent(text: str) -> float:
    value = float(text)
    if not 1 <= value <= 100:
        raise ValueError("must be between 1 and 100")
    return value


#: annotation -> how its value is read
_ANNOTATION_PARSERS: dict[str, Callable[[str], float]] = {
    kn.TARGET: _number,
    kn.TARGET_UTILIZATION: _percent,
    kn.MIN_SCALE: _count,
    kn.MAX_SCALE: _count,
    kn.MIN_SCALE_CAMEL: _count,
    kn.MAX_SCALE_CAMEL: _count,
    kn.INITIAL_SCALE: _count,
    kn.RETENTION: kn.parse_duration,
    kn.WINDOW: kn.parse_duration,
    kn.PROGRESS_DEADLINE: kn.parse_duration,
    kn.SCALE_DOWN_DELAY: kn.parse_duration,
    kn.TARGET_BURST_CAPACITY: float,
}


def _annotations(template: Mapping[str, Any]) -> tuple[dict[str, float], list[Cause]]:
    raw = (template.get("metadata") or {}).get("annotations") or {}
    values: dict[str, float] = {}
    causes: list[Cause] = []
    for name, parse in _ANNOTATION_PARSERS.items():
        if name not in raw:
            continue
        try:
            values[name] = parse(str(raw[name]))
        except ValueError as exc:
            causes.append(Cause(f"{ANNOTATIONS}.{name}", f'Invalid value: "{raw[name]}": {exc}'))
    if values.get(kn.INITIAL_SCALE, 1) == 0:  # Knative's allow-zero-initial-scale: false
        causes.append(Cause(f"{ANNOTATIONS}.{kn.INITIAL_SCALE}",
                            'Invalid value: "0": must be greater than 0 (the cluster does not '
                            "allow a zero initial scale)"))
    minimum = values.get(kn.MIN_SCALE, values.get(kn.MIN_SCALE_CAMEL, 0))
    maximum = values.get(kn.MAX_SCALE, values.get(kn.MAX_SCALE_CAMEL, 0))
    if maximum and minimum > maximum:
        causes.append(Cause(f"{ANNOTATIONS}.{kn.MIN_SCALE}",
                            f"Invalid value: {minimum:g}: must be less than or equal to "
                            f"max-scale {maximum:g}"))
    return values, causes


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
    cc = int(spec.get("containerConcurrency", defaults.container_concurrency))
    if not 0 <= cc <= defaults.container_concurrency_max_limit:
        causes.append(Cause(f"{TEMPLATE}.spec.containerConcurrency",
                            f"Invalid value: {cc}: expected 0 <= {cc} <= "
                            f"{defaults.container_concurrency_max_limit}"))
    timeout = int(spec.get("timeoutSeconds", defaults.revision_timeout_s))
    if not 0 < timeout <= defaults.max_revision_timeout_s:
        causes.append(Cause(f"{TEMPLATE}.spec.timeoutSeconds",
                            f"Invalid value: {timeout}: must be between 1 and "
                            f"{defaults.max_revision_timeout_s}"))
    if causes:
        raise TemplateError(tuple(causes))

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
