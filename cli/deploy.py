"""``modelfn deploy``, ``traffic``, ``rollback``, ``status``, ``undeploy``: models on Knative,
Cloud Run or AWS Lambda, and the local platform through the same clients.

Data (the deployed URL, ``--dry-run`` objects, ``status --output json``) goes to stdout;
progress and notes go to stderr. ``deploy`` prints the URL it deployed as its last line.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from modelfn.cli.errors import exit_on_error
from modelfn.runtime.errors import InvalidInput

if TYPE_CHECKING:
    from modelfn.deploy.deployment import Deployment
    from modelfn.model_store.routes import ModelRoutes, RouteSource

TARGETS = ("knative", "cloudrun", "lambda", "local")
LOCAL_ROLE = "modelfn-local"


def _note(text: str) -> None:
    click.echo(text, err=True)


def _local_env(state_dir: Path | None) -> dict[str, str]:
    """The local platform's endpoints (DIR/env), for ``--target local``."""
    from modelfn.localstack.state import StateDir, default_state_dir

    state = StateDir(state_dir or default_state_dir())
    if state.read_ready() is None:
        raise InvalidInput(f"no local platform is running for {state.path}: start one with "
                           "`modelfn dev`")
    return state.read_env()


def _route_source(routes: str | None, store: str) -> RouteSource:
    from modelfn.model_store import open_store
    from modelfn.model_store.routes import RouteSource

    return RouteSource(store=open_store(routes or store))


def _knative_api(context: str | None, kubeconfig: str | None) -> Any:
    from kubernetes import client, config

    config.load_kube_config(config_file=kubeconfig, context=context)
    return client.CustomObjectsApi()


def _lambda_client(region: str | None, endpoint_url: str | None) -> Any:
    import boto3

    return boto3.client("lambda", region_name=region, endpoint_url=endpoint_url)


def _local_role(endpoint_url: str | None, region: str | None) -> str:
    """The execution role local functions run as (created on first use)."""
    import boto3

    iam = boto3.client("iam", region_name=region, endpoint_url=endpoint_url)
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
@click.option("--target", type=click.Choice(TARGETS), required=True, envvar="MODELFN_TARGET")
@click.option("--lambda", "as_lambda", is_flag=True,
              help="With --target local: the local Lambda, not local Knative.")
@click.option("--image", envvar="MODELFN_IMAGE",
              help="The function image (by digest). --target local runs the installed modelfn "
                   "without one.")
@click.option("--store", envvar="MODELFN_STORE", help="The model store the version is in.")
@click.option("--bake", is_flag=True, help="The image holds the model (modelfn build --bake).")
@click.option("--traffic", default=100, show_default=True, type=click.IntRange(0, 100),
              help="Percent of unpinned requests for this version; the others keep the rest.")
@click.option("--min-scale", default=0, show_default=True, type=int)
@click.option("--max-scale", default=0, show_default=True, type=int, help="0: no limit.")
@click.option("--concurrency", type=int, help="Requests per instance (default: from batching).")
@click.option("--cpu", help="CPU limit, e.g. 2 or 500m.")
@click.option("--memory", help="Memory limit, e.g. 2Gi (Lambda: its memory size).")
@click.option("--gpu", default=0, type=int, help="GPUs per instance (Knative).")
@click.option("--timeout", default=300, show_default=True, type=int, help="Request timeout, s.")
@click.option("--namespace", default="default", show_default=True, envvar="MODELFN_NAMESPACE")
@click.option("--context", envvar="MODELFN_CONTEXT", help="kubeconfig context (Knative).")
@click.option("--region", envvar=["MODELFN_REGION", "AWS_DEFAULT_REGION"],
              help="AWS or Cloud Run region.")
@click.option("--role", envvar="MODELFN_ROLE", help="The Lambda execution role ARN.")
@click.option("--endpoint-url", envvar=["MODELFN_ENDPOINT_URL", "AWS_ENDPOINT_URL"],
              help="The AWS endpoint (a local platform).")
@click.option("--auth", type=click.Choice(["iam", "none"]), default="iam", show_default=True,
              help="Lambda function URL auth.")
@click.option("--routes", envvar="MODELFN_ROUTES",
              help="Where the routing table goes (default: the model store).")
@click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path),
              envvar="MODELFN_DEV_DIR", help="The local platform's state directory.")
@click.option("--dry-run", is_flag=True, help="Print the objects or API calls; change nothing.")
def deploy(ref: str, target: str, as_lambda: bool, image: str | None, store: str | None,
           bake: bool, traffic: int, min_scale: int, max_scale: int, concurrency: int | None,
           cpu: str | None, memory: str | None, gpu: int, timeout: int, namespace: str,
           context: str | None, region: str | None, role: str | None,
           endpoint_url: str | None, auth: str, routes: str | None, state_dir: Path | None,
           dry_run: bool) -> None:
    """Deploy a model version from the store as a scale-to-zero function; print its URL."""
    with exit_on_error():
        from modelfn.deploy.deployment import Resources, Scaling
        from modelfn.deploy.plan import Options, plan

        kubeconfig = None
        if target == "local":
            env = _local_env(state_dir)
            os.environ.update({k: v for k, v in env.items() if k.startswith("AWS_")
                               or k == "MODELFN_S3_ENDPOINT"})
            store = store or env.get("MODELFN_STORE")
            endpoint_url = endpoint_url or env.get("AWS_ENDPOINT_URL")
            region = region or env.get("AWS_DEFAULT_REGION")
            kubeconfig = env.get("KUBECONFIG")
        if store is None:
            raise InvalidInput("give the model store with --store (or MODELFN_STORE)")
        if image is None:
            if target != "local":
                raise InvalidInput(f"--target {target} needs --image (modelfn build prints "
                                   "one by digest)")
            image = f"modelfn.local/{ref.split(':')[0]}:process"
        source = _route_source(routes, store)
        name = ref.split(":", 1)[0]
        current = source.read(name)
        options = Options(image=image, bake=bake, traffic=traffic,
                          scaling=Scaling(min_scale, max_scale, concurrency, timeout),
                          resources=Resources(cpu, None if as_lambda or target == "lambda"
                                              else memory, gpu),
                          namespace=namespace)
        from modelfn.model_store import open_store

        deployment = plan(open_store(store), ref, options, current)
        if target == "lambda" or (target == "local" and as_lambda):
            url = _deploy_lambda(deployment, current, source, target, role, memory, auth,
                                 region, endpoint_url, dry_run)
        elif target == "cloudrun":
            url = _render_cloudrun(deployment, region)
        else:
            url = _deploy_knative(deployment, current, source, target, context, kubeconfig,
                                  dry_run, timeout_s=600)
        if url:
            click.echo(url)


def _deploy_knative(deployment: Deployment, current: ModelRoutes | None, source: RouteSource,
                    target: str, context: str | None, kubeconfig: str | None, dry_run: bool,
                    timeout_s: float) -> str:
    from modelfn.deploy.knative import render
    from modelfn.deploy.knative_target import KnativeTarget
    from modelfn.deploy.plan import routes_after

    service = render(deployment)
    if dry_run:
        click.echo(_yaml(service), nl=False)
        return ""
    _note(f"deploying {deployment.model}:{deployment.version} to {target} "
          f"(namespace {deployment.namespace}), split {dict(deployment.traffic)}")
    result = KnativeTarget(_knative_api(context, kubeconfig)).apply(
        service, timeout_s=timeout_s, progress=lambda note: _note(f"  {note}"))
    pinned = {int(tag[1:]): url for tag, url in result.tag_urls.items()
              if tag.startswith("v") and tag[1:].isdigit()}
    table = routes_after(deployment, current, target=target, url=result.url, pinned=pinned)
    source.write(table)
    if not result.changed and current == table:
        _note("unchanged: the same version, image and split were already deployed")
    for version, url in sorted(pinned.items()):
        _note(f"  v{version}: {url}")
    return result.url


def _deploy_lambda(deployment: Deployment, current: ModelRoutes | None, source: RouteSource,
                   target: str, role: str | None, memory: str | None, auth: str,
                   region: str | None, endpoint_url: str | None, dry_run: bool) -> str:
    from modelfn.deploy.aws_lambda import DEFAULT_MEMORY_MB, LambdaOptions, LambdaTarget
    from modelfn.deploy.deployment import memory_bytes
    from modelfn.deploy.plan import routes_after

    memory_mb = DEFAULT_MEMORY_MB if memory is None else memory_bytes(memory) // 2**20
    if role is None:
        if target != "local":
            raise InvalidInput("--target lambda needs --role (the execution role's ARN)")
        role = _local_role(endpoint_url, region)
    # an emulated AWS (the local platform): its functions reach the store at the same endpoint
    extra = {"MODELFN_S3_ENDPOINT": endpoint_url} if endpoint_url else {}
    options = LambdaOptions(role=role, memory_mb=memory_mb, auth=auth, env=extra)
    if dry_run:
        click.echo(json.dumps({"function": deployment.model, "image": deployment.image,
                               "version": deployment.version, "split": deployment.traffic,
                               "memory_mb": options.memory_mb, "auth": options.auth},
                              indent=2, default=str))
        return ""
    _note(f"deploying {deployment.model}:{deployment.version} to {target} Lambda, split "
          f"{dict(deployment.traffic)}")
    result = LambdaTarget(_lambda_client(region, endpoint_url)).apply(deployment, options)
    pinned = {deployment.version: result.urls[f"v{deployment.version}"]}
    table = routes_after(deployment, current, target="lambda", url=result.live_url,
                         pinned=pinned, auth="iam" if auth == "iam" else "none",
                         region=region, concurrency=1)
    source.write(table)
    if not result.changed:
        _note("unchanged: the same version, image and split were already deployed")
    _note(f"  v{deployment.version}: {pinned[deployment.version]}")
    return result.live_url


def _render_cloudrun(deployment: Deployment, region: str | None) -> str:
    from modelfn.deploy.knative import render_cloudrun

    if region is None:
        raise InvalidInput("--target cloudrun needs --region")
    click.echo(_yaml(render_cloudrun(deployment, region)), nl=False)
    _note("apply it with: gcloud run services replace FILE.yaml --region " + region)
    return ""


@click.command()
@click.argument("model")
@click.option("--store", envvar="MODELFN_STORE", required=True)
@click.option("--routes", envvar="MODELFN_ROUTES")
@click.option("--output", type=click.Choice(["table", "json"]), default="table")
def status(model: str, store: str, routes: str | None, output: str) -> None:
    """Versions, URLs and the traffic split of a deployed model (from its routing table)."""
    with exit_on_error():
        table = _route_source(routes, store).read(model)
        if table is None:
            raise InvalidInput(f"'{model}' is not deployed (no routing table in "
                               f"{routes or store})")
        doc = json.loads(table.to_json())
        if output == "json":
            click.echo(json.dumps(doc, indent=2))
            return
        click.echo(f"{model} on {table.target}: {table.url or '(the gateway splits)'}")
        for version, route in sorted(table.versions.items()):
            click.echo(f"  v{version:<4} {table.split.get(version, 0):>3}%  {route.url}  "
                       f"auth={route.auth}  max_batch_size={route.max_batch_size}  "
                       f"concurrency={route.concurrency}")
        if table.history:
            click.echo(f"  previous split: {dict(table.history[-1])}")
