"""Where a deployed model lives, from the options ``deploy``, ``traffic``, ``rollback``,
``status`` and ``undeploy`` share: the target, the store with its routing tables, and the
platform clients (the ``kubernetes`` client for Knative, boto3 for Lambda).

``--target local`` reads the running local platform's endpoints (``modelfn dev`` writes
them to ``DIR/env``) and then uses the same clients as a real cluster or account:
local Knative by default, the local Lambda with ``--lambda``.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from modelfn.cli.errors import exit_on_error, require
from modelfn.cli.params import endpoint_url_option
from modelfn.runtime.errors import InvalidInput

if TYPE_CHECKING:
    from collections.abc import Callable

    from modelfn.deploy.aws_lambda import LambdaTarget
    from modelfn.deploy.knative_target import KnativeTarget
    from modelfn.model_store.base import ModelStore
    from modelfn.model_store.routes import ModelRoutes, RouteSource

TARGETS = ("knative", "cloudrun", "lambda", "local")
#: what the routing table records for the local platform's two halves
LOCAL_KNATIVE = "local"
LOCAL_LAMBDA = "local-lambda"


#: the parameters ``target_options`` adds and turns into one ``where``
WHERE_PARAMETERS = ("target", "as_lambda", "store", "routes", "namespace", "context", "region",
                    "endpoint_url", "state_dir")


def target_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """The options every command that touches a deployed model takes, given to the command
    as one ``where: Where``."""
    options = [
        click.option("--target", type=click.Choice(TARGETS), required=True,
                     envvar="MODELFN_TARGET", help="Where the model is deployed."),
        click.option("--lambda", "as_lambda", is_flag=True, envvar="MODELFN_LAMBDA",
                     help="With --target local: the local Lambda, not local Knative."),
        click.option("--store", envvar="MODELFN_STORE",
                     help="The model store (--target local: the platform's own)."),
        click.option("--routes", envvar="MODELFN_ROUTES",
                     help="Where the routing tables are (default: the model store)."),
        click.option("--namespace", default="default", show_default=True,
                     envvar="MODELFN_NAMESPACE", help="Kubernetes namespace (Knative)."),
        click.option("--context", envvar="MODELFN_CONTEXT", help="kubeconfig context (Knative)."),
        click.option("--region", envvar=["MODELFN_REGION", "AWS_DEFAULT_REGION"],
                     help="AWS or Cloud Run region."),
        endpoint_url_option,
        click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path),
                     envvar="MODELFN_DEV_DIR", help="The local platform's state directory."),
    ]

    @functools.wraps(func)
    def command(**kwargs: Any) -> Any:
        found = {name: kwargs.pop(name) for name in WHERE_PARAMETERS}
        with exit_on_error():
            where = Where.of(**found)
        return func(where=where, **kwargs)

    for option in reversed(options):
        command = option(command)
    return command


@dataclass
class Where:
    target: str
    as_lambda: bool = False
    store: str | None = None
    routes: str | None = None
    namespace: str = "default"
    context: str | None = None
    region: str | None = None
    endpoint_url: str | None = None
    kubeconfig: str | None = None
    status_url: str | None = None  # the local platform's status document

    @classmethod
    def of(cls, target: str, as_lambda: bool, store: str | None, routes: str | None,
           namespace: str, context: str | None, region: str | None, endpoint_url: str | None,
           state_dir: Path | None) -> Where:
        where = cls(target, as_lambda, store, routes, namespace, context, region, endpoint_url)
        if as_lambda and target != "local":
            raise InvalidInput("--lambda goes with --target local (use --target lambda for AWS)")
        if target == "local":
            where._use_local(state_dir)
        return where

    def _use_local(self, state_dir: Path | None) -> None:
        from modelfn.localstack.state import PlatformNotRunning, StateDir, default_state_dir

        state = StateDir(state_dir or default_state_dir())
        ready = state.read_ready()
        if ready is None:
            raise PlatformNotRunning(state.path)
        env = state.read_env()
        # boto3 (our calls and the store's) and the functions' store client read these
        os.environ.update({k: v for k, v in env.items()
                           if k.startswith("AWS_") or k == "MODELFN_S3_ENDPOINT"})
        self.store = self.store or env.get("MODELFN_STORE")
        self.endpoint_url = self.endpoint_url or env.get("AWS_ENDPOINT_URL")
        self.region = self.region or env.get("AWS_DEFAULT_REGION")
        self.kubeconfig = env.get("KUBECONFIG")
        self.status_url = str(ready.get("status_url") or "") or None

    @property
    def is_lambda(self) -> bool:
        return self.target == "lambda" or (self.target == "local" and self.as_lambda)

    @property
    def recorded(self) -> str:
        """The target as the routing table records it."""
        if self.target == "local":
            return LOCAL_LAMBDA if self.as_lambda else LOCAL_KNATIVE
        return self.target

    def model_store(self) -> ModelStore:
        from modelfn.model_store import open_store

        if self.store is None:
            raise InvalidInput("give the model store with --store (or MODELFN_STORE)")
        return open_store(self.store)

    def route_source(self) -> RouteSource:
        from modelfn.model_store import open_store
        from modelfn.model_store.routes import RouteSource

        if self.routes is None and self.store is None:
            raise InvalidInput("give the model store with --store (or MODELFN_STORE), or the "
                               "routing tables with --routes")
        return RouteSource(store=open_store(self.routes or str(self.store)))

    def deployed(self, model: str) -> tuple[RouteSource, ModelRoutes]:
        """The model's routing table, which must say it is deployed on this target."""
        source = self.route_source()
        table = source.read(model)
        if table is None:
            raise ModelNotDeployed(f"'{model}' is not deployed (no routing table in "
                                   f"{source.uri})")
        if table.target != self.recorded:
            raise InvalidInput(f"'{model}' is deployed on {_describe(table.target)}, not on "
                               f"{_describe(self.recorded)}")
        return source, table

    def knative(self) -> KnativeTarget:
        require(f"--target {self.target}", "knative", "kubernetes")
        from kubernetes import client, config

        from modelfn.deploy.knative_target import KnativeTarget

        config.load_kube_config(config_file=self.kubeconfig, context=self.context)
        return KnativeTarget(client.CustomObjectsApi())

    def boto3_client(self, service: str) -> Any:
        import boto3

        return boto3.client(service, region_name=self.region,  # type: ignore[call-overload]
                            endpoint_url=self.endpoint_url)

    def aws_lambda(self) -> LambdaTarget:
        from modelfn.deploy.aws_lambda import LambdaTarget

        return LambdaTarget(self.boto3_client("lambda"))


def _describe(recorded: str) -> str:
    return {LOCAL_KNATIVE: "--target local", LOCAL_LAMBDA: "--target local --lambda"}.get(
        recorded, f"--target {recorded}")


class ModelNotDeployed(InvalidInput):
    status_code = 404
