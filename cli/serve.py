"""``modelfn serve``: serve a model repository over KServe V2 REST with uvicorn, and over
KServe V2 gRPC too with ``--grpc-port``."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import click
from click.core import ParameterSource

from modelfn.cli.errors import exit_on_error, require
from modelfn.cli.params import endpoint_url_option, require_store
from modelfn.net.busy_poll import MAX_WINDOW_US

DEFAULT_MESSAGE_BYTES = 64 * 1024 * 1024


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )


@click.command()
@click.argument("repository", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option("--store", envvar="MODELFN_STORE",
              help="Fetch the models from this model store (s3://bucket/prefix, file:// or a "
                   "path) instead of serving a local REPOSITORY.")
@endpoint_url_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(1, 65535),
              envvar=["PORT", "MODELFN_PORT"],
              help="Port to listen on ($PORT, as Knative and Cloud Run set it).")
@click.option("--model", "models", multiple=True, envvar="MODELFN_MODELS",
              help="Serve only NAME or NAME:VERSION (repeatable); default: every model.")
@click.option("--max-body-bytes", default=64 * 1024 * 1024, show_default=True, type=int,
              help="Largest request body accepted; larger ones get 413.")
@click.option("--grpc-port", type=click.IntRange(1, 65535), envvar="MODELFN_GRPC_PORT",
              help="Also serve KServe V2 over gRPC on this port, from the same process and "
                   "batchers (needs the grpc extra).")
@click.option("--grpc-max-receive-bytes", type=click.IntRange(1, 2**31 - 1),
              envvar="MODELFN_GRPC_MAX_RECEIVE_BYTES",
              help="Largest gRPC request message; larger ones get RESOURCE_EXHAUSTED "
                   "[default: --max-body-bytes].")
@click.option("--grpc-max-send-bytes", default=DEFAULT_MESSAGE_BYTES, show_default=True,
              type=click.IntRange(1, 2**31 - 1), envvar="MODELFN_GRPC_MAX_SEND_BYTES",
              help="Largest gRPC response message; larger answers get RESOURCE_EXHAUSTED.")
@click.option("--busy-poll-us", default=0, show_default=True,
              type=click.IntRange(0, MAX_WINDOW_US), envvar="MODELFN_BUSY_POLL_US",
              help="Keep the REST server's loop polling this many microseconds after each "
                   "request instead of sleeping: lower latency for requests that follow "
                   "closely, paid in CPU while it polls (0: off).")
@click.option("--exit-on-error/--no-exit-on-error", "all_or_nothing", default=False,
              show_default=True,
              envvar="MODELFN_EXIT_ON_ERROR",
              help="Fail the start when any model fails to load or warm up (Triton's "
                   "--exit-on-error: all or nothing). By default such a model is UNAVAILABLE "
                   "with its reason (in the log, /v2/models/M/ready and the repository "
                   "index) and the others serve: one broken model of a function should not "
                   "take the working ones down. A start where no model loads fails either "
                   "way.")
@click.option("--server-name", envvar="MODELFN_SERVER_NAME", default="modelfn",
              show_default=True,
              help="The server's name in GET /v2 and gRPC ServerMetadata (for clients that "
                   "insist on one: Triton's health and metadata examples want 'triton').")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]),
              help="The least severe log lines written to stderr.")
def serve(repository: Path | None, store: str | None, endpoint_url: str | None, host: str,
          port: int, models: tuple[str, ...], max_body_bytes: int, grpc_port: int | None,
          grpc_max_receive_bytes: int | None, grpc_max_send_bytes: int, busy_poll_us: int,
          all_or_nothing: bool, server_name: str, log_level: str) -> None:
    """Serve the models of a Triton-style REPOSITORY (or of a model store) over KServe V2 REST,
    and over KServe V2 gRPC too with --grpc-port.

    With --store, each --model NAME[:VERSION] is fetched (verified, cached by digest: a
    pinned version already in the cache costs no request) before it is loaded. A REPOSITORY
    given here is served even when $MODELFN_STORE is set.
    """
    if grpc_port is not None and grpc_port == port:
        raise click.BadParameter(f"REST already listens on {port}", param_hint="--grpc-port")
    if repository is not None and store is not None:
        source = click.get_current_context().get_parameter_source("store")
        if source is not ParameterSource.ENVIRONMENT:
            raise click.UsageError("give a REPOSITORY or --store, not both: a REPOSITORY is "
                                   "served as it is, --store fetches the --model versions")
        store = None  # a REPOSITORY named here wins over $MODELFN_STORE (modelfn dev's env)
    _setup_logging(log_level)
    os.environ["MODELFN_SERVER_NAME"] = server_name  # what the metadata answers read
    with exit_on_error():
        if repository is None:
            store = require_store(store, "a REPOSITORY to serve")
            if endpoint_url:  # what the store's client reads (model_store.s3), as in a function
                os.environ["MODELFN_S3_ENDPOINT"] = endpoint_url
        if grpc_port is not None:
            require("modelfn serve --grpc-port", "grpc", "grpc", "google.protobuf")
        from modelfn.handlers.startup import paused_collector
        from modelfn.process.supervisor import check_port

        check_port(host, port)  # before the models load: a busy port fails in a moment
        if grpc_port is not None:
            check_port(host, grpc_port)

        with paused_collector():
            from modelfn.handlers.boot import open_function_repository
            from modelfn.handlers.http import run

            refs = [ref for value in models for ref in value.split(",") if ref.strip()]
            repo = open_function_repository(repository, refs, store=store,
                                            strict=all_or_nothing)
        limits = (grpc_max_receive_bytes or min(max_body_bytes, 2**31 - 1), grpc_max_send_bytes)
        run(repo, host=host, port=port, max_body_bytes=max_body_bytes, log_level=log_level,
            grpc_port=grpc_port, grpc_limits=limits, busy_poll_us=busy_poll_us)

