"""``modelfn dev``: the local platform (S3, Lambda and Knative APIs, functions that scale to
zero, the gateway) on this machine, until Ctrl-C; ``modelfn dev status`` shows what runs."""

from __future__ import annotations

import json
import logging
import signal
import threading
import urllib.request
from pathlib import Path
from typing import Any

import click

from modelfn.cli.errors import MissingExtra, exit_on_error
from modelfn.cli.params import DURATION, DURATION_OR_ZERO


@click.group(invoke_without_command=True)
@click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path),
              envvar="MODELFN_DEV_DIR",
              help="Where the kubeconfig, env and ready files go (default ~/.modelfn/dev).")
@click.option("--idle", "idle_s", default=None, type=DURATION, envvar="MODELFN_DEV_IDLE",
              help="Scale an idle revision to zero (and reap idle Lambda environments) after "
                   "this long, e.g. 5s (default: Knative's and Lambda's own windows).")
@click.option("--containers", is_flag=True,
              help="Run functions as their images with podman instead of as processes.")
@click.option("--no-gateway", is_flag=True, help="Do not start the gateway.")
@click.option("--drain", "drain_s", default="30s", show_default=True, type=DURATION_OR_ZERO,
              envvar="MODELFN_DEV_DRAIN",
              help="On Ctrl-C, wait this long for requests in flight before stopping the "
                   "functions (a second Ctrl-C stops at once; requests left get a 503).")
@click.pass_context
def dev(ctx: click.Context, state_dir: Path | None, idle_s: float | None, containers: bool,
        no_gateway: bool, drain_s: float) -> None:
    """Run the local platform until Ctrl-C: S3, the Lambda and Knative APIs, functions that
    scale to zero, and the gateway, all on 127.0.0.1.

    Then `set -a; . DIR/env` points kubectl, boto3 and modelfn deploy at it.
    """
    if ctx.invoked_subcommand is not None:
        return
    logging.basicConfig(level="INFO", format="%(asctime)s %(levelname)s %(name)s %(message)s")
    with exit_on_error():
        from modelfn.localstack.platform import LocalPlatform, missing_extras

        missing = missing_extras()
        if missing:
            raise MissingExtra("modelfn dev", missing, "local")
        stop = threading.Event()
        platform = LocalPlatform(state_dir, idle_s=idle_s,
                                 containers=containers, gateway=not no_gateway,
                                 drain_s=drain_s)

        def stopping(*_: object) -> None:
            if not stop.is_set():
                stop.set()
                return
            click.echo("stopping now: requests still in flight get a 503", err=True)
            platform.hurry()

        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, stopping)
        with platform:
            env = platform.env()
            click.echo("modelfn dev is up:")
            click.echo(f"  AWS (S3, Lambda, IAM, ECR)  {env['AWS_ENDPOINT_URL']}")
            assert platform.knative is not None
            click.echo(f"  Knative API                 {platform.knative.url}")
            if platform.gateway_url:
                click.echo(f"  gateway                     {platform.gateway_url}")
            if platform.gateway_grpc:
                click.echo(f"  gateway (gRPC)              {platform.gateway_grpc}")
            click.echo(f"  model store                 {env['MODELFN_STORE']}")
            click.echo(f"  set -a; . {platform.state.env_file}    # for kubectl, boto3, "
                       "modelfn deploy")
            stop.wait()
            click.echo("stopping: draining functions", err=True)


@dev.command("status")
@click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path),
              envvar="MODELFN_DEV_DIR",
              help="The running platform's state directory (default ~/.modelfn/dev).")
@click.option("--output", type=click.Choice(["table", "json"]), default="table",
              show_default=True, envvar="MODELFN_OUTPUT",
              help="json: the whole status as one JSON object on stdout.")
def status(state_dir: Path | None, output: str) -> None:
    """Revisions and functions of the running local platform: instances, in-flight
    requests, cold starts."""
    with exit_on_error():
        from modelfn.localstack.state import PlatformNotRunning, StateDir, default_state_dir

        state = StateDir(state_dir or default_state_dir())
        ready = state.read_ready()
        if ready is None:
            raise PlatformNotRunning(state.path)
        with urllib.request.urlopen(str(ready["status_url"]), timeout=10) as answer:
            info: dict[str, Any] = json.loads(answer.read())
        if output == "json":
            click.echo(json.dumps(info, indent=2))
            return
        for name, url in info["endpoints"].items():
            click.echo(f"{name:<8} {url}")
        click.echo("\nKnative revisions")
        click.echo(f"  {'revision':<28} {'state':<8} {'instances':>9} {'in flight':>9} "
                   f"{'cold starts':>11} {'requests':>8}")
        for rev in info["knative"].get("revisions", []):
            click.echo(f"  {rev['namespace'] + '/' + rev['name']:<28} {rev['state']:<8} "
                       f"{rev['instances']:>9} {rev['in_flight']:>9} {rev['cold_starts']:>11} "
                       f"{rev['requests']:>8}")
        click.echo("\nLambda functions")
        click.echo(f"  {'function:version':<28} {'environments':>12} {'busy':>5} "
                   f"{'cold starts':>11} {'invocations':>11}")
        for function, versions in info["lambda"].get("functions", {}).items():
            for version, counts in versions.items():
                click.echo(f"  {function + ':' + version:<28} {counts['environments']:>12} "
                           f"{counts['busy']:>5} {counts['cold_starts']:>11} "
                           f"{counts['invocations']:>11}")
