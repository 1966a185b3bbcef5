"""Where a deployed model lives, from the options ``deploy``, ``traffic``, ``rollback``,
``status`` and ``undeploy`` share: the target, the store with its routing tables, the
platform clients (the ``kubernetes`` client for Knative, boto3 for Lambda) and the deploy
target over them (``Where.platform``: ``deploy/targets.py``).

``--target local`` reads the running local platform's endpoints (``modelfn dev`` writes
them to ``DIR/env``) and then uses the same clients as a real cluster or account:
local Knative by default, the local Lambda with ``--lambda``.

``deploy`` needs ``--target``; the commands on a deployed model take it from the model's
routing table when it is not given (and the table's region for Lambda). The table does not
record a Knative namespace or kubeconfig context: ``--namespace`` and ``--context`` apply
as given. The hints they print are commands that run as typed in the same shell: the
model's name and the options given on the command line, except the target, which the
table has.
"""

from __future__ import annotations

import functools
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from modelfn.cli.errors import exit_on_error, require
from modelfn.cli.params import NoStore, endpoint_url_option, require_store
from modelfn.model_store.routes import LOCAL_KNATIVE, LOCAL_LAMBDA
from modelfn.runtime.errors import InvalidInput, ModelfnError

if TYPE_CHECKING:
    from collections.abc import Callable

    from modelfn.deploy.aws_lambda import LambdaOptions, LambdaTarget
    from modelfn.deploy.knative_target import KnativeTarget
    from modelfn.deploy.targets import Target
    from modelfn.model_store.base import ModelStore
    from modelfn.model_store.routes import Auth, ModelRoutes, RouteSource

TARGETS = ("knative", "cloudrun", "lambda", "local")
#: a target the routing table records -> the --target and --lambda that reach it
RECORDED = {LOCAL_KNATIVE: ("local", False), LOCAL_LAMBDA: ("local", True),
            **{target: (target, False) for target in TARGETS if target != "local"}}


#: the parameters ``target_options`` adds and turns into one ``where``
WHERE_PARAMETERS = ("target", "as_lambda", "store", "routes", "namespace", "context", "region",
                    "endpoint_url", "state_dir")


def target_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """The options of ``deploy``, given to the command as one ``where: Where``; it needs
    ``--target``."""
    return _where_options(func, required=True)


def deployed_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """The options of the commands on a deployed model, given to the command as one
    ``where: Where``; ``--target`` is read from the routing table when not given."""
    return _where_options(func, required=False)


def _where_options(func: Callable[..., Any], required: bool) -> Callable[..., Any]:
    options = [
        click.option("--target", type=click.Choice(TARGETS), required=required,
                     envvar="MODELFN_TARGET",
                     help="Where the model is deployed." if required else
                     "Where the model is deployed (default: where its routing table says)."),
        click.option("--lambda", "as_lambda", is_flag=True, envvar="MODELFN_LAMBDA",
                     help="With --target local: the local Lambda, not local Knative."
                     + ("" if required else " Alone, it means --target local --lambda.")),
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
        where.typed = _typed(found)
        return func(where=where, **kwargs)

    for option in reversed(options):
        command = option(command)
    return command


def _typed(values: dict[str, Any]) -> tuple[str, ...]:
    """The options of ``values`` given on the command line, as typed, except the target
    and ``--lambda`` (a deployed model's routing table has them)."""
    from click.core import ParameterSource

    context = click.get_current_context()
    typed: list[str] = []
    for param in context.command.params:
        name = param.name
        if (name not in WHERE_PARAMETERS or name in ("target", "as_lambda")
                or context.get_parameter_source(name) != ParameterSource.COMMANDLINE):
            continue
        typed += [param.opts[0], str(values[name])]
    return tuple(typed)


@dataclass
class Where:
    target: str | None
    as_lambda: bool = False
    store: str | None = None
    routes: str | None = None
    namespace: str = "default"
    context: str | None = None
    region: str | None = None
    endpoint_url: str | None = None
    kubeconfig: str | None = None
    status_url: str | None = None  # the local platform's status document
    state_dir: Path | None = None
    typed: tuple[str, ...] = ()  # the options given on the command line, for hints
    _local: bool = False  # the local platform's environment is loaded

    @classmethod
    def of(cls, target: str | None, as_lambda: bool, store: str | None, routes: str | None,
           namespace: str, context: str | None, region: str | None, endpoint_url: str | None,
           state_dir: Path | None) -> Where:
        if as_lambda and target not in (None, "local"):
            raise InvalidInput("--lambda goes with --target local (use --target lambda for AWS)")
        if as_lambda:  # --lambda alone: the local Lambda
            target = "local"
        where = cls(target, as_lambda, store, routes, namespace, context, region, endpoint_url,
                    state_dir=state_dir)
        if target == "local":
            where._use_local()
        elif target is None and store is None and routes is None:
            where._find_local()
        return where

    def _find_local(self) -> None:
        """No target and no store: the routing tables of the local platform, the one of
        ``--state-dir`` or, if one runs, the default one."""
        from modelfn.localstack.state import StateDir, default_state_dir

        if self.state_dir is not None or StateDir(default_state_dir()).read_ready() is not None:
            self._use_local()

    def _use_local(self) -> None:
        from modelfn.localstack.state import PlatformNotRunning, StateDir, default_state_dir

        if self._local:
            return
        state = StateDir(self.state_dir or default_state_dir())
        ready = state.read_ready()
        if ready is None:
            raise PlatformNotRunning(state.path)
        self._local = True
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
        if self.target is None:
            raise InvalidInput("give the target with --target")
        if self.target == "local":
            return LOCAL_LAMBDA if self.as_lambda else LOCAL_KNATIVE
        return self.target

    def hint(self, *words: object) -> str:
        """``modelfn WORDS...`` with the options typed on the command line: a command that
        runs as typed in the same shell (the target comes from the routing table)."""
        return shlex.join(["modelfn", *map(str, words), *self.typed])

    def check_free(self, current: ModelRoutes | None) -> None:
        """``DeployedElsewhere`` when ``current`` (the model's routing table) puts the
        model on another target than this one."""
        if current is not None and current.target != self.recorded:
            raise DeployedElsewhere(current.model, current.target, self.recorded,
                                    self.hint("undeploy", current.model))

    def model_store(self) -> ModelStore:
        from modelfn.model_store import open_store

        return open_store(require_store(self.store), endpoint_url=self.endpoint_url)

    def route_source(self) -> RouteSource:
        from modelfn.model_store import open_store
        from modelfn.model_store.routes import RouteSource

        if self.routes is None and self.store is None:
            raise NoStore("the routing tables with --routes")
        return RouteSource(store=open_store(self.routes or str(self.store),
                                            endpoint_url=self.endpoint_url))

    def deployed(self, model: str) -> tuple[RouteSource, ModelRoutes]:
        """The model's routing table, which must say it is deployed on this target; with no
        target given, the table's target (its platform's environment loaded, for the local
        one)."""
        source = self.route_source()
        table = source.read(model)
        if table is None:
            raise ModelNotDeployed(model, source.uri)
        if self.target is None:
            if table.target not in RECORDED:
                raise InvalidInput(f"the routing table of '{model}' names the target "
                                   f"'{table.target}', which modelfn does not know; give "
                                   "--target")
            self.target, self.as_lambda = RECORDED[table.target]
            if self.target == "local":
                self._use_local()
        elif table.target != self.recorded:
            raise TargetMismatch(model, table.target, self.recorded)
        if self.is_lambda and self.region is None:
            self.region = table.region
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

    def platform(self, *, auth: Auth = "none",
                 lambda_options: Callable[[], LambdaOptions] | None = None,
                 store_endpoint: str | None = None, project: str | None = None) -> Target:
        """The deploy target this is; its platform client is made when first used. ``auth``
        and ``lambda_options``: a Lambda deploy's; ``store_endpoint``: where functions
        fetch the store; ``project``: Cloud Run's."""
        from modelfn.deploy.targets import AwsLambda, CloudRun, Knative, Routing
        from modelfn.platforms import aws_lambda

        if self.is_lambda:
            return AwsLambda(self.aws_lambda, Routing(self.recorded, auth, self.region,
                                                      aws_lambda.CONCURRENCY), lambda_options)
        if self.target == "cloudrun":
            return CloudRun(self.region, project, store_endpoint=store_endpoint)
        return Knative(self.knative, Routing(self.recorded), self.namespace,
                       store_endpoint=store_endpoint)


def describe(recorded: str) -> str:
    """A target the routing table records, as the user types it."""
    target, as_lambda = RECORDED.get(recorded, (recorded, False))
    return f"--target {target}" + (" --lambda" if as_lambda else "")


class ModelNotDeployed(ModelfnError):
    status_code = 404

    def __init__(self, model: str, where: str) -> None:
        super().__init__(f"'{model}' is not deployed (no routing table in {where})")
        self.model = model
        self.where = where


class TargetMismatch(ModelfnError):
    """A command on a deployed model was given another target than the model's."""

    status_code = 400

    def __init__(self, model: str, recorded: str, given: str) -> None:
        super().__init__(f"'{model}' is deployed on {describe(recorded)}, not on "
                         f"{describe(given)}: give {describe(recorded)}, or no --target")


class DeployedElsewhere(ModelfnError):
    """A deploy to one target of a model deployed on another."""

    status_code = 409

    def __init__(self, model: str, recorded: str, wanted: str, undeploy: str) -> None:
        super().__init__(f"'{model}' is deployed on {describe(recorded)}; to deploy it with "
                         f"{describe(wanted)}, undeploy it first: {undeploy}")
