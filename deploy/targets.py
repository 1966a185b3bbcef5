"""The platforms modelfn deploys to, behind one interface.

A ``Target`` renders a ``Deployment`` into its platform's objects, checks them, applies
them, reads and sets the split the platform serves, removes a version or the whole model,
and says what the routing table records of it (its name there, the auth its URLs need and
how many requests one instance takes at once). ``deploy/workflow.py`` runs a deploy
through it; the ``traffic``, ``rollback``, ``status`` and ``undeploy`` commands call it.

- ``Knative``: a Knative Service on a cluster (a remote one, or the local platform's
  Knative API), through ``KnativeTarget``; one instance takes ``containerConcurrency``.
- ``AwsLambda``: a Lambda function with an alias per version and ``live`` for the split,
  through ``LambdaTarget``; one environment takes one request (the gateway batches).
- ``CloudRun``: rendered only (modelfn does not call Google Cloud): what would change
  the platform is ``CannotApply``, naming the ``gcloud`` command that does.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from modelfn.platforms import aws_lambda, cloudrun
from modelfn.runtime.errors import InvalidInput

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from modelfn.deploy.aws_lambda import LambdaOptions, LambdaTarget
    from modelfn.deploy.deployment import Deployment
    from modelfn.deploy.knative_target import KnativeTarget
    from modelfn.deploy.recorder import CallRecorder
    from modelfn.deploy.split import ServedSplit
    from modelfn.model_store.routes import Auth

    Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


@dataclass(frozen=True)
class Routing:
    """What the routing table records of a target, besides its URLs."""

    target: str  # its name in the table: knative, cloudrun, lambda, local, local-lambda
    auth: Auth = "none"
    region: str | None = None  # for SigV4
    #: requests one instance takes at once; None: the deployment's containerConcurrency
    concurrency: int | None = None


@dataclass(frozen=True)
class Applied:
    """A deployment the platform serves: the URL that applies its split, each version's
    pinned URL, and whether anything changed."""

    url: str
    pinned: Mapping[int, str]
    changed: bool


class CannotApply(InvalidInput):
    """A change modelfn renders for a platform but does not make itself."""


class Target(ABC):
    """A platform a model is deployed to."""

    #: False: modelfn renders for it but makes no call (``apply_hint`` says what does)
    applies = True

    def __init__(self, routing: Routing) -> None:
        self.routing = routing

    def apply_hint(self) -> str:
        """How to apply what was rendered, where modelfn does not."""
        return ""

    @abstractmethod
    def render(self, deployment: Deployment, *, dry_run: bool = False,
               progress: Progress = _quiet) -> Any:
        """The platform's objects for ``deployment``."""

    @abstractmethod
    def validate(self, rendered: Any) -> None:
        """Refuse what the platform would refuse, before any call."""

    @abstractmethod
    def show(self, rendered: Any, deployment: Deployment) -> str:
        """What a dry run (or a target that only renders) prints: the objects or calls."""

    def describe(self, rendered: Any) -> str:
        """The platform's object, for the progress line (`` (service ns/name)``)."""
        return ""

    @abstractmethod
    def apply(self, deployment: Deployment, rendered: Any, *, timeout_s: float,
              progress: Progress = _quiet) -> Applied:
        """Make the platform serve ``rendered``."""

    @abstractmethod
    def served_split(self, model: str) -> ServedSplit | None:
        """The split the platform serves now (None: it has nothing of ``model``)."""

    @abstractmethod
    def set_split(self, model: str, split: Mapping[int, int], *, timeout_s: float,
                  progress: Progress = _quiet) -> bool:
        """Move the platform to ``split``; False when it already had it."""

    @abstractmethod
    def remove_version(self, model: str, version: int, split: Mapping[int, int], *,
                       timeout_s: float, progress: Progress = _quiet) -> None:
        """Stop serving ``version`` (no traffic left on it); ``split``: the rest's."""

    @abstractmethod
    def delete(self, model: str) -> bool:
        """Remove everything the platform has of ``model``; False when it had nothing."""

    @abstractmethod
    def recording(self) -> tuple[Target, CallRecorder]:
        """A twin that reads this platform and records its changes (``--dry-run``)."""


class Knative(Target):
    """A Knative Service per model, on a cluster or the local platform's Knative API."""

    def __init__(self, knative: Callable[[], KnativeTarget], routing: Routing, namespace: str,
                 *, store_endpoint: str | None = None) -> None:
        """``knative``: makes the cluster's client when first needed (a dry run of a first
        deploy reads no cluster, and needs no kubeconfig)."""
        super().__init__(routing)
        self._knative = knative
        self.namespace = namespace
        self.store_endpoint = store_endpoint

    @functools.cached_property
    def knative(self) -> KnativeTarget:
        return self._knative()

    def render(self, deployment: Deployment, *, dry_run: bool = False,
               progress: Progress = _quiet) -> Any:
        from modelfn.deploy.knative import render

        return render(deployment, revisions=self._revisions(deployment, dry_run, progress))

    def _revisions(self, deployment: Deployment, dry_run: bool, progress: Progress
                   ) -> dict[int, str]:
        """The revision each other version of the split has now, read from the Service (by
        its tag). A dry run that cannot read the cluster says so and names them as before
        template hashes (``<service>-v<version>``)."""
        others = set(deployment.traffic) - {deployment.version}
        if not others:
            return {}
        if not dry_run:
            return self.knative.revisions(deployment.namespace, deployment.model)
        try:
            return self.knative.revisions(deployment.namespace, deployment.model)
        except Exception as exc:  # no kubeconfig, no cluster: a dry run prints what it can
            progress(f"--dry-run: could not read the service of {deployment.model} in "
                     f"{deployment.namespace} "
                     f"({type(exc).__name__}: {exc}); the revisions of versions "
                     f"{', '.join(map(str, sorted(others)))} are shown as "
                     "<service>-v<version>")
            return {}

    def validate(self, rendered: Any) -> None:
        from modelfn.deploy.knative import validate

        validate(rendered)

    def show(self, rendered: Any, deployment: Deployment) -> str:
        return _yaml(rendered)

    def describe(self, rendered: Any) -> str:
        meta = rendered["metadata"]
        return f" (service {meta.get('namespace', self.namespace)}/{meta['name']})"

    def apply(self, deployment: Deployment, rendered: Any, *, timeout_s: float,
              progress: Progress = _quiet) -> Applied:
        cluster = str(self.knative.api.api_client.configuration.host)
        if not cloudrun.is_loopback(cluster):  # a real cluster fetches the store itself
            cloudrun.check_store_reachable(deployment.function.store, self.store_endpoint,
                                           f"the cluster at {cluster}")
        result = self.knative.apply(rendered, timeout_s=timeout_s, progress=progress)
        return Applied(result.url, pinned_urls(result.tag_urls), result.changed)

    def served_split(self, model: str) -> ServedSplit | None:
        from modelfn.deploy.knative_target import served_split

        service = self.knative.service_of(self.namespace, model)
        return None if service is None else served_split(service)

    def set_split(self, model: str, split: Mapping[int, int], *, timeout_s: float,
                  progress: Progress = _quiet) -> bool:
        # each version at the revision its tag points at now (its name carries a hash)
        return self.knative.set_split(self.namespace, model, split, timeout_s=timeout_s,
                                      progress=progress).changed

    def remove_version(self, model: str, version: int, split: Mapping[int, int], *,
                       timeout_s: float, progress: Progress = _quiet) -> None:
        self.set_split(model, split, timeout_s=timeout_s, progress=progress)

    def delete(self, model: str) -> bool:
        return self.knative.delete(self.namespace, model)

    def recording(self) -> tuple[Target, CallRecorder]:
        knative, recorder = self.knative.recording()
        return Knative(lambda: knative, self.routing, self.namespace,
                       store_endpoint=self.store_endpoint), recorder


class AwsLambda(Target):
    """A Lambda function per model, an alias per version, ``live`` for the split."""

    def __init__(self, lam: Callable[[], LambdaTarget], routing: Routing,
                 options: Callable[[], LambdaOptions] | None = None) -> None:
        """``lam`` and ``options``: the client and the deploy's options, made when first
        needed (after the checks that need neither, so a name Lambda refuses is said
        before a missing role)."""
        super().__init__(routing)
        self._lam = lam
        self.options = options
        self._made: LambdaOptions | None = None

    @functools.cached_property
    def lam(self) -> LambdaTarget:
        return self._lam()

    def _options(self) -> LambdaOptions:
        if self._made is None:
            if self.options is None:
                raise InvalidInput("deploying to Lambda needs its options (the role, "
                                   "memory, auth)")
            self._made = self.options()
        return self._made

    def render(self, deployment: Deployment, *, dry_run: bool = False,
               progress: Progress = _quiet) -> Any:
        """Lambda has no objects to render: the deployment is applied by calls."""
        return deployment

    def validate(self, rendered: Any) -> None:
        """What Lambda would refuse, refused before any call."""
        aws_lambda.check_function_name(rendered.model)
        aws_lambda.check_split(rendered.model, rendered.traffic)

    def show(self, rendered: Any, deployment: Deployment) -> str:
        import json

        return json.dumps(self.lam.calls(deployment, self._options()), indent=2,
                          default=str) + "\n"

    def describe(self, rendered: Any) -> str:
        return " (Lambda)"

    def apply(self, deployment: Deployment, rendered: Any, *, timeout_s: float,
              progress: Progress = _quiet) -> Applied:
        result = self.lam.apply(deployment, self._options())
        pinned = {deployment.version: result.urls[aws_lambda.alias(deployment.version)]}
        return Applied(result.live_url, pinned, result.changed)

    def served_split(self, model: str) -> ServedSplit | None:
        return self.lam.served_split(model)

    def set_split(self, model: str, split: Mapping[int, int], *, timeout_s: float,
                  progress: Progress = _quiet) -> bool:
        return self.lam.set_split(model, split)

    def remove_version(self, model: str, version: int, split: Mapping[int, int], *,
                       timeout_s: float, progress: Progress = _quiet) -> None:
        self.lam.remove_version(model, version)

    def delete(self, model: str) -> bool:
        return self.lam.delete(model)

    def recording(self) -> tuple[Target, CallRecorder]:
        lam, recorder = self.lam.recording()
        return AwsLambda(lambda: lam, self.routing, self.options), recorder


class CloudRun(Target):
    """A Cloud Run service rendered as YAML for ``gcloud``; modelfn makes no call to it."""

    applies = False

    def __init__(self, region: str | None, project: str | None = None, *,
                 store_endpoint: str | None = None) -> None:
        super().__init__(Routing("cloudrun"))
        self.region = region
        self.project = project
        self.store_endpoint = store_endpoint

    def render(self, deployment: Deployment, *, dry_run: bool = False,
               progress: Progress = _quiet) -> Any:
        from modelfn.deploy.knative import render_cloudrun

        cloudrun.check_store_reachable(deployment.function.store, self.store_endpoint)
        if self.region is None:
            raise InvalidInput("--target cloudrun needs --region")
        if set(deployment.traffic) - {deployment.version}:
            progress("note: modelfn does not read Cloud Run, so the other versions' "
                     "revisions are named <service>-v<version>; set their revisionName from "
                     "`gcloud run revisions list` if they were deployed with other names")
        return render_cloudrun(deployment, self.region, project=self.project)

    def validate(self, rendered: Any) -> None:
        from modelfn.deploy.knative import validate

        validate(rendered, cloudrun.DEFAULTS)

    def show(self, rendered: Any, deployment: Deployment) -> str:
        return _yaml(rendered)

    def apply_hint(self) -> str:
        return ("apply it with: gcloud run services replace FILE.yaml --region "
                + (self.region or "REGION"))

    def _refuse(self, what: str) -> CannotApply:
        return CannotApply(f"modelfn does not call Google Cloud, so it cannot {what} on "
                           f"Cloud Run; {self.apply_hint()}")

    def apply(self, deployment: Deployment, rendered: Any, *, timeout_s: float,
              progress: Progress = _quiet) -> Applied:
        raise self._refuse("apply a service")

    def served_split(self, model: str) -> ServedSplit | None:
        raise self._refuse("read the split")

    def set_split(self, model: str, split: Mapping[int, int], *, timeout_s: float,
                  progress: Progress = _quiet) -> bool:
        raise self._refuse("set the split")

    def remove_version(self, model: str, version: int, split: Mapping[int, int], *,
                       timeout_s: float, progress: Progress = _quiet) -> None:
        raise self._refuse("remove a version")

    def delete(self, model: str) -> bool:
        raise self._refuse("delete a service")

    def recording(self) -> tuple[Target, CallRecorder]:
        raise self._refuse("record calls")


def pinned_urls(tag_urls: Mapping[str, str]) -> dict[int, str]:
    """Model version -> its pinned URL, from a Service's ``v<version>`` traffic tags."""
    return {int(tag[1:]): url for tag, url in tag_urls.items()
            if tag.startswith("v") and tag[1:].isdigit()}


def _yaml(objects: Any) -> str:
    import yaml

    return str(yaml.safe_dump(objects, sort_keys=False))
