"""The HTTP entrypoint for Knative, Cloud Run and any container platform.

One uvicorn process (uvloop, httptools) per function instance on ``$PORT``:
batching needs every concurrent request in one process, and scale-out is the
platform's job. On SIGTERM uvicorn stops accepting, lets in-flight requests
finish, then exits, so a scale-down drops nothing.

``python -m modelfn.handlers.http`` is the container command: it loads the
repository ``FunctionEnvironment`` names, then serves it on ``$MODELFN_HOST``
(default 0.0.0.0) and ``$PORT`` (default 8080), over KServe V2 REST or, with
``MODELFN_PROTOCOL=grpc``, over KServe V2 gRPC instead. A model that fails to load is
UNAVAILABLE with its reason (``/v2/models/M/ready``, the repository index, the log) while
the others serve; with ``MODELFN_EXIT_ON_ERROR=true`` it stops the process with exit
status 1 before it listens, as does a start where no model loads at all, so the platform
never routes to an instance that serves nothing.

``modelfn serve --grpc-port`` serves both from one process: the gRPC server runs on
uvicorn's event loop, so both protocols feed the same batchers. grpcio is imported
only then.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import signal
import sys
from functools import partial
from typing import TYPE_CHECKING, Any

from modelfn.handlers.boot import open_function_repository
from modelfn.handlers.environment import FunctionEnvironment
from modelfn.handlers.startup import paused_collector
from modelfn.platforms.knative import DRAIN_SECONDS
from modelfn.protocol.rest import DEFAULT_MAX_BODY_BYTES, create_app
from modelfn.protocol.rest_edge import RestFastPath
from modelfn.runtime.errors import ModelfnError

if TYPE_CHECKING:
    import grpc

    from modelfn.net.fast_path import FastPath
    from modelfn.runtime.repository import Repository

log = logging.getLogger("modelfn.http")

def bounded_protocol(busy_poll_us: int = 0, fast_path: FastPath[Any] | None = None) -> type:
    """uvicorn's httptools protocol with the edge's bounds (``net/edge.py``), answering
    ``fast_path``'s requests past ASGI when given (``net/fast_path.py``), busy polling for
    ``busy_poll_us`` after each request when not 0 (``net/busy_poll.py``)."""
    from modelfn.net.edge import edge_protocol

    return edge_protocol(busy_poll_us, fast_path)


#: gRPC message limits: what a request may be (received) and an answer (sent)
GrpcLimits = tuple[int, int]


def _on_signal(server: Any, signum: int, frame: Any) -> None:
    """The handler uvicorn finds in place, and restores, around its own.

    uvicorn drains, then re-raises the signal it caught: received here, it ends the
    process with 0 instead of death by SIGTERM. A signal that comes before uvicorn has
    taken the signals over (between the ready line and its listening) has nothing in
    flight to drain: it tells the server to stop as soon as it has started, where
    swallowing it kept the process serving until the platform's SIGKILL.
    """
    name = signal.Signals(signum).name
    if server.should_exit:
        log.info("drained after %s", name)
    else:
        log.info("%s before the server listened: stopping", name)
        server.should_exit = True


def _uvloop() -> bool:
    return importlib.util.find_spec("uvloop") is not None


def run(repository: Repository, *, host: str = "0.0.0.0", port: int = 8080,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, log_level: str = "info",
        grpc_port: int | None = None, grpc_limits: GrpcLimits | None = None,
        busy_poll_us: int = 0) -> None:
    """Serve REST on ``port`` until SIGTERM, and gRPC on ``grpc_port`` too when given;
    with ``busy_poll_us``, the loop polls that long after each REST request before it
    sleeps."""
    import uvicorn

    app = create_app(repository, max_body_bytes=max_body_bytes,
                     stop_on_shutdown=grpc_port is None)
    httptools = importlib.util.find_spec("httptools") is not None
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        loop="uvloop" if _uvloop() else "asyncio",
        # the V2 infer route registers its fast path with the edge
        http=bounded_protocol(busy_poll_us, RestFastPath(app)) if httptools else "h11",
        log_level=log_level,
        access_log=False,
        timeout_graceful_shutdown=DRAIN_SECONDS,
        server_header=False,
        # the app never reads the client's address or scheme: rewriting them from
        # X-Forwarded-* on every request (uvicorn's default) costs the infer path for nothing
        proxy_headers=False,
        ws="none",  # V2 has no websocket route; skipping the implementation saves its import
    )
    if grpc_port is None:
        server = uvicorn.Server(config)
    else:
        server = _with_grpc(config, repository, host, grpc_port,
                            grpc_limits or (max_body_bytes, DEFAULT_MAX_BODY_BYTES))
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, partial(_on_signal, server))
    server.run()
    if not server.started:
        sys.exit(3)  # uvicorn's startup failure status


def _with_grpc(config: Any, repository: Repository, host: str, port: int,
               limits: GrpcLimits) -> Any:
    """A uvicorn server that also serves gRPC on ``port``, from uvicorn's event loop."""
    from modelfn.protocol.grpc.server import beside_uvicorn, create_server

    def create() -> grpc.aio.Server:
        return create_server(repository, max_receive_bytes=limits[0], max_send_bytes=limits[1])

    return beside_uvicorn(config, create, host, port, drain_s=DRAIN_SECONDS,
                          stopped=repository.stop)


def run_grpc(repository: Repository, *, host: str = "0.0.0.0", port: int = 8080,
             limits: GrpcLimits = (DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_BODY_BYTES)) -> None:
    """Serve gRPC alone on ``port`` until SIGTERM, then drain as the REST server does."""
    from modelfn.protocol.grpc.server import create_server, listen, stop_draining

    async def serve() -> None:
        server = create_server(repository, max_receive_bytes=limits[0],
                               max_send_bytes=limits[1])
        bound = listen(server, host, port)
        stop = asyncio.Event()
        caught: list[int] = []

        def on_signal(signum: int) -> None:
            caught.append(signum)
            stop.set()

        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal, sig)
        await server.start()
        log.info("KServe V2 gRPC on %s:%d", host, bound)
        await stop.wait()
        log.info("shutting down: draining for up to %d s", DRAIN_SECONDS)
        await stop_draining(server, DRAIN_SECONDS)
        await repository.stop()
        if caught:
            log.info("drained after %s", signal.Signals(caught[0]).name)

    if _uvloop():
        import uvloop

        uvloop.run(serve())
    else:
        asyncio.run(serve())


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
        with paused_collector():
            repository = open_function_repository(
                function.repository, function.models or None, store=function.store,
                strict=function.exit_on_error,
            )
    except ModelfnError as exc:
        log.error("cannot serve %s: %s", function.store or function.repository, exc.message)
        sys.exit(1)
    max_body_bytes = function.max_body_bytes or DEFAULT_MAX_BODY_BYTES
    if function.protocol == "grpc":
        if importlib.util.find_spec("grpc") is None:
            log.error("MODELFN_PROTOCOL=grpc needs grpcio: install the grpc extra, "
                      "pip install 'modelfn[grpc]'")
            sys.exit(1)
        try:
            run_grpc(repository, host=function.host, port=function.port,
                     limits=(max_body_bytes,
                             function.grpc_max_send_bytes or DEFAULT_MAX_BODY_BYTES))
        except ModelfnError as exc:
            log.error("%s", exc.message)
            sys.exit(1)
        return
    run(
        repository,
        host=function.host,
        port=function.port,
        max_body_bytes=max_body_bytes,
        log_level=function.log_level,
        busy_poll_us=function.busy_poll_us,
    )


if __name__ == "__main__":
    main()
