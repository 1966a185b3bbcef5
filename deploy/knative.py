"""A ``Deployment`` rendered as a Knative ``serving.knative.dev/v1`` Service, or Cloud Run's subset.

One Service per model; one revision per model version, named ``<model>-v<version>`` and
tagged ``v<version>`` so every version keeps a pinned URL; ``spec.traffic`` holds the
split. The revision serves the V2 health paths as its probes, with a startup budget that
fits inside the progress deadline (otherwise Knative fails a slow first start with
"Initial scale was never achieved"), and the concurrency the model's batching asks for.

Cloud Run runs the same YAML but honours only part of it: min and max scale in camel
case, ``containerConcurrency``, ``timeoutSeconds``, resources and probes; a GPU needs the
accelerator node selector and ``cpu-throttling: "false"``. ``render_cloudrun`` writes that
subset, for ``gcloud run services replace``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from modelfn.deploy.deployment import revision
from modelfn.deploy.errors import InvalidObject
from modelfn.platforms import knative as kn

if TYPE_CHECKING:
    from collections.abc import Mapping

    from modelfn.deploy.deployment import Deployment

READY_PATH = "/v2/health/ready"
LIVE_PATH = "/v2/health/live"
#: seconds a new instance may take to load and warm up its model before it counts as failed
STARTUP_BUDGET_S = 300
#: the progress deadline leaves this much room past the startup budget
DEADLINE_MARGIN_S = 60
MANAGED_BY = {"app.kubernetes.io/managed-by": "modelfn"}
MODEL_LABEL = "modelfn.dev/model"
VERSION_LABEL = "modelfn.dev/version"
GPU_RESOURCE = "nvidia.com/gpu"
CLOUDRUN_GPU = "nvidia-l4"
CLOUDRUN_STARTUP_S = 600
CLOUDRUN_GPU_STARTUP_S = 1800


def tag(version: int) -> str:
    return f"v{version}"


def _limits(deployment: Deployment) -> dict[str, str]:
    resources = deployment.resources
    limits = {}
    if resources.cpu is not None:
        limits["cpu"] = resources.cpu
    if resources.memory is not None:
        limits["memory"] = resources.memory
    if resources.gpu:
        limits[GPU_RESOURCE] = str(resources.gpu)
    return limits


def port_name(deployment: Deployment) -> str:
    """Knative's name for the one port: ``h2c`` carries gRPC (HTTP/2 cleartext)."""
    return "h2c" if deployment.function.protocol == "grpc" else "http1"


def _probe(deployment: Deployment, path: str) -> dict[str, Any]:
    """The V2 health path over HTTP; a gRPC function has no HTTP, and opens its port only
    once every model is loaded and warm, so a TCP connect is its readiness."""
    if deployment.function.protocol == "grpc":
        return {"tcpSocket": {}}
    return {"httpGet": {"path": path}}


def _container(deployment: Deployment, startup_budget_s: int) -> dict[str, Any]:
    env = deployment.function.to_env()
    container: dict[str, Any] = {
        "name": "function",
        "image": deployment.image,
        "ports": [{"name": port_name(deployment), "containerPort": kn.DEFAULT_PORT}],
        "env": [{"name": k, "value": v} for k, v in sorted(env.items())],
        # the probes go to the V2 health paths: ready only after every model warmed up
        "startupProbe": {**_probe(deployment, READY_PATH), "periodSeconds": 1,
                         "failureThreshold": startup_budget_s},
        "readinessProbe": {**_probe(deployment, READY_PATH), "periodSeconds": 1},
        "livenessProbe": {**_probe(deployment, LIVE_PATH), "periodSeconds": 10},
    }
    limits = _limits(deployment)
    if limits:
        container["resources"] = {"limits": limits}
    return container


def traffic(model: str, split: Mapping[int, int]) -> list[dict[str, Any]]:
    """``spec.traffic`` for a split: every version's revision, tagged, at its percent."""
    return [
        {"revisionName": revision(model, version), "percent": percent, "tag": tag(version)}
        for version, percent in sorted(split.items())
    ]


def _metadata(deployment: Deployment) -> dict[str, Any]:
    return {
        "name": deployment.model,
        "namespace": deployment.namespace,
        "labels": {**MANAGED_BY, MODEL_LABEL: deployment.model},
    }


def render(deployment: Deployment, startup_budget_s: int = STARTUP_BUDGET_S) -> dict[str, Any]:
    """The Knative Service for ``deployment``: its version's revision and the whole split."""
    scaling = deployment.scaling
    annotations = {
        kn.MIN_SCALE: str(scaling.min_scale),
        kn.MAX_SCALE: str(scaling.max_scale),
        kn.TARGET: str(deployment.target),
        kn.PROGRESS_DEADLINE: f"{startup_budget_s + DEADLINE_MARGIN_S}s",
    }
    return {
        "apiVersion": kn.API_VERSION,
        "kind": kn.KIND,
        "metadata": _metadata(deployment),
        "spec": {
            "template": {
                "metadata": {
                    "name": deployment.revision(),
                    "labels": {MODEL_LABEL: deployment.model,
                               VERSION_LABEL: str(deployment.version)},
                    "annotations": annotations,
                },
                "spec": {
                    "containerConcurrency": deployment.container_concurrency,
                    "timeoutSeconds": scaling.timeout_s,
                    "containers": [_container(deployment, startup_budget_s)],
                },
            },
            "traffic": traffic(deployment.model, deployment.traffic),
        },
    }


def validate(service: dict[str, Any]) -> None:
    """Knative's own CRD schema and admission checks, before anything is sent or printed:
    an object a cluster would refuse is ``InvalidObject`` naming the field."""
    import copy

    from modelfn.localstack.knative.errors import ApiError
    from modelfn.localstack.knative.schema import admit

    try:
        admit(copy.deepcopy(service), strict=True)
    except ApiError as exc:
        causes = "; ".join(f"{c.field}: {c.message}" for c in exc.causes)
        raise InvalidObject(f"the rendered Service is not valid for Knative: "
                            f"{causes or exc.message}") from exc


def render_cloudrun(
    deployment: Deployment, region: str, startup_budget_s: int = STARTUP_BUDGET_S
) -> dict[str, Any]:
    """The subset of ``render`` Cloud Run honours, for ``gcloud run services replace``.

    ``deployment.namespace`` is the Google Cloud project (ID or number)."""
    service = render(deployment, startup_budget_s)
    service["metadata"]["labels"]["cloud.googleapis.com/location"] = region
    template = service["spec"]["template"]
    scaling = deployment.scaling
    annotations = {kn.MIN_SCALE_CAMEL: str(scaling.min_scale)}
    if scaling.max_scale:
        annotations[kn.MAX_SCALE_CAMEL] = str(scaling.max_scale)
    if deployment.resources.gpu:
        annotations["run.googleapis.com/cpu-throttling"] = "false"
        template["spec"]["nodeSelector"] = {"run.googleapis.com/accelerator": CLOUDRUN_GPU}
    template["metadata"]["annotations"] = annotations
    container = template["spec"]["containers"][0]
    # Cloud Run sets PORT from the one container port and names it http1 or h2c
    container["ports"] = [{"name": port_name(deployment), "containerPort": kn.DEFAULT_PORT}]
    # Cloud Run bounds a startup probe's failureThreshold × periodSeconds at 600 s
    # (1800 s with a GPU) and honours startup and liveness probes, not readiness
    budget = min(startup_budget_s, CLOUDRUN_GPU_STARTUP_S if deployment.resources.gpu
                 else CLOUDRUN_STARTUP_S)
    container["startupProbe"] = {**_probe(deployment, READY_PATH), "periodSeconds": 1,
                                 "failureThreshold": budget}
    del container["readinessProbe"]
    return service
