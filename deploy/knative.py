"""A ``Deployment`` rendered as a Knative ``serving.knative.dev/v1`` Service, or Cloud Run's subset.

One Service per model, named by ``service_name`` (a DNS-1035 label: ``simple_string`` is
Service ``simple-string``; the function still serves the model as ``simple_string``, and
the Service keeps that name in its ``modelfn.dev/model`` annotation, so two models that
map to one name never share a Service); one revision per model version, named
``<service>-v<version>-<hash>`` (the hash of its rendered template: Knative revisions are
immutable, so other options are another revision, and the same options the same one) and
tagged ``v<version>`` so every version keeps one pinned URL across redeploys;
``spec.traffic`` holds the split, each other version at the revision its tag points at
now (``revisions``, read from the Service). The revision serves the V2 health paths as
its probes, with a startup budget that fits inside the progress deadline (otherwise
Knative fails a slow first start with "Initial scale was never achieved"), and the
concurrency the model's batching asks for.

Cloud Run runs the same YAML but honours only part of it: min and max scale in camel
case, ``containerConcurrency``, ``timeoutSeconds``, resources and probes; a GPU needs the
accelerator node selector and ``cpu-throttling: "false"``, and an L4 needs 4 CPU and 16
GiB at least. ``render_cloudrun`` writes that subset, for ``gcloud run services replace``; its
``metadata.namespace`` is the project, left out unless given (gcloud takes the
configured one).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import TYPE_CHECKING, Any

from modelfn.deploy.deployment import REVISION_HASH_LEN, revision
from modelfn.deploy.errors import InvalidObject
from modelfn.platforms import cloudrun as cr
from modelfn.platforms import knative as kn
from modelfn.platforms.knative_schema import Refused, admit
from modelfn.platforms.kubernetes import cpu_cores, memory_bytes
from modelfn.runtime.errors import InvalidInput

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
#: a label (the Service name: always a valid label value) and, on the Service, an
#: annotation with the model's own name: which model a Service serves
MODEL_LABEL = "modelfn.dev/model"
MODEL_ANNOTATION = MODEL_LABEL
VERSION_LABEL = "modelfn.dev/version"
GPU_RESOURCE = "nvidia.com/gpu"
CLOUDRUN_GPU = cr.GPU_ACCELERATOR
CLOUDRUN_STARTUP_S = 600
CLOUDRUN_GPU_STARTUP_S = 1800


def tag(version: int) -> str:
    return f"v{version}"


def longest_model_name(version: int) -> int:
    """The longest Service name whose version ``version`` fits Knative's names: its revision
    ``<service>-v<version>-<hash>`` and its tag's host label ``v<version>-<service>`` are
    DNS-1035 labels of at most 63 characters."""
    revision_room = kn.DNS_1035_MAX - len(f"-v{version}-") - REVISION_HASH_LEN
    tag_room = kn.DNS_1035_MAX - len(f"{tag(version)}-")
    return min(revision_room, tag_room)


#: the longest Service name kept whole: version 1's revision fills a label at this length
#: (a longer model name was never deployable, so shortening it renames no Service)
KEPT_MAX = longest_model_name(1)
#: what a longer name is shortened to, the hash of the whole model name at its end: room
#: for every version of up to 13 digits
SHORTENED_LEN = 40
_NOT_IN_LABEL = re.compile(r"[^a-z0-9-]")


def service_name(model: str) -> str:
    """The Knative (and Cloud Run) Service that serves ``model``: a DNS-1035 label, the
    same for every version. Lower case, each ``_`` or ``.`` (Triton allows them, a label
    does not) as ``-``, without ``-`` at either end, ``m-`` before a leading digit
    (``simple_string`` -> ``simple-string``, ``3D.unet`` -> ``m-3d-unet``); a name longer
    than ``KEPT_MAX`` is cut to ``SHORTENED_LEN`` with a hash of the model name at its
    end. A valid Service name stays as it is. The model's V2 name is never changed."""
    name = _NOT_IN_LABEL.sub("-", model.lower()).strip("-") or "m"
    if not name[0].isalpha():
        name = f"m-{name}"
    if len(name) > KEPT_MAX:
        digest = hashlib.sha256(model.encode()).hexdigest()[:REVISION_HASH_LEN]
        name = f"{name[:SHORTENED_LEN - REVISION_HASH_LEN - 1].rstrip('-')}-{digest}"
    return name


def check_names(model: str, version: int, platform: str = "Knative") -> None:
    """``InvalidInput`` when ``model``'s Service name is too long for version ``version``'s
    names."""
    service = service_name(model)
    longest = longest_model_name(version)
    if len(service) <= longest:
        return
    name = revision(service, version, "0" * REVISION_HASH_LEN)
    host = f"{tag(version)}-{service}"
    over = []
    if len(name) > kn.DNS_1035_MAX:
        over.append(f"revision '{name[:-REVISION_HASH_LEN]}<hash>' ({len(name)} characters)")
    if len(host) > kn.DNS_1035_MAX:
        over.append(f"pinned host label '{host}' ({len(host)} characters)")
    called = "" if service == model else f" (Service '{service}')"
    raise InvalidInput(
        f"model name '{model}'{called} is {len(service)} characters, too long for {platform}: "
        f"version {version}'s {' and '.join(over)} would be over the {kn.DNS_1035_MAX} "
        f"characters of a DNS-1035 label; this deploy allows Service names of at most "
        f"{longest} characters. Push the model under a shorter name (modelfn push DIR --name "
        "SHORT) and deploy that")


def template_hash(template: Mapping[str, Any]) -> str:
    """The short hash a revision name carries: of the template, less its own name."""
    unnamed = {**template, "metadata": {k: v for k, v in (template.get("metadata") or {})
                                        .items() if k != "name"}}
    text = json.dumps(unnamed, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:REVISION_HASH_LEN]


def _name(template: dict[str, Any], service: str, version: int) -> str:
    """Name ``template`` by its content (``digits-v2-1a2b3c4``); the name."""
    name = revision(service, version, template_hash(template))
    template["metadata"] = {"name": name, **{k: v for k, v in template["metadata"].items()
                                             if k != "name"}}
    return name


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


def traffic(service: str, split: Mapping[int, int],
            revisions: Mapping[int, str] | None = None) -> list[dict[str, Any]]:
    """``spec.traffic`` of Service ``service`` for a split: every version's revision,
    tagged, at its percent. ``revisions``: each version's revision now (a version it leaves
    out is taken to be named as before template hashes, ``<service>-v<version>``)."""
    known = revisions or {}
    return [
        {"revisionName": known.get(version) or revision(service, version), "percent": percent,
         "tag": tag(version)}
        for version, percent in sorted(split.items())
    ]


def _metadata(deployment: Deployment, service: str) -> dict[str, Any]:
    return {
        "name": service,
        "namespace": deployment.namespace,
        "labels": {**MANAGED_BY, MODEL_LABEL: service},
        "annotations": {MODEL_ANNOTATION: deployment.model},
    }


def model_of(service: Mapping[str, Any]) -> str:
    """The model a Service serves: its annotation, else (deployed before there was one,
    when the Service had the model's name) its label, else its name."""
    meta = service.get("metadata") or {}
    return str((meta.get("annotations") or {}).get(MODEL_ANNOTATION)
               or (meta.get("labels") or {}).get(MODEL_LABEL) or meta.get("name", ""))


def render(deployment: Deployment, startup_budget_s: int = STARTUP_BUDGET_S,
           revisions: Mapping[int, str] | None = None) -> dict[str, Any]:
    """The Knative Service for ``deployment``: its version's revision and the whole split;
    ``revisions``: the other versions' revisions now (``knative_target.revisions``)."""
    check_names(deployment.model, deployment.version)
    service = service_name(deployment.model)
    scaling = deployment.scaling
    annotations = {
        kn.MIN_SCALE: str(scaling.min_scale),
        kn.MAX_SCALE: str(scaling.max_scale),
        kn.TARGET: str(deployment.target),
        kn.PROGRESS_DEADLINE: f"{startup_budget_s + DEADLINE_MARGIN_S}s",
    }
    template = {
        "metadata": {
            "labels": {MODEL_LABEL: service, VERSION_LABEL: str(deployment.version)},
            "annotations": annotations,
        },
        "spec": {
            "containerConcurrency": deployment.container_concurrency,
            "timeoutSeconds": scaling.timeout_s,
            "containers": [_container(deployment, startup_budget_s)],
        },
    }
    name = _name(template, service, deployment.version)
    return {
        "apiVersion": kn.API_VERSION,
        "kind": kn.KIND,
        "metadata": _metadata(deployment, service),
        "spec": {
            "template": template,
            "traffic": traffic(service, deployment.traffic,
                               {**(revisions or {}), deployment.version: name}),
        },
    }


def validate(service: dict[str, Any], defaults: kn.Defaults = kn.DEFAULTS) -> None:
    """Knative's own CRD schema and admission checks, before anything is sent or printed:
    an object a cluster would refuse is ``InvalidObject`` naming the field. ``defaults``:
    the platform's limits (a fresh Knative's; ``platforms.cloudrun.DEFAULTS``)."""
    import copy

    try:
        admit(copy.deepcopy(service), strict=True, defaults=defaults)
    except Refused as exc:
        causes = "; ".join(f"{c.field}: {c.message}" for c in exc.causes)
        raise InvalidObject(f"the rendered Service is not valid for Knative: "
                            f"{causes or exc.message}") from exc


def _cloudrun_resources(deployment: Deployment) -> Deployment:
    """``deployment`` with what a Cloud Run GPU needs: one L4, with 4 CPU and 16 GiB at
    least (the minimum when not given); ``InvalidInput`` below them or above one GPU."""
    from dataclasses import replace

    resources = deployment.resources
    if not resources.gpu:
        return deployment
    if resources.gpu > cr.MAX_GPUS:
        raise InvalidInput(f"--gpu {resources.gpu}: a Cloud Run instance has {cr.MAX_GPUS} "
                           f"GPU ({cr.GPU_ACCELERATOR}) at most")
    cpu = resources.cpu or cr.GPU_MIN_CPU
    memory = resources.memory or cr.GPU_MIN_MEMORY
    if cpu_cores(cpu) < cpu_cores(cr.GPU_MIN_CPU) or memory_bytes(memory) < memory_bytes(
            cr.GPU_MIN_MEMORY):
        raise InvalidInput(f"--cpu {cpu} --memory {memory}: a Cloud Run GPU "
                           f"({cr.GPU_ACCELERATOR}) needs at least --cpu {cr.GPU_MIN_CPU} "
                           f"and --memory {cr.GPU_MIN_MEMORY}")
    return replace(deployment, resources=replace(resources, cpu=cpu, memory=memory))


def render_cloudrun(
    deployment: Deployment, region: str, startup_budget_s: int = STARTUP_BUDGET_S,
    revisions: Mapping[int, str] | None = None, *, project: str | None = None,
) -> dict[str, Any]:
    """The subset of ``render`` Cloud Run honours, for ``gcloud run services replace``.

    ``project``: the Google Cloud project (ID or number) as ``metadata.namespace``; None
    leaves it out, and gcloud uses its configured project."""
    check_names(deployment.model, deployment.version, "Cloud Run")
    deployment = _cloudrun_resources(deployment)
    service = render(deployment, startup_budget_s, revisions)
    if project is None:
        del service["metadata"]["namespace"]
    else:
        service["metadata"]["namespace"] = project
    service["metadata"]["labels"]["cloud.googleapis.com/location"] = region
    # Cloud Run takes only its own annotations; modelfn reads no Cloud Run Service back
    del service["metadata"]["annotations"]
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
    # the name hashes the template Cloud Run gets, not the Knative one it was made from
    name = _name(template, service["metadata"]["name"], deployment.version)
    for entry in service["spec"]["traffic"]:
        if entry["tag"] == tag(deployment.version):
            entry["revisionName"] = name
    return service
