"""From a model in the store and the user's options to a ``Deployment`` and its routing table.

An ensemble's function serves its composing models too (``model_store.composing``), at
the versions its push recorded; the routing table routes the ensemble's name. The model's
batching facts come from the config the version was pushed with (completed
from the version's model file, as the function completes it at load, where it leaves the
tensors to auto-complete); the split comes from the routing table (the versions serving
now keep their proportions, the new one takes ``--traffic``). After the platform applied
it, ``routes_after`` records what the gateway needs: the URL that splits, each version's
pinned URL, auth, concurrency and config (what the gateway batches by).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from modelfn.deploy.deployment import (
    Batching,
    Deployment,
    Resources,
    Scaling,
    split_traffic,
)
from modelfn.handlers.environment import FunctionEnvironment
from modelfn.model_store.composing import function_models
from modelfn.model_store.routes import ModelRoutes, VersionRoute
from modelfn.runtime.config_file import parse_config
from modelfn.runtime.errors import ConfigError
from modelfn.runtime.names import parse_model_ref

if TYPE_CHECKING:
    from collections.abc import Mapping

    from modelfn.model_store.base import ModelStore
    from modelfn.model_store.routes import Auth, Protocol
    from modelfn.runtime.config import ModelConfig

#: where ``--bake`` images hold the repository (deploy/build.py writes it there)
BAKED_REPOSITORY = "/opt/modelfn/models"


@dataclass(frozen=True)
class Options:
    image: str
    bake: bool = False
    traffic: int = 100
    scaling: Scaling = field(default_factory=Scaling)
    resources: Resources = field(default_factory=Resources)
    namespace: str = "default"
    protocol: str = "http"  # http (V2 REST) or grpc (V2 gRPC on the one port, h2c)
    busy_poll_us: int = 0  # the function's server polls this long after each request
    store_endpoint: str | None = None  # where an S3-compatible store answers (None: AWS S3)


def resolve(store: ModelStore, ref: str) -> tuple[str, int]:
    name, version = parse_model_ref(ref)
    return name, store.resolve(name, "latest" if version is None else version)


def plan(store: ModelStore, ref: str, options: Options, routes: ModelRoutes | None
         ) -> Deployment:
    """The deployment of ``ref`` (``name[:version]``; latest by default)."""
    from pathlib import Path

    name, version = resolve(store, ref)
    config = parse_config(store.manifest(name, version).config, f"{name}/config.pbtxt")
    if not (config.inputs and config.outputs):
        config = completed(store, name, version)
    # an ensemble's function serves its composing models too, at the versions its push
    # recorded, each loaded before the ensembles that run it
    models = [str(ref) for ref in function_models(store, name, version)]
    function = FunctionEnvironment(  # a baked image holds the model; else it comes from the store
        repository=Path(BAKED_REPOSITORY) if options.bake else None, models=models,
        store=None if options.bake else store.uri, protocol=options.protocol,
        busy_poll_us=options.busy_poll_us,
        # the function reads the store where the deploy did: MinIO's bucket, not AWS's
        store_endpoint=None if options.bake or not store.uri.startswith("s3://")
        else options.store_endpoint)
    current = dict(routes.split) if routes is not None else {}
    return Deployment(
        model=name, version=version, image=options.image, function=function,
        batching=Batching.of(config), resources=options.resources, scaling=options.scaling,
        traffic=split_traffic(current, version, options.traffic), namespace=options.namespace,
    )


def completed(store: ModelStore, name: str, version: int) -> ModelConfig:
    """The config of a version pushed with one that leaves its tensors to auto-complete
    (as Triton's example repositories do), completed from its model file as the function
    will complete it at load: the gateway batches by the inputs and outputs. The version
    comes through the store's cache; the engine's library is imported only here."""
    from modelfn.runtime.repository import check_version

    repository = store.fetch(name, version)
    try:
        return check_version(repository / name, version, name)
    except ConfigError as exc:
        raise ConfigError(f"{name}:{version} was pushed with a config that leaves its inputs "
                          f"and outputs to auto-complete, and its model does not complete "
                          f"it: {exc.message}") from exc


def routes_after(deployment: Deployment, routes: ModelRoutes | None, *, target: str,
                 url: str, pinned: Mapping[int, str], auth: Auth = "none",
                 region: str | None = None, concurrency: int | None = None) -> ModelRoutes:
    """The routing table once ``deployment`` is live: earlier versions keep their routes."""
    per_instance = deployment.container_concurrency if concurrency is None else concurrency
    versions = dict(routes.versions) if routes is not None and routes.target == target else {}
    for version, version_url in pinned.items():
        # the protocol is each version's own: v1 may speak REST while v2 speaks gRPC
        known = versions.get(version)
        speaks = (deployment.function.protocol
                  if version == deployment.version or known is None else known.protocol)
        protocol: Protocol = "grpc" if speaks == "grpc" else "http"
        # the config is each version's own too (the deployed one's from its pushed config)
        config = (deployment.batching.policy if version == deployment.version
                  else None if known is None else known.config)
        versions[version] = VersionRoute(version_url, auth, deployment.batching.max_batch_size,
                                         per_instance, protocol, config)
    if routes is None or routes.target != target:
        return ModelRoutes(deployment.model, target, versions, dict(deployment.traffic),
                           url=url, auth=auth, region=region)
    return replace(routes, versions=versions, url=url, auth=auth, region=region).with_split(
        dict(deployment.traffic))
