"""Deployments rendered as Knative Services and Cloud Run's subset."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelfn.deploy import knative
from modelfn.deploy.deployment import Batching, Deployment, Resources, Scaling
from modelfn.handlers.environment import FunctionEnvironment
from modelfn.platforms import knative as kn

IMAGE = "registry.local/modelfn/digits@sha256:" + "a" * 64
STORE = FunctionEnvironment(repository=None, models=["digits:2"], store="s3://b/models")


def canary(**kwargs: object) -> Deployment:
    return Deployment("digits", 2, IMAGE, STORE, batching=Batching(8, 1),
                      traffic={1: 90, 2: 10}, namespace="ml", **kwargs)  # type: ignore[arg-type]


def test_one_service_per_model_one_tagged_revision_per_version() -> None:
    service = knative.render(canary())
    assert (service["apiVersion"], service["kind"]) == ("serving.knative.dev/v1", "Service")
    assert service["metadata"]["name"] == "digits"
    assert service["metadata"]["namespace"] == "ml"
    template = service["spec"]["template"]
    assert template["metadata"]["name"] == "digits-v2"
    assert service["spec"]["traffic"] == [
        {"revisionName": "digits-v1", "percent": 90, "tag": "v1"},
        {"revisionName": "digits-v2", "percent": 10, "tag": "v2"},
    ]


def test_the_revision_runs_the_image_by_digest_with_the_store_ref() -> None:
    container = knative.render(canary())["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == IMAGE
    assert container["env"] == [{"name": "MODELFN_MODELS", "value": "digits:2"},
                                {"name": "MODELFN_STORE", "value": "s3://b/models"}]
    assert all(e["name"] not in kn.RESERVED_ENV for e in container["env"])


def test_concurrency_and_scaling_come_from_batching() -> None:
    template = knative.render(canary(scaling=Scaling(min_scale=1, max_scale=4)))["spec"][
        "template"]
    assert template["spec"]["containerConcurrency"] == 16
    annotations = template["metadata"]["annotations"]
    assert annotations[kn.TARGET] == "8"
    assert annotations[kn.MIN_SCALE] == "1"
    assert annotations[kn.MAX_SCALE] == "4"


def test_min_scale_is_zero_by_default() -> None:
    annotations = knative.render(canary())["spec"]["template"]["metadata"]["annotations"]
    assert annotations[kn.MIN_SCALE] == "0"


def test_probes_use_v2_health_and_the_startup_budget_fits_the_deadline() -> None:
    template = knative.render(canary(), startup_budget_s=120)["spec"]["template"]
    container = template["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    startup = container["startupProbe"]
    budget = startup["periodSeconds"] * startup["failureThreshold"]
    deadline = kn.parse_duration(template["metadata"]["annotations"][kn.PROGRESS_DEADLINE])
    assert budget == 120
    assert budget < deadline


def test_gpu_limits() -> None:
    container = knative.render(canary(resources=Resources(cpu="4", memory="16Gi", gpu=1)))[
        "spec"]["template"]["spec"]["containers"][0]
    assert container["resources"] == {"limits": {"cpu": "4", "memory": "16Gi",
                                                 "nvidia.com/gpu": "1"}}


def test_cloudrun_keeps_what_cloud_run_honours() -> None:
    service = knative.render_cloudrun(canary(scaling=Scaling(max_scale=3)), region="europe-west4")
    assert service["metadata"]["labels"]["cloud.googleapis.com/location"] == "europe-west4"
    template = service["spec"]["template"]
    assert template["metadata"]["annotations"] == {kn.MIN_SCALE_CAMEL: "0",
                                                   kn.MAX_SCALE_CAMEL: "3"}
    container = template["spec"]["containers"][0]
    assert "readinessProbe" not in container
    assert container["startupProbe"]["httpGet"]["path"] == "/v2/health/ready"


@pytest.mark.parametrize(("budget", "threshold"), [(300, 300), (900, 600)])
def test_cloudrun_bounds_the_startup_probe(budget: int, threshold: int) -> None:
    container = knative.render_cloudrun(canary(), "us-central1", startup_budget_s=budget)[
        "spec"]["template"]["spec"]["containers"][0]
    assert container["startupProbe"]["failureThreshold"] == threshold


def test_cloudrun_gpu_asks_for_the_accelerator_and_unthrottled_cpu() -> None:
    service = knative.render_cloudrun(canary(resources=Resources(cpu="4", memory="16Gi", gpu=1)),
                                      "us-central1", startup_budget_s=900)
    template = service["spec"]["template"]
    assert template["spec"]["nodeSelector"] == {"run.googleapis.com/accelerator": "nvidia-l4"}
    assert template["metadata"]["annotations"]["run.googleapis.com/cpu-throttling"] == "false"
    assert template["spec"]["containers"][0]["startupProbe"]["failureThreshold"] == 900


BAKED = FunctionEnvironment(repository=Path("/opt/modelfn/models"), models=["digits:2"])


@pytest.mark.parametrize("render", ["knative", "cloudrun"])
@pytest.mark.parametrize(("function", "resources"), [
    (STORE, Resources(cpu="2", memory="2Gi")),  # CPU, the model from the store
    (BAKED, Resources(cpu="500m")),  # CPU, the model baked into the image
    (STORE, Resources(cpu="4", memory="16Gi", gpu=1)),  # GPU
    (BAKED, Resources(gpu=2)),
])
def test_rendered_services_pass_knatives_crd_schema_and_admission(
    render: str, function: FunctionEnvironment, resources: Resources
) -> None:
    """Validated as the local API server validates: Knative's own CRD (schema, strict
    pruning) and its webhook's checks."""
    from modelfn.localstack.knative.schema import admit

    deployment = Deployment("digits", 2, IMAGE, function, batching=Batching(8, 1),
                            resources=resources, scaling=Scaling(min_scale=1, max_scale=4),
                            traffic={1: 90, 2: 10}, namespace="ml")
    service = (knative.render(deployment) if render == "knative"
               else knative.render_cloudrun(deployment, "europe-west4"))
    knative.validate(service)
    admitted = admit(service, strict=True)
    assert admitted["spec"]["traffic"] == service["spec"]["traffic"]


def test_an_invalid_service_is_refused_naming_the_field() -> None:
    from modelfn.deploy.errors import InvalidObject

    service = knative.render(canary())
    service["spec"]["traffic"][0]["percent"] = 50  # 50 + 10
    with pytest.raises(InvalidObject, match="spec.traffic"):
        knative.validate(service)
    service = knative.render(canary())
    service["spec"]["template"]["spec"]["containers"][0]["imagePolicy"] = "Always"
    with pytest.raises(InvalidObject, match="imagePolicy"):
        knative.validate(service)


@pytest.mark.parametrize("render", ["knative", "cloudrun"])
def test_a_grpc_function_names_its_port_h2c_and_probes_tcp(render: str) -> None:
    """Knative (and Cloud Run) route gRPC to a port named h2c; the function speaks no HTTP
    then, and opens its port once every model is warm, so the probes are TCP connects."""
    grpc = FunctionEnvironment(repository=None, models=["digits:2"], store="s3://b/models",
                               protocol="grpc")
    deployment = Deployment("digits", 2, IMAGE, grpc, batching=Batching(8, 1),
                            traffic={2: 100}, namespace="ml")
    service = (knative.render(deployment) if render == "knative"
               else knative.render_cloudrun(deployment, "europe-west4"))
    knative.validate(service)
    (container,) = service["spec"]["template"]["spec"]["containers"]
    assert container["ports"] == [{"name": "h2c", "containerPort": kn.DEFAULT_PORT}]
    assert {"name": "MODELFN_PROTOCOL", "value": "grpc"} in container["env"]
    assert container["startupProbe"]["tcpSocket"] == {}
    assert all("httpGet" not in container.get(p, {}) for p in
               ("startupProbe", "readinessProbe", "livenessProbe"))
