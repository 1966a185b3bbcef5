"""A template as the serving plane's RevisionSpec: Knative's annotations, names and defaults."""

from __future__ import annotations

from typing import Any

import pytest

from modelfn.localstack.knative.template import TemplateError, revision_spec
from modelfn.localstack.plane import ResourceLimits
from modelfn.platforms import knative as kn


def template(annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    container = {"image": "modelfn-digits:test", "env": [{"name": "MODELFN_MODELS",
                                                          "value": "digits:1"}]}
    container.update(spec.pop("container", {}))
    return {"metadata": {"annotations": annotations or {}},
            "spec": {"containers": [container], **spec}}


def test_defaults_are_knatives() -> None:
    spec = revision_spec("ns", "digits", "digits-00001", template())
    assert (spec.namespace, spec.service, spec.name) == ("ns", "digits", "digits-00001")
    assert spec.env == {"MODELFN_MODELS": "digits:1"}
    assert spec.image == "modelfn-digits:test" and spec.command == ()
    assert spec.container_concurrency == 0 and spec.target == 100.0
    assert (spec.min_scale, spec.max_scale, spec.initial_scale) == (0, 0, 1)
    assert spec.idle_s == kn.DEFAULTS.stable_window_s and spec.retention_s == 0.0
    assert spec.timeout_s == 300.0 and spec.progress_deadline_s == 600.0
    assert spec.readiness_path == "/v2/health/ready" and spec.resources == ResourceLimits()


def test_annotations_concurrency_and_resources_are_read() -> None:
    spec = revision_spec("ns", "digits", "digits-v2", template({
        kn.TARGET: "50", kn.MIN_SCALE: "1", kn.MAX_SCALE_CAMEL: "4", kn.INITIAL_SCALE: "2",
        kn.WINDOW: "1m30s", kn.RETENTION: "5s", kn.PROGRESS_DEADLINE: "120s"},
        containerConcurrency=10, timeoutSeconds=60,
        container={"resources": {"limits": {"cpu": "500m", "memory": "1Gi"}},
                   "command": ["python"], "args": ["-m", "x"],
                   "readinessProbe": {"httpGet": {"path": "/ready"}}}))
    assert spec.target == 7.0  # containerConcurrency 10 x 70% is below the annotation's 50
    assert (spec.min_scale, spec.max_scale, spec.initial_scale) == (1, 4, 2)
    assert (spec.idle_s, spec.retention_s, spec.progress_deadline_s) == (90.0, 5.0, 120.0)
    assert spec.timeout_s == 60.0 and spec.container_concurrency == 10
    assert spec.resources == ResourceLimits(cpus=0.5, memory_bytes=2**30)
    assert spec.command == ("python", "-m", "x") and spec.readiness_path == "/ready"


def test_the_soft_target_wins_when_it_is_smaller() -> None:
    spec = revision_spec("ns", "d", "d-1", template({kn.TARGET: "1",
                                                    kn.TARGET_UTILIZATION: "100"},
                                                   containerConcurrency=4))
    assert spec.target == 1.0


@pytest.mark.parametrize(("annotations", "spec", "field"), [
    ({kn.WINDOW: "soon"}, {}, f"{kn.WINDOW}"),
    ({kn.INITIAL_SCALE: "0"}, {}, f"{kn.INITIAL_SCALE}"),
    ({kn.MIN_SCALE: "5", kn.MAX_SCALE: "2"}, {}, f"{kn.MIN_SCALE}"),
    ({kn.TARGET_UTILIZATION: "150"}, {}, f"{kn.TARGET_UTILIZATION}"),
    ({}, {"timeoutSeconds": 3600}, "spec.template.spec.timeoutSeconds"),
    ({}, {"container": {"env": [{"name": "K_SERVICE", "value": "x"}]}},
     "spec.template.spec.containers[0].env[0].name"),
    ({}, {"container": {"resources": {"limits": {"cpu": "lots"}}}},
     "spec.template.spec.containers[0].resources.limits.cpu"),
])
def test_what_cannot_be_read_names_its_field(annotations: dict[str, str], spec: dict[str, Any],
                                             field: str) -> None:
    with pytest.raises(TemplateError) as info:
        revision_spec("ns", "d", "d-1", template(annotations, **spec))
    assert any(c.field.endswith(field) for c in info.value.causes), info.value.causes
