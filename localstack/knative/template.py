"""A Service's ``spec.template`` as the serving plane's ``RevisionSpec``.

The annotations, concurrency and resources of a template are read with Knative's own
names and defaults (``platforms.knative``), and bounded as Knative's webhook bounds them
(``platforms.knative_schema.read_template``), and the template must be one the local
platform can run (one container, no variables from Secrets or ConfigMaps). A value that
cannot be read is a ``Cause`` naming its field: the API refuses such an object with 422
before it is stored, as Knative's webhook does, so the reconciler never meets one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from modelfn.localstack.plane import ResourceLimits, RevisionSpec
from modelfn.platforms import knative as kn
from modelfn.platforms.knative_schema import CONTAINER, TEMPLATE, Cause, read_template

if TYPE_CHECKING:
    from collections.abc import Mapping


class TemplateError(Exception):
    def __init__(self, causes: tuple[Cause, ...]) -> None:
        super().__init__("; ".join(f"{c.field}: {c.message}" for c in causes))
        self.causes = causes


def _local_causes(containers: list[Any], container: Mapping[str, Any]
                  ) -> tuple[list[Cause], list[Cause]]:
    """What the local platform cannot run that Knative could: more than one container
    (before Knative's causes) and variables from Secrets or ConfigMaps (after them)."""
    count = []
    if len(containers) != 1:
        count.append(Cause(f"{TEMPLATE}.spec.containers",
                           f"Invalid value: {len(containers)}: the local platform runs "
                           "exactly one container per revision"))
    refs = [Cause(f"{CONTAINER}.env[{i}].valueFrom",
                  "Forbidden: the local platform has no Secrets or ConfigMaps; use value")
            for i, entry in enumerate(container.get("env") or [])
            if "valueFrom" in entry and entry.get("name") not in kn.RESERVED_ENV]
    return count, refs


def template_causes(template: Mapping[str, Any], defaults: kn.Defaults = kn.DEFAULTS
                    ) -> list[Cause]:
    """What Knative refuses of ``template``, and what the local platform cannot run."""
    try:
        revision_spec("", "", "check", template, defaults)
    except TemplateError as exc:
        return list(exc.causes)
    return []


def revision_spec(namespace: str, service: str, name: str,
                  template: Mapping[str, Any], defaults: kn.Defaults = kn.DEFAULTS
                  ) -> RevisionSpec:
    """The revision ``name`` of ``service``, as its template asks; ``TemplateError`` naming
    each field that cannot be read."""
    spec = template.get("spec") or {}
    containers = spec.get("containers") or []
    container: Mapping[str, Any] = containers[0] if containers else {}
    read, causes = read_template(template, defaults)
    before, after = _local_causes(containers, container)
    causes = before + causes + after
    if causes:
        raise TemplateError(tuple(causes))

    values = read.annotations
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
        image=str(container.get("image", "")), env=read.env, command=command,
        container_concurrency=cc, target=max(target, 0.01),
        min_scale=int(values.get(kn.MIN_SCALE, values.get(kn.MIN_SCALE_CAMEL,
                                                            defaults.min_scale))),
        max_scale=int(values.get(kn.MAX_SCALE, values.get(kn.MAX_SCALE_CAMEL,
                                                            defaults.max_scale))),
        initial_scale=int(values.get(kn.INITIAL_SCALE, defaults.initial_scale)),
        retention_s=values.get(kn.RETENTION, defaults.scale_to_zero_pod_retention_s),
        idle_s=window, timeout_s=float(timeout),
        progress_deadline_s=values.get(kn.PROGRESS_DEADLINE, defaults.progress_deadline_s),
        resources=ResourceLimits(cpus=read.cpus, memory_bytes=read.memory_bytes),
        readiness_path=None if tcp else str(probe) if probe else RevisionSpec.readiness_path)
