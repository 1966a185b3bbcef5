"""``modelfn deploy``: a model version from the store to Knative, Cloud Run or AWS Lambda, or
to the local platform through the same clients.

Data (the deployed URL, ``--dry-run`` objects) goes to stdout; progress and notes go to
stderr. ``deploy`` prints the URL it deployed as its last line, so scripts can take it.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any, Literal

import click

from modelfn.cli.errors import exit_on_error, require
from modelfn.cli.params import DURATION, DURATION_OR_ZERO
from modelfn.cli.targets import Where, describe, target_options
from modelfn.net.busy_poll import GRPC_DOES_NOT_POLL, MAX_WINDOW_US
from modelfn.platforms import cloudrun
from modelfn.runtime.errors import InvalidInput

if TYPE_CHECKING:

    from modelfn.deploy.deployment import Deployment
    from modelfn.model_store.routes import ModelRoutes, RouteSource

LOCAL_ROLE = "modelfn-local"


def note(text: str) -> None:
    click.echo(text, err=True)


def _local_role(where: Where) -> str:
    """The execution role local functions run as (created on first use)."""
    iam = where.boto3_client("iam")
    try:
        return str(iam.get_role(RoleName=LOCAL_ROLE)["Role"]["Arn"])
    except iam.exceptions.NoSuchEntityException:
        trust = {"Version": "2012-10-17", "Statement": [{
            "Effect": "Allow", "Action": "sts:AssumeRole",
            "Principal": {"Service": "lambda.amazonaws.com"}}]}
        return str(iam.create_role(RoleName=LOCAL_ROLE,
                                   AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"])


def _yaml(objects: Any) -> str:
    import yaml

    return str(yaml.safe_dump(objects, sort_keys=False))


@click.command()
@click.argument("ref", metavar="NAME[:VERSION]")
@target_options
@click.option("--image", envvar="MODELFN_IMAGE",
              help="The function image (by digest). --target local runs the installed modelfn "
                   "without one.")
@click.option("--registry", envvar="MODELFN_REGISTRY",
              help="Build the image (modelfn build) and push it here (host[:port][/ns], or "
                   "'ecr' for the account's ECR); it is deployed by digest.")
@click.option("--builder", type=click.Choice(["docker", "podman", "buildah"]),
              envvar="MODELFN_BUILDER", help="Image builder for --registry.")
@click.option("--bake", is_flag=True, help="The image holds the model (modelfn build --bake).")
@click.option("--protocol", type=click.Choice(["http", "grpc"]), default="http",
              show_default=True, envvar="MODELFN_DEPLOY_PROTOCOL",
              help="grpc: KServe V2 over gRPC on the function's one port (Knative h2c).")
@click.option("--busy-poll-us", default=0, show_default=True,
              type=click.IntRange(0, MAX_WINDOW_US), envvar="MODELFN_DEPLOY_BUSY_POLL_US",
              help="The function's server polls this long after each request instead of "
                   "sleeping (modelfn serve --busy-poll-us); not on Lambda or with "
                   "--protocol grpc.")
@click.option("--traffic", default=100, show_default=True, type=click.IntRange(0, 100),
              help="Percent of unpinned requests for this version; the others keep the rest.")
@click.option("--min-scale", default=0, show_default=True, type=click.IntRange(0),
              help="Instances kept running when idle (0: scale to zero).")
@click.option("--max-scale", default=0, show_default=True, type=int, help="0: no limit.")
@click.option("--concurrency", type=click.IntRange(1, 1000),
              help="Requests per instance at once, 1 to 1000 (Knative's and Cloud Run's "
                   "limit; Knative's 0, unlimited, is not offered: the autoscaler and the "
                   "gateway need a bound). Default: from batching, at most 1000.")
@click.option("--cpu", help="CPU limit, e.g. 2 or 500m.")
@click.option("--memory", help="Memory limit, e.g. 2Gi (Lambda: its memory size).")
@click.option("--gpu", default=0, type=int,
              help="GPUs per instance (Knative; Cloud Run: 1 L4, with --cpu 4 and --memory "
                   "16Gi at least, the default then).")
@click.option("--timeout", default="5m", show_default=True, type=DURATION,
              help="Request timeout, in whole seconds (Knative: up to 10m by default; Cloud "
                   "Run: 1h; Lambda: 15m).")
@click.option("--role", envvar="MODELFN_ROLE", help="The Lambda execution role ARN.")
@click.option("--auth", type=click.Choice(["iam", "none"]), default="iam", show_default=True,
              help="Lambda function URL auth.")
@click.option("--warm", type=click.IntRange(0), default=None,
              help="Lambda: environments kept initialised on the live alias (provisioned "
                   "concurrency); 0 removes it.")
@click.option("--wait", "wait_s", default="10m", show_default=True, type=DURATION_OR_ZERO,
              help="How long to wait for Ready.")
@click.option("--dry-run", is_flag=True, help="Print the objects or API calls; change nothing.")
def deploy(ref: str, where: Where, image: str | None, registry: str | None,
           builder: str | None, bake: bool, protocol: str, busy_poll_us: int, traffic: int,
           min_scale: int, max_scale: int, concurrency: int | None, cpu: str | None,
           memory: str | None,
           gpu: int, timeout: float, role: str | None, auth: str, warm: int | None, wait_s: float,
           dry_run: bool) -> None:
    """Deploy a model version from the store as a scale-to-zero function; print its URL."""
    with exit_on_error():
        from modelfn.deploy.deployment import Resources, Scaling, check_image
        from modelfn.deploy.plan import Options, plan

        target = where.target
        if image is not None:  # before a build, a store read or a platform call
            check_image(image)
        if not where.is_lambda:  # rendered objects are checked against Knative's CRD schema
            require(f"deploy --target {target}", "knative", "jsonschema",
                    *(() if dry_run or target == "cloudrun" else ("kubernetes",)))
        if protocol == "grpc" and where.is_lambda:
            raise InvalidInput(
                "--protocol grpc needs HTTP/2 end to end and Lambda function URLs carry "
                "HTTP/1.1 requests only; deploy gRPC functions to Knative, Cloud Run or the "
                "local platform's Knative")
        if busy_poll_us and where.is_lambda:
            raise InvalidInput(
                "--busy-poll-us keeps an HTTP server's loop polling between requests; a Lambda "
                "function takes its invocations from the runtime API and is frozen between "
                "them, so it has no such loop")
        if busy_poll_us and protocol == "grpc":
            raise InvalidInput(f"--busy-poll-us polls the REST server's loop; "
                               f"{GRPC_DOES_NOT_POLL}")
        if busy_poll_us and cpu is not None:
            note(f"note: --cpu {cpu} is enforced as a CPU quota unless the node gives the "
                 f"pod whole cores; polling {busy_poll_us} µs after each request spends that "
                 "quota, and an instance throttled by it answers later, not sooner")
        model_store = where.model_store()
        if image is not None and registry is not None:
            raise InvalidInput("give --image (an image already pushed) or --registry (build "
                               "and push one), not both")
        if registry is not None:
            from modelfn.deploy.plan import resolve

            name, number = resolve(model_store, ref)
            ref = f"{name}:{number}"
            if dry_run:  # what the build would push; the deploy uses its digest
                image = f"{registry}/modelfn/{name}:{number}-{_kind(where)}"
                note(f"--dry-run: {image} would be built and pushed, and deployed by digest")
            else:
                image = _build(where, name, number, registry, builder, bake, gpu > 0)
        elif image is None:
            if target != "local":
                raise InvalidInput(f"--target {target} needs --image or --registry (modelfn "
                                   "build prints an image by digest)")
            from modelfn.deploy.knative import service_name

            image = f"modelfn.local/{service_name(ref.split(':')[0])}:process"
        source = where.route_source()
        current = source.read(ref.split(":", 1)[0])
        where.check_free(current)
        options = Options(image=image, bake=bake, traffic=traffic,
                          scaling=Scaling(min_scale, max_scale, concurrency, math.ceil(timeout)),
                          resources=Resources(cpu, None if where.is_lambda else memory, gpu),
                          namespace=where.namespace, protocol=protocol,
                          busy_poll_us=busy_poll_us, store_endpoint=_store_endpoint(where))
        deployment = plan(model_store, ref, options, current)
        if where.is_lambda:  # what Lambda would refuse, refused before any call
            from modelfn.deploy.aws_lambda import check_function_name, check_split

            check_function_name(deployment.model)
            check_split(deployment.model, deployment.traffic)
            url = _deploy_lambda(deployment, current, source, where, role, memory, auth, warm,
                                 dry_run)
        elif target == "cloudrun":
            cloudrun.check_store_reachable(deployment.function.store, _store_endpoint(where))
            url = _render_cloudrun(deployment, where.region, _given_namespace(where))
        else:
            url = _deploy_knative(deployment, current, source, where, dry_run, wait_s)
        if url:
            click.echo(url)


def _store_endpoint(where: Where) -> str | None:
    """The endpoint the model store was read at (None: AWS itself)."""
    from modelfn.model_store.s3 import endpoint_from_env

    return where.endpoint_url or endpoint_from_env()


def _given_namespace(where: Where) -> str | None:
    """``--namespace`` (or ``MODELFN_NAMESPACE``) when given, None when it is the default."""
    from click.core import ParameterSource

    source = click.get_current_context().get_parameter_source("namespace")
    return None if source in (None, ParameterSource.DEFAULT) else where.namespace


def _kind(where: Where) -> Literal["http", "lambda"]:
    return "lambda" if where.is_lambda else "http"


def _build(where: Where, model: str, version: int, registry: str, builder: str | None,
           bake: bool, gpu: bool) -> str:
    """Build the function image for this target, push it, and return it by digest."""
    from modelfn.deploy.build import build_image
    from modelfn.deploy.registry import ECR, Registry, ecr_registry

    found = (ecr_registry(where.boto3_client("ecr"), model) if registry == ECR
             else Registry(registry))
    kind = _kind(where)
    note(f"building {model}:{version} for {kind} and pushing it to {found.host}")
    result = build_image(model, version, store_uri=where.store, target=kind, gpu=gpu,
                         bake=bake, push=found.host, builder=builder,
                         progress=lambda line: note(f"  {line}"), auth_file=found.auth_file)
    note(f"pushed {result.reference}")
    return result.reference


def _deploy_knative(deployment: Deployment, current: ModelRoutes | None, source: RouteSource,
                    where: Where, dry_run: bool, timeout_s: float) -> str:
    from modelfn.deploy.knative import render, validate
    from modelfn.deploy.plan import routes_after

    service = render(deployment, revisions=_revisions(deployment, where, dry_run))
    validate(service)
    if dry_run:
        click.echo(_yaml(service), nl=False)
        return ""
    note(f"deploying {deployment.model}:{deployment.version} with {describe(where.recorded)} "
         f"(service {deployment.namespace}/{service['metadata']['name']}), split "
         f"{dict(deployment.traffic)}")
    knative = where.knative()
    cluster = str(knative.api.api_client.configuration.host)
    if not cloudrun.is_loopback(cluster):  # a real cluster fetches the store itself
        cloudrun.check_store_reachable(deployment.function.store, _store_endpoint(where),
                                       f"the cluster at {cluster}")
    result = knative.apply(service, timeout_s=timeout_s, progress=lambda text: note(f"  {text}"))
    table = routes_after(deployment, current, target=where.recorded, url=result.url,
                         pinned=pinned_urls(result.tag_urls))
    source.write(table)
    if not result.changed and current == table:
        note("unchanged: the same version, image and split were already deployed")
    for version, url in sorted(table.versions.items()):
        note(f"  v{version}: {url.url}")
    return result.url


def _revisions(deployment: Deployment, where: Where, dry_run: bool) -> dict[int, str]:
    """The revision each other version of the split has now, read from the Service (by its
    tag). A dry run that cannot read the cluster says so and names them as before template
    hashes (``<service>-v<version>``)."""
    others = set(deployment.traffic) - {deployment.version}
    if not others:
        return {}
    if not dry_run:
        return where.knative().revisions(deployment.namespace, deployment.model)
    try:
        return where.knative().revisions(deployment.namespace, deployment.model)
    except Exception as exc:  # no kubeconfig, no cluster: a dry run prints what it can
        note(f"--dry-run: could not read the service of {deployment.model} in "
             f"{deployment.namespace} "
             f"({type(exc).__name__}: {exc}); the revisions of versions "
             f"{', '.join(map(str, sorted(others)))} are shown as <service>-v<version>")
        return {}


def pinned_urls(tag_urls: dict[str, str]) -> dict[int, str]:
    """Model version -> its pinned URL, from a Service's ``v<version>`` traffic tags."""
    return {int(tag[1:]): url for tag, url in tag_urls.items()
            if tag.startswith("v") and tag[1:].isdigit()}


def _deploy_lambda(deployment: Deployment, current: ModelRoutes | None, source: RouteSource,
                   where: Where, role: str | None, memory: str | None, auth: str,
                   warm: int | None, dry_run: bool) -> str:
    from modelfn.deploy.aws_lambda import DEFAULT_MEMORY_MB, LambdaOptions
    from modelfn.deploy.plan import routes_after
    from modelfn.platforms.kubernetes import memory_bytes

    memory_mb = DEFAULT_MEMORY_MB if memory is None else memory_bytes(memory) // 2**20
    if role is None:
        if where.target != "local":
            raise InvalidInput("--target lambda needs --role (the execution role's ARN)")
        role = "arn:aws:iam::000000000000:role/modelfn-local" if dry_run else _local_role(where)
    # the function's environment names the store's endpoint (plan's store_endpoint)
    options = LambdaOptions(role=role, memory_mb=memory_mb, auth=auth, warm=warm)
    target = where.aws_lambda()
    if dry_run:
        click.echo(json.dumps(target.calls(deployment, options), indent=2, default=str))
        return ""
    note(f"deploying {deployment.model}:{deployment.version} with {describe(where.recorded)} "
         "(Lambda), split "
         f"{dict(deployment.traffic)}")
    result = target.apply(deployment, options)
    pinned = {deployment.version: result.urls[f"v{deployment.version}"]}
    table = routes_after(deployment, current, target=where.recorded, url=result.live_url,
                         pinned=pinned, auth="iam" if auth == "iam" else "none",
                         region=where.region, concurrency=1)
    source.write(table)
    if not result.changed:
        note("unchanged: the same version, image and split were already deployed")
    for version, route in sorted(table.versions.items()):
        note(f"  v{version}: {route.url}")
    return result.live_url


def _render_cloudrun(deployment: Deployment, region: str | None, project: str | None) -> str:
    from modelfn.deploy.knative import render_cloudrun, validate
    from modelfn.platforms import cloudrun

    if region is None:
        raise InvalidInput("--target cloudrun needs --region")
    if set(deployment.traffic) - {deployment.version}:
        note("note: modelfn does not read Cloud Run, so the other versions' revisions are "
             "named <service>-v<version>; set their revisionName from `gcloud run revisions "
             "list` if they were deployed with other names")
    service = render_cloudrun(deployment, region, project=project)
    validate(service, cloudrun.DEFAULTS)
    click.echo(_yaml(service), nl=False)
    note("apply it with: gcloud run services replace FILE.yaml --region " + region)
    return ""
