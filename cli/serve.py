"""``modelfn serve``: serve a model repository over KServe V2 REST with uvicorn."""

from __future__ import annotations

import logging
from pathlib import Path

import click

from modelfn.cli.errors import exit_on_error


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )


@click.command()
@click.argument("repository", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option("--store", envvar="MODELFN_STORE",
              help="Fetch the models from this model store (s3://bucket/prefix, file:// or a "
                   "path) instead of serving a local REPOSITORY.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8000, show_default=True, type=int, envvar=["PORT", "MODELFN_PORT"],
              help="Port to listen on ($PORT, as Knative and Cloud Run set it).")
@click.option("--model", "models", multiple=True, envvar="MODELFN_MODELS",
              help="Serve only NAME or NAME:VERSION (repeatable); default: every model.")
@click.option("--max-body-bytes", default=64 * 1024 * 1024, show_default=True, type=int,
              help="Largest request body accepted; larger ones get 413.")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]))
def serve(repository: Path | None, store: str | None, host: str, port: int,
          models: tuple[str, ...], max_body_bytes: int, log_level: str) -> None:
    """Serve the models of a Triton-style REPOSITORY (or of a model store) over KServe V2 REST.

    With --store, each --model NAME[:VERSION] is fetched (verified, cached by digest: a
    pinned version already in the cache costs no request) before it is loaded.
    """
    _setup_logging(log_level)
    with exit_on_error():
        from modelfn.handlers.http import run
        from modelfn.runtime.repository import open_repository

        refs = [ref for value in models for ref in value.split(",") if ref.strip()]
        repo = open_repository(repository, refs, store=store)
        run(repo, host=host, port=port, max_body_bytes=max_body_bytes, log_level=log_level)

