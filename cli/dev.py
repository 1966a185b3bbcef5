"""``modelfn dev``: the local platform (S3, Lambda and Knative APIs, functions that scale to
zero, the gateway) on this machine, until Ctrl-C; ``modelfn dev status`` shows what runs."""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from modelfn.cli.errors import MissingExtra, exit_on_error
from modelfn.cli.params import DURATION, DURATION_OR_ZERO

if TYPE_CHECKING:
    from collections.abc import Sequence

    from modelfn.localstack.state import StateDir

#: how often ``dev status --wait`` looks for a starting platform, in seconds
POLL_S = 0.2


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
            click.echo(f"  functions' logs             {platform.log_dir}/ (follow them: "
                       f"tail -F {platform.log_dir}/*.log)")
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
@click.option("--wait", "wait_s", default="0", show_default=True, type=DURATION_OR_ZERO,
              envvar="MODELFN_DEV_WAIT",
              help="Wait this long for a platform that is starting (`modelfn dev &` then "
                   "`modelfn dev status --wait 60s`, then source DIR/env); 0: do not wait.")
def status(state_dir: Path | None, output: str, wait_s: float) -> None:
    """Revisions and functions of the running local platform: instances, in-flight
    requests, cold starts. Exits 5 when no platform answers (after --wait)."""
    with exit_on_error():
        from modelfn.localstack.state import StateDir, default_state_dir

        info = _read_status(StateDir(state_dir or default_state_dir()), wait_s)
        if output == "json":
            click.echo(json.dumps(info, indent=2))
            return
        width = max(map(len, info["endpoints"]), default=0)
        for name, url in info["endpoints"].items():
            click.echo(f"{name:<{width}}  {url}")
        click.echo("\nKnative revisions")
        click.echo(_columns(
            ("revision", "state", "instances", "in flight", "cold starts", "requests"),
            [(f"{rev['namespace']}/{rev['name']}", rev["state"], rev["instances"],
              rev["in_flight"], rev["cold_starts"], rev["requests"])
             for rev in info["knative"].get("revisions", [])], left=2))
        click.echo("\nLambda functions")
        click.echo(_columns(
            ("function:version", "environments", "busy", "cold starts", "invocations"),
            [(f"{function}:{version}", counts["environments"], counts["busy"],
              counts["cold_starts"], counts["invocations"])
             for function, versions in info["lambda"].get("functions", {}).items()
             for version, counts in versions.items()]))


def _read_status(state: StateDir, wait_s: float) -> dict[str, Any]:
    """The platform's status document, once its ``ready`` file is written and its status
    endpoint answers, trying for up to ``wait_s`` seconds; ``PlatformNotRunning`` then."""
    from modelfn.localstack.state import PlatformNotRunning

    deadline = time.monotonic() + wait_s
    while True:
        ready = state.read_ready()
        if ready is not None:
            try:
                with urllib.request.urlopen(str(ready["status_url"]), timeout=10) as answer:
                    info: dict[str, Any] = json.loads(answer.read())
                return info
            except OSError:  # refused (stopping, or a stale ready file): not running
                pass
        if time.monotonic() >= deadline:
            raise PlatformNotRunning(state.path)
        time.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))


def _columns(header: Sequence[str], rows: Sequence[Sequence[object]], left: int = 1) -> str:
    """``header`` and ``rows`` indented by two spaces, each column as wide as its widest
    cell: the first ``left`` ones left-aligned (names), the others right-aligned (counts)."""
    cells = [list(header), *([str(cell) for cell in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join(
        "  " + " ".join(cell.ljust(width) if i < left else cell.rjust(width)
                        for i, (cell, width) in enumerate(zip(row, widths, strict=True)))
        for row in cells)
