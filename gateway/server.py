"""Building and running the gateway: routes from a store or a directory, uvicorn on a port."""

from __future__ import annotations

from typing import TYPE_CHECKING

from modelfn.gateway.app import Gateway
from modelfn.gateway.auth import ApiKeys
from modelfn.gateway.batching import DEFAULT_INSTANCES
from modelfn.gateway.limits import DEFAULT_MAX_BODY_BYTES
from modelfn.gateway.router import Router
from modelfn.gateway.upstream import DEFAULT_BUDGET_S, UpstreamClient
from modelfn.model_store.routes import RouteSource

if TYPE_CHECKING:
    from pathlib import Path


def create_gateway(
    *,
    routes: str | None = None,
    routes_dir: Path | None = None,
    api_keys: Path | None = None,
    protect_metrics: bool = False,
    budget_s: float = DEFAULT_BUDGET_S,
    cold_concurrency: int = 4,
    reload_s: float = 1.0,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    batch_instances: int = DEFAULT_INSTANCES,
    allowed_origins: tuple[str, ...] = (),
) -> Gateway:
    """The gateway app over the routing tables of the store ``routes`` (a store URI) or of
    the directory ``routes_dir``; ``batch_instances``: batches in flight at once per version
    the gateway batches for (functions that take one request at a time)."""
    if routes is not None:
        from modelfn.model_store import open_store

        source = RouteSource(store=open_store(routes))
    elif routes_dir is not None:
        source = RouteSource(directory=routes_dir)
    else:
        raise ValueError("the gateway needs --routes (a model store) or --routes-dir")
    return Gateway(
        Router(source, reload_s=reload_s),
        upstream=UpstreamClient(budget_s=budget_s, cold_concurrency=cold_concurrency),
        api_keys=ApiKeys.load(api_keys) if api_keys is not None else None,
        protect_metrics=protect_metrics,
        max_body_bytes=max_body_bytes,
        batch_instances=batch_instances,
        allowed_origins=allowed_origins,
    )


def run(gateway: Gateway, host: str, port: int, log_level: str = "info", *,
        grpc_port: int | None = None) -> None:
    """Serve the gateway over REST on ``port``, and over gRPC on ``grpc_port`` too."""
    import logging

    import uvicorn

    from modelfn.gateway.origins import exposure_warning
    from modelfn.net.edge import edge_protocol
    from modelfn.platforms.knative import DRAIN_SECONDS

    warning = exposure_warning(host, gateway.api_keys is not None)
    if warning is not None:
        logging.getLogger("modelfn.gateway").warning(warning)

    config = uvicorn.Config(gateway, host=host, port=port, log_level=log_level,
                            access_log=False, http=edge_protocol(0, None), lifespan="on",
                            ws="none", timeout_graceful_shutdown=30)
    if grpc_port is None:
        uvicorn.Server(config).run()
        return
    from modelfn.gateway.grpc import GatewayGrpc
    from modelfn.protocol.grpc.server import beside_uvicorn

    side = GatewayGrpc(gateway, budget_s=gateway.upstream.budget_s,
                       timeout_s=gateway.upstream.timeout_s,
                       max_message_bytes=gateway.max_body_bytes)
    server = beside_uvicorn(config, side.server, host, grpc_port, drain_s=DRAIN_SECONDS,
                            stopped=side.close)
    server.run()
    if not server.started:
        raise SystemExit(3)
