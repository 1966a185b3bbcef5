"""``modelfn gateway``: one V2 endpoint for every deployed model."""

from __future__ import annotations

import logging
from pathlib import Path

import click

from modelfn.cli.errors import exit_on_error, require
from modelfn.cli.params import DURATION


@click.command()
@click.option("--routes", envvar="MODELFN_ROUTES",
              help="The model store whose routing tables to serve (s3://bucket/prefix, file:// "
                   "or a path): what `modelfn deploy` writes.")
@click.option("--routes-dir", type=click.Path(file_okay=False, path_type=Path),
              envvar="MODELFN_ROUTES_DIR", help="A directory of <model>.json routing tables.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(1, 65535),
              envvar=["PORT", "MODELFN_PORT"], help="Port to listen on.")
@click.option("--grpc-port", type=click.IntRange(1, 65535), envvar="MODELFN_GATEWAY_GRPC_PORT",
              help="Serve KServe V2 gRPC on this port too, passed through to functions "
                   "deployed with --protocol grpc (needs the grpc extra).")
@click.option("--api-keys", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              envvar="MODELFN_API_KEYS",
              help="Require an API key from clients: a file of sha256:<hex> digests (or keys).")
@click.option("--allow-origin", "allowed_origins", multiple=True,
              envvar="MODELFN_ALLOW_ORIGINS",
              help="A browser origin (https://app.example.com) whose pages may call the "
                   "gateway (CORS); repeat for more. Without it, a request that carries an "
                   "Origin header is refused with 403.")
@click.option("--protect-metrics", is_flag=True, help="Require the API key on /metrics too.")
@click.option("--cold-budget", "budget_s", default="30s", show_default=True, type=DURATION,
              help="How long to keep retrying a cold function (connect errors, 502/503/504).")
@click.option("--cold-concurrency", default=4, show_default=True, type=int,
              help="Requests per function that may retry at once while it is cold.")
@click.option("--batch-concurrency", "batch_instances", default=8, show_default=True,
              type=click.IntRange(min=1),
              help="Batches in flight at once per model version the gateway batches for "
                   "(functions that run one request at a time, as on Lambda): the most "
                   "concurrent invocations of that version.")
@click.option("--reload", "reload_s", default="1s", show_default=True, type=DURATION,
              help="Time between reads of the routing tables.")
@click.option("--max-body-bytes", default=64 * 2**20, show_default=True,
              type=click.IntRange(1, 2**31 - 1),
              help="Largest request body (413 over it), and largest gRPC message either way: "
                   "raise it with the functions' own limits.")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]),
              help="The least severe log lines written to stderr.")
def gateway(routes: str | None, routes_dir: Path | None, host: str, port: int,
            grpc_port: int | None, api_keys: Path | None, allowed_origins: tuple[str, ...],
            protect_metrics: bool, budget_s: float,
            cold_concurrency: int, batch_instances: int, reload_s: float,
            max_body_bytes: int, log_level: str) -> None:
    """Serve every model in the routing tables at /v2/models/{m}[/versions/{v}]/...

    Pinned versions go to their own function URL; unpinned requests follow the deployed
    traffic split. Cold functions are retried within --cold-budget. For functions that run
    one request at a time (Lambda), the gateway batches infer requests per version itself.
    """
    logging.basicConfig(level=log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    with exit_on_error():
        from modelfn.gateway.server import create_gateway, run

        if routes is None and routes_dir is None:
            raise click.UsageError("give --routes STORE or --routes-dir DIR")
        app = create_gateway(routes=routes, routes_dir=routes_dir, api_keys=api_keys,
                             protect_metrics=protect_metrics, budget_s=budget_s,
                             cold_concurrency=cold_concurrency, reload_s=reload_s,
                             batch_instances=batch_instances, max_body_bytes=max_body_bytes,
                             allowed_origins=allowed_origins)
        if grpc_port is not None:
            require("modelfn gateway --grpc-port", "grpc", "grpc")
        run(app, host, port, log_level, grpc_port=grpc_port)
