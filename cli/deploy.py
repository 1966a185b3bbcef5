"""``modelfn deploy``: a model version from the store to Knative, Cloud Run or AWS Lambda, or
to the local platform through the same clients.

Data (the deployed URL, ``--dry-run`` objects) goes to stdout; progress and notes go to
stderr. ``deploy`` prints the URL it deployed as its last line, so scripts can take it.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Literal

import click

from modelfn.cli.errors import exit_on_error, require
from modelfn.cli.params import DURATION, DURATION_OR_ZERO
from modelfn.cli.targets import Where, describe, target_options
from modelfn.net.busy_poll import GRPC_DOES_NOT_POLL, MAX_WINDOW_US
from modelfn.platforms import aws_lambda
from modelfn.runtime.errors import InvalidInput

if TYPE_CHECKING:
    from modelfn.deploy.aws_lambda import LambdaOptions


def note(text: str) -> None:
    click.echo(text, err=True)


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
        from modelfn.deploy import workflow
        from modelfn.deploy.deployment import Resources, Scaling, check_image
        from modelfn.deploy.plan import Options

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
        build = None
        if registry is not None:
            build = functools.partial(_build, where, registry=registry, builder=builder,
                                      bake=bake, gpu=gpu > 0, dry_run=dry_run)
        elif image is None:
            if target != "local":
                raise InvalidInput(f"--target {target} needs --image or --registry (modelfn "
                                   "build prints an image by digest)")
            from modelfn.deploy.knative import service_name

            image = f"modelfn.local/{service_name(ref.split(':')[0])}:process"
        source = where.route_source()
        current = source.read(ref.split(":", 1)[0])
        where.check_free(current)
        options = Options(image=image or "", bake=bake, traffic=traffic,
                          scaling=Scaling(min_scale, max_scale, concurrency, math.ceil(timeout)),
                          resources=Resources(cpu, None if where.is_lambda else memory, gpu),
                          namespace=where.namespace, protocol=protocol,
                          busy_poll_us=busy_poll_us, store_endpoint=_store_endpoint(where))
        lambda_options = functools.partial(_lambda_options, where, role, memory, auth, warm,
                                           dry_run)
        platform = where.platform(auth="iam" if auth == "iam" else "none",
                                  lambda_options=lambda_options,
                                  store_endpoint=_store_endpoint(where),
                                  project=_given_namespace(where))
        url = workflow.deploy(model_store, ref, options, platform, source, current,
                              label=describe(where.recorded), build=build, dry_run=dry_run,
                              timeout_s=wait_s, progress=note,
                              output=lambda text: click.echo(text, nl=False))
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


def _build(where: Where, model: str, version: int, *, registry: str, builder: str | None,
           bake: bool, gpu: bool, dry_run: bool) -> str:
    """Build the function image for this target, push it, and return it by digest (a dry
    run: the image it would push)."""
    from modelfn.deploy.build import build_image
    from modelfn.deploy.registry import ECR, Registry, ecr_registry

    kind = _kind(where)
    if dry_run:  # what the build would push; the deploy uses its digest
        image = f"{registry}/modelfn/{model}:{version}-{kind}"
        note(f"--dry-run: {image} would be built and pushed, and deployed by digest")
        return image
    found = (ecr_registry(where.boto3_client("ecr"), model) if registry == ECR
             else Registry(registry))
    note(f"building {model}:{version} for {kind} and pushing it to {found.host}")
    result = build_image(model, version, store_uri=where.store, target=kind, gpu=gpu,
                         bake=bake, push=found.host, builder=builder,
                         progress=lambda line: note(f"  {line}"), auth_file=found.auth_file)
    note(f"pushed {result.reference}")
    return result.reference


def _lambda_options(where: Where, role: str | None, memory: str | None, auth: str,
                    warm: int | None, dry_run: bool) -> LambdaOptions:
    """The Lambda function's options: the execution role (the local one, created on first
    use, for --target local), memory, URL auth and warm environments."""
    from modelfn.deploy.aws_lambda import LOCAL_ROLE_ARN, LambdaOptions, local_role
    from modelfn.platforms.kubernetes import memory_bytes

    memory_mb = aws_lambda.DEFAULT_MEMORY_MB if memory is None else memory_bytes(memory) // 2**20
    if role is None:
        if where.target != "local":
            raise InvalidInput("--target lambda needs --role (the execution role's ARN)")
        role = LOCAL_ROLE_ARN if dry_run else local_role(where.boto3_client("iam"))
    # the function's environment names the store's endpoint (plan's store_endpoint)
    return LambdaOptions(role=role, memory_mb=memory_mb, auth=auth, warm=warm)
