"""The HTTP entrypoint for Knative, Cloud Run and any container platform.

One uvicorn process (uvloop, httptools) per function instance on ``$PORT``:
batching needs every concurrent request in one process, and scale-out is the
platform's job. On SIGTERM uvicorn stops accepting, lets in-flight requests
finish, then exits, so a scale-down drops nothing.

``python -m modelfn.handlers.http`` is the container command: it loads the
repository ``FunctionEnvironment`` names, then serves it on ``$MODELFN_HOST``
(default 0.0.0.0) and ``$PORT`` (default 8080). A model that fails to load
stops the process with exit status 1 before it listens, so the platform
never routes to a half-working instance.
"""

from __future__ import annotations

import importlib.util
import logging
import signal
import sys
from typing import TYPE_CHECKING

from modelfn.handlers.environment import FunctionEnvironment
from modelfn.runtime.app import DEFAULT_MAX_BODY_BYTES, create_app
from modelfn.runtime.errors import ModelfnError
from modelfn.runtime.repository import open_repository

if TYPE_CHECKING:
    from modelfn.runtime.repository import Repository

log = logging.getLogger("modelfn.http")

#: seconds in-flight requests get to finish after SIGTERM (Knative waits 30 s by default)
DRAIN_SECONDS = 25


def bounded_protocol() -> type:
    """uvicorn's httptools protocol with the edge's bounds (``handlers/edge.py``)."""
    from modelfn.handlers.edge import BoundedHttpToolsProtocol

    return BoundedHttpToolsProtocol


def run(repository: Repository, *, host: str = "0.0.0.0", port: int = 8080,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, log_level: str = "info") -> None:
    import uvicorn

    app = create_app(repository, max_body_bytes=max_body_bytes)
    # uvicorn drains, then re-raises the signal it caught; this handler receives it
    # so a drained shutdown exits 0 instead of dying by SIGTERM
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: log.info("drained after %s",
                                                          signal.Signals(signum).name))
    uvloop = importlib.util.find_spec("uvloop") is not None
    httptools = importlib.util.find_spec("httptools") is not None
    uvicorn.run(
        app,
        host=host,
        port=port,
        loop="uvloop" if uvloop else "asyncio",
        http=bounded_protocol() if httptools else "h11",
        log_level=log_level,
        access_log=False,
        timeout_graceful_shutdown=DRAIN_SECONDS,
        server_header=False,
        ws="none",  # V2 has no websocket route; skipping the implementation saves ~10 ms of import
    )


def main(env: dict[str, str] | None = None) -> None:
    """Serve the repository the environment names until SIGTERM; exit 1 if it cannot load."""
    try:
        function = FunctionEnvironment.read(env)
    except ModelfnError as exc:
        sys.exit(f"modelfn: {exc.message}")
    logging.basicConfig(
        level=function.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    try:
        repository = open_repository(
            function.repository, function.models or None, store=function.store
        )
    except ModelfnError as exc:
        log.error("cannot serve %s: %s", function.store or function.repository, exc.message)
        sys.exit(1)
    run(
        repository,
        host=function.host,
        port=function.port,
        max_body_bytes=function.max_body_bytes or DEFAULT_MAX_BODY_BYTES,
        log_level=function.log_level,
    )


if __name__ == "__main__":
    main()
