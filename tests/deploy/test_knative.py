"""Deployments rendered as Knative Services and Cloud Run's subset."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from modelfn.deploy import knative
from modelfn.deploy.deployment import Batching, Deployment, Resources, Scaling
from modelfn.handlers.environment import FunctionEnvironment
from modelfn.platforms import knative as kn
from modelfn.runtime.errors import InvalidInput

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
    name = template["metadata"]["name"]
    assert re.fullmatch(r"digits-v2-[0-9a-f]{7}", name)
    assert name == f"digits-v2-{knative.template_hash(template)}"
    assert service["spec"]["traffic"] == [  # v1 not read from a cluster: its pre-hash name
        {"revisionName": "digits-v1", "percent": 90, "tag": "v1"},
        {"revisionName": name, "percent": 10, "tag": "v2"},
    ]


def test_a_revision_is_named_by_its_template_so_other_options_are_another_revision() -> None:
    """Knative revisions are immutable: a redeploy with other options needs a new name, and
    one with the same options the same name (so it changes nothing)."""
    first = knative.render(canary())["spec"]["template"]["metadata"]["name"]
    assert knative.render(canary())["spec"]["template"]["metadata"]["name"] == first
    for changed in (canary(scaling=Scaling(min_scale=1)), canary(resources=Resources(cpu="2")),
                    canary(scaling=Scaling(timeout_s=60))):
        other = knative.render(changed)["spec"]["template"]["metadata"]["name"]
        assert other != first and other.startswith("digits-v2-")
    # the split only is no template change
    split = knative.render(Deployment(
        "digits", 2, IMAGE, STORE, batching=Batching(8, 1), traffic={1: 50, 2: 50},
        namespace="ml"))
    assert split["spec"]["template"]["metadata"]["name"] == first


def test_other_versions_keep_the_revisions_their_tags_point_at() -> None:
    service = knative.render(canary(), revisions={1: "digits-v1-abcdef0", 2: "digits-v2-old0000"})
    name = service["spec"]["template"]["metadata"]["name"]
    assert name != "digits-v2-old0000"  # this version's revision is the rendered one
    assert service["spec"]["traffic"] == [
        {"revisionName": "digits-v1-abcdef0", "percent": 90, "tag": "v1"},
        {"revisionName": name, "percent": 10, "tag": "v2"},
    ]
    knative.validate(service)


@pytest.mark.parametrize(("name", "version", "longest"), [
    ("k" * 52, 10, 51), ("k" * 51, 100, 50), ("d" * 41, 10**12, 40)])
def test_names_too_long_for_a_revision_or_tag_host_are_refused(name: str, version: int,
                                                               longest: int) -> None:
    """A name that fits version 1 stays the Service's name (it may be deployed already), so
    a version with more digits can be too long for it."""
    deployment = Deployment(name, version, IMAGE, STORE)
    with pytest.raises(InvalidInput, match=rf"at most {longest} characters.*"
                                            r"modelfn push DIR --name"):
        knative.render(deployment)
    with pytest.raises(InvalidInput, match=rf"at most {longest} characters"):
        knative.render_cloudrun(deployment, "us-central1")


def test_the_longest_name_allowed_renders_valid_names() -> None:
    for version in (1, 100, 12345):
        model = "d" * knative.longest_model_name(version)
        service = knative.render(Deployment(model, version, IMAGE, STORE))
        knative.validate(service)
        assert len(service["spec"]["template"]["metadata"]["name"]) <= kn.DNS_1035_MAX
        assert len(f"v{version}-{model}") <= kn.DNS_1035_MAX


@pytest.mark.parametrize(("model", "service"), [
    ("digits", "digits"), ("simple_string", "simple-string"), ("Simple.Digits", "simple-digits"),
    ("a__b", "a--b"), ("_digits_", "digits"), ("3d_unet", "m-3d-unet"), ("_", "m"),
    ("a-b" + "c" * 49, "a-b" + "c" * 49)])
def test_a_model_name_maps_to_a_dns_1035_service_name(model: str, service: str) -> None:
    assert knative.service_name(model) == service
    assert kn.DNS_1035.match(service)


@pytest.mark.parametrize("model", [
    "simple_string", "Resnet50.onnx", "_x-", "9lives", "m" * 53, "M_" * 100,
    "a" * 199 + "_", "x" * 52 + "_y"])
def test_every_model_name_triton_allows_deploys_under_a_valid_service(model: str) -> None:
    """Service, revision and tag host stay DNS-1035 labels within 63 characters (versions up
    to 13 digits, past a long name's cut); the V2 name the function serves is unchanged."""
    name = knative.service_name(model)
    assert kn.DNS_1035.match(name) and len(name) <= knative.KEPT_MAX
    assert knative.service_name(model) == name  # the same Service for every version
    functions = FunctionEnvironment(repository=None, models=[f"{model}:1"], store="s3://b/m")
    for version in (1, 10**12):
        service = knative.render(Deployment(model, version, IMAGE, functions))
        knative.validate(service)
        assert service["metadata"]["name"] == name
        assert service["metadata"]["annotations"] == {knative.MODEL_ANNOTATION: model}
        assert knative.model_of(service) == model
        env = service["spec"]["template"]["spec"]["containers"][0]["env"]
        assert {"name": "MODELFN_MODELS", "value": f"{model}:1"} in env
        assert len(f"v{version}-{name}") <= kn.DNS_1035_MAX
        cloudrun = knative.render_cloudrun(Deployment(model, version, IMAGE, functions), "r")
        assert cloudrun["metadata"]["name"] == name
        assert cloudrun["spec"]["template"]["metadata"]["name"].startswith(f"{name}-v")


def test_long_names_are_cut_apart_by_a_hash_of_the_whole_name() -> None:
    first, second = knative.service_name("m" * 60 + "_a"), knative.service_name("m" * 60 + "_b")
    assert first != second
    assert len(first) == len(second) == knative.SHORTENED_LEN


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


def test_cloudrun_allows_an_hour_where_knative_allows_ten_minutes() -> None:
    from modelfn.deploy.errors import InvalidObject
    from modelfn.platforms import cloudrun

    long = canary(scaling=Scaling(timeout_s=900))
    knative.validate(knative.render_cloudrun(long, "us-central1"), cloudrun.DEFAULTS)
    with pytest.raises(InvalidObject, match="timeoutSeconds"):
        knative.validate(knative.render(long))
    with pytest.raises(InvalidObject, match="timeoutSeconds"):
        knative.validate(knative.render_cloudrun(canary(scaling=Scaling(timeout_s=3600)),
                                                 "us-central1"))  # Knative's limits
    knative.validate(knative.render_cloudrun(canary(scaling=Scaling(timeout_s=3600)),
                                             "us-central1"), cloudrun.DEFAULTS)


def test_cloudrun_names_the_project_only_when_given() -> None:
    assert "namespace" not in knative.render_cloudrun(canary(), "us-central1")["metadata"]
    given = knative.render_cloudrun(canary(), "us-central1", project="my-proj")
    assert given["metadata"]["namespace"] == "my-proj"
    knative.validate(knative.render_cloudrun(canary(), "us-central1"))


def test_cloudrun_names_the_revision_by_the_template_it_gets() -> None:
    service = knative.render_cloudrun(canary(), "us-central1")
    template = service["spec"]["template"]
    name = template["metadata"]["name"]
    assert name == f"digits-v2-{knative.template_hash(template)}"
    assert name != knative.render(canary())["spec"]["template"]["metadata"]["name"]
    assert service["spec"]["traffic"][1] == {"revisionName": name, "percent": 10, "tag": "v2"}


def test_a_cloudrun_gpu_gets_an_l4s_minimum_cpu_and_memory() -> None:
    service = knative.render_cloudrun(canary(resources=Resources(gpu=1)), "us-central1")
    container = service["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"] == {"limits": {"cpu": "4", "memory": "16Gi",
                                                 "nvidia.com/gpu": "1"}}
    more = knative.render_cloudrun(canary(resources=Resources(cpu="8", memory="32Gi", gpu=1)),
                                   "us-central1")
    assert more["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"][
        "cpu"] == "8"


@pytest.mark.parametrize(("resources", "message"), [
    (Resources(cpu="2", gpu=1), "at least --cpu 4 and --memory 16Gi"),
    (Resources(memory="8Gi", gpu=1), "at least --cpu 4 and --memory 16Gi"),
    (Resources(cpu="4", memory="16Gi", gpu=2), "1 GPU .nvidia-l4. at most"),
])
def test_cloudrun_gpu_limits_are_refused(resources: Resources, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        knative.render_cloudrun(canary(resources=resources), "us-central1")


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
    if render == "cloudrun" and resources.gpu > 1:  # a Cloud Run instance has one L4
        with pytest.raises(InvalidInput, match="1 GPU"):
            knative.render_cloudrun(deployment, "europe-west4")
        return
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


def test_a_versions_revision_is_found_by_its_tag_old_names_included() -> None:
    from modelfn.deploy.knative_target import revisions, served_split

    service = {"metadata": {"name": "digits", "namespace": "ml"}, "spec": {"traffic": [
        {"revisionName": "digits-v1", "percent": 60, "tag": "v1"},  # named before hashes
        {"revisionName": "digits-v2-1a2b3c4", "percent": 30, "tag": "v2"},
        {"revisionName": "digits-00007", "percent": 10, "tag": "v3"},  # named by Knative
        {"revisionName": "digits-v4-abcdef0", "percent": 0},  # untagged
    ]}}
    assert revisions(service) == {1: "digits-v1", 2: "digits-v2-1a2b3c4", 3: "digits-00007",
                                  4: "digits-v4-abcdef0"}
    assert served_split(service).versions == {1: 60, 2: 30, 3: 10, 4: 0}
    assert revisions(None) == {}
