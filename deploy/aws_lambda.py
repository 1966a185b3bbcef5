"""A ``Deployment`` applied to AWS Lambda: one function per model, a version and an alias per
model version, a ``live`` alias holding the canary split, function URLs on each alias.

The call sequence (boto3, any endpoint: AWS itself or the local platform's moto):

1. ``create_function`` (image by digest, memory, timeout, ephemeral storage, env) and the
   ``function_active_v2`` waiter; or, when it exists and differs, ``update_function_code``
   and ``update_function_configuration`` with the ``function_updated_v2`` waiter.
2. ``publish_version``: the Lambda version that serves this model version.
3. alias ``v<version>`` -> that Lambda version, with its own function URL (pinned).
4. alias ``live`` -> the split: the version with the largest share is the alias's own
   ``FunctionVersion``, the other one (Lambda allows one) goes in
   ``RoutingConfig.AdditionalVersionWeights``; it has the unpinned function URL.
5. ``AWS_IAM`` URLs by default; ``auth="none"`` adds the two resource-policy statements a
   public URL needs (``lambda:InvokeFunctionUrl`` and, since October 2025,
   ``lambda:InvokeFunction`` via the URL).

6. ``--warm N``: provisioned concurrency on ``live`` (``put_provisioned_concurrency_config``;
   0 deletes it), so N environments stay initialised and never cold-start.

``traffic`` and ``rollback`` only move ``live``; ``served_split`` reads it back, whoever
moved it; ``undeploy`` of one version deletes its
URL, alias and published version, and of the model the whole function.

Deploying what already runs changes nothing: an alias already pointing at a published
version with the same image and configuration is kept as it is. What Lambda would refuse
(a function name it does not take, a split over more than two versions, a version of the
split with no alias) is refused before the first call that changes anything.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from modelfn.deploy.aws_errors import aws_error
from modelfn.deploy.errors import Conflict, DeployError, PlatformNotFound
from modelfn.deploy.recorder import CallRecorder
from modelfn.deploy.split import ServedSplit
from modelfn.platforms.aws_lambda import (
    AUTH_TYPES,
    DEFAULT_EPHEMERAL_MB,
    DEFAULT_MEMORY_MB,
    EPHEMERAL_MB,
    LIVE,
    MAX_SPLIT,
    MEMORY_MB,
    TIMEOUT_S,
    VERSION_ALIAS,
    alias,
    check_function_name,
    check_split,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from modelfn.deploy.deployment import Deployment

#: the execution role local functions run as (created on first use)
LOCAL_ROLE = "modelfn-local"
#: the ARN a dry run names for it
LOCAL_ROLE_ARN = f"arn:aws:iam::000000000000:role/{LOCAL_ROLE}"


def local_role(iam: Any) -> str:
    """The ARN of the local platform's execution role, created on first use through the
    injected boto3 IAM client."""
    try:
        return str(iam.get_role(RoleName=LOCAL_ROLE)["Role"]["Arn"])
    except iam.exceptions.NoSuchEntityException:
        trust = {"Version": "2012-10-17", "Statement": [{
            "Effect": "Allow", "Action": "sts:AssumeRole",
            "Principal": {"Service": "lambda.amazonaws.com"}}]}
        return str(iam.create_role(RoleName=LOCAL_ROLE,
                                   AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"])


@dataclass(frozen=True)
class LambdaOptions:
    role: str
    memory_mb: int = DEFAULT_MEMORY_MB
    ephemeral_mb: int = DEFAULT_EPHEMERAL_MB
    auth: str = "iam"  # iam | none
    env: Mapping[str, str] = field(default_factory=dict)  # beyond the function's own
    warm: int | None = None  # provisioned concurrency on live; None leaves it as it is

    def __post_init__(self) -> None:
        for what, value, (low, high) in (("memory", self.memory_mb, MEMORY_MB),
                                         ("ephemeral storage", self.ephemeral_mb, EPHEMERAL_MB)):
            if not low <= value <= high:
                raise DeployError(f"Lambda {what} must be {low} to {high} MB, not {value}")
        if self.warm is not None and self.warm < 0:
            raise DeployError(f"--warm must be 0 or more, not {self.warm}")
        if self.auth not in AUTH_TYPES:
            raise DeployError(f"--auth must be iam or none, not '{self.auth}'")


@dataclass(frozen=True)
class LambdaResult:
    function: str
    lambda_versions: dict[int, str]  # model version -> Lambda version
    urls: dict[str, str]  # alias -> function URL
    changed: bool

    @property
    def live_url(self) -> str:
        return self.urls[LIVE]


def _recorded_answer(method: str, params: dict[str, Any]) -> dict[str, Any]:
    """What a ``--dry-run`` answers for a changing call whose answer ``apply`` reads."""
    if method == "publish_version":
        return {"Version": "(new)"}
    if method.endswith("function_url_config"):
        return {"FunctionUrl": f"(the URL of {params['FunctionName']}:{params['Qualifier']})",
                "AuthType": params.get("AuthType")}
    return {}


class LambdaTarget:
    """Applies deployments through an injected boto3 Lambda client."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def _config(self, deployment: Deployment, options: LambdaOptions) -> dict[str, Any]:
        timeout = deployment.scaling.timeout_s
        if not TIMEOUT_S[0] <= timeout <= TIMEOUT_S[1]:
            raise DeployError(f"Lambda timeout must be {TIMEOUT_S[0]} to {TIMEOUT_S[1]} s, not "
                              f"{timeout}")
        env = {**deployment.function.to_env(), **options.env}
        return {
            "Role": options.role,
            "MemorySize": options.memory_mb,
            "Timeout": timeout,
            "EphemeralStorage": {"Size": options.ephemeral_mb},
            "Environment": {"Variables": env},
        }

    def _call(self, what: str, method: str, **kwargs: Any) -> Any:
        try:
            return getattr(self.client, method)(**kwargs)
        except (ClientError, BotoCoreError) as exc:
            raise aws_error(what, exc) from exc

    def _find(self, what: str, method: str, **kwargs: Any) -> Any:
        """``_call``, or None when the object does not exist."""
        try:
            return self._call(what, method, **kwargs)
        except PlatformNotFound:
            return None

    def _wait(self, what: str, waiter: str, **kwargs: Any) -> None:
        try:
            self.client.get_waiter(waiter).wait(**kwargs)
        except (ClientError, BotoCoreError) as exc:
            raise aws_error(what, exc) from exc

    def _function(self, name: str) -> dict[str, Any] | None:
        found: dict[str, Any] | None = self._find(f"reading function {name}", "get_function",
                                                  FunctionName=name)
        return found

    def _alias(self, function: str, name: str) -> dict[str, Any] | None:
        found: dict[str, Any] | None = self._find(f"reading alias {function}:{name}",
                                                  "get_alias", FunctionName=function, Name=name)
        return found

    @staticmethod
    def _same(current: Mapping[str, Any], image: str, config: Mapping[str, Any]) -> bool:
        env = current.get("Environment", {}).get("Variables", {})
        return bool(
            current.get("ImageUri", image) == image
            and current.get("MemorySize") == config["MemorySize"]
            and current.get("Timeout") == config["Timeout"]
            and env == config["Environment"]["Variables"]
        )

    def _version_config(self, function: str, version: str) -> dict[str, Any]:
        found: dict[str, Any] = self._call(
            f"reading {function}:{version}", "get_function_configuration",
            FunctionName=function, Qualifier=version)
        image = self._call(f"reading {function}:{version}", "get_function",
                           FunctionName=function, Qualifier=version)
        found["ImageUri"] = image.get("Code", {}).get("ImageUri")
        return found

    def apply(self, deployment: Deployment, options: LambdaOptions) -> LambdaResult:
        name = check_function_name(deployment.model)
        check_split(name, deployment.traffic)
        config = self._config(deployment, options)
        changed = False
        versions: dict[int, str] = {}
        for version in deployment.traffic:  # read before anything changes
            if version == deployment.version:
                continue
            other = self._alias(name, alias(version))
            if other is None:
                raise DeployError(f"version {version} of '{name}' is not deployed to Lambda, so "
                                  "it cannot take part in the split")
            versions[version] = str(other["FunctionVersion"])
        pinned = self._alias(name, alias(deployment.version))
        if pinned is not None and self._same(
                self._version_config(name, pinned["FunctionVersion"]), deployment.image, config):
            published = str(pinned["FunctionVersion"])
        else:
            self._put_function(name, deployment.image, config)
            out = self._call(f"publishing {name}", "publish_version", FunctionName=name,
                             Description=f"modelfn {name}:{deployment.version}")
            published = str(out["Version"])
            self._wait(f"publishing {name}:{published}", "published_version_active",
                       FunctionName=name, Qualifier=published)
            changed = True
        versions[deployment.version] = published
        changed |= self._put_alias(name, alias(deployment.version), published, None)
        changed |= self._put_alias(name, LIVE, *self._routing(deployment.traffic, versions))
        if options.warm is not None:
            changed |= self.warm(name, options.warm)
        urls = {}
        for qualifier in (alias(deployment.version), LIVE):
            url, url_changed = self._url(name, qualifier, options.auth)
            urls[qualifier] = url
            changed |= url_changed
        return LambdaResult(name, versions, urls, changed)

    def recording(self) -> tuple[LambdaTarget, CallRecorder]:
        """A target that reads this one's platform and records its changes (``--dry-run``)."""
        recorder = CallRecorder(self.client, _recorded_answer)
        return LambdaTarget(recorder), recorder

    def calls(self, deployment: Deployment, options: LambdaOptions) -> list[dict[str, Any]]:
        """The changing calls ``apply`` would make now (reading the current state)."""
        target, recorder = self.recording()
        target.apply(deployment, options)
        return recorder.calls

    def function_state(self, function: str) -> dict[str, Any] | None:
        """``$LATEST``'s configuration (``State``, ``LastUpdateStatus``, reasons), or None."""
        found = self._function(function)
        return None if found is None else dict(found.get("Configuration", {}))

    def published(self, function: str, versions: Iterable[int]) -> dict[int, str]:
        """The Lambda version each model version's alias points at."""
        found = {}
        for version in versions:
            pinned = self._alias(function, alias(version))
            if pinned is None:
                raise DeployError(f"version {version} of '{function}' is not deployed to "
                                  f"Lambda (no alias {alias(version)})")
            found[version] = str(pinned["FunctionVersion"])
        return found

    def served_split(self, function: str) -> ServedSplit | None:
        """The split the ``live`` alias serves (its version and ``RoutingConfig``), in model
        versions through their ``v<N>`` aliases; None when there is no ``live``."""
        live = self._alias(function, LIVE)
        if live is None:
            return None
        aliases: list[dict[str, Any]] = []
        marker: dict[str, str] = {}
        while True:
            page = self._call(f"listing the aliases of {function}", "list_aliases",
                              FunctionName=function, **marker)
            aliases += page.get("Aliases", [])
            if not page.get("NextMarker"):
                break
            marker = {"Marker": page["NextMarker"]}
        model_version = {str(a["FunctionVersion"]): int(m.group(1)) for a in aliases
                         if (m := VERSION_ALIAS.fullmatch(str(a.get("Name", ""))))}
        weights = (live.get("RoutingConfig") or {}).get("AdditionalVersionWeights") or {}
        shares = {str(v): round(float(w) * 100) for v, w in weights.items()}
        primary = str(live["FunctionVersion"])
        shares[primary] = shares.get(primary, 0) + 100 - sum(shares.values())
        versions: dict[int, int] = {}
        others: dict[str, int] = {}
        for published, percent in shares.items():
            if published in model_version:
                version = model_version[published]
                versions[version] = versions.get(version, 0) + percent
            else:
                others[f"{function}:{published}"] = percent
        return ServedSplit(versions, f"alias {function}:{LIVE}", others)

    def set_split(self, function: str, split: Mapping[int, int]) -> bool:
        """Point the ``live`` alias at a new split; False when it already was."""
        check_split(function, split)
        versions = self.published(function, [v for v, p in split.items() if p > 0])
        return self._put_alias(function, LIVE, *self._routing(split, versions))

    def warm(self, function: str, instances: int) -> bool:
        """Provisioned concurrency on ``live``: ``instances`` environments kept initialised
        (0 removes it). False when it already was so."""
        current = self._find(f"reading the provisioned concurrency of {function}:{LIVE}",
                             "get_provisioned_concurrency_config", FunctionName=function,
                             Qualifier=LIVE)
        have = 0 if current is None else int(
            current.get("RequestedProvisionedConcurrentExecutions", 0))
        if have == instances:
            return False
        if instances == 0:
            self._call(f"removing the provisioned concurrency of {function}:{LIVE}",
                       "delete_provisioned_concurrency_config", FunctionName=function,
                       Qualifier=LIVE)
        else:
            self._call(f"provisioning {instances} environments for {function}:{LIVE}",
                       "put_provisioned_concurrency_config", FunctionName=function,
                       Qualifier=LIVE, ProvisionedConcurrentExecutions=instances)
        return True

    def remove_version(self, function: str, version: int) -> bool:
        """Delete a model version's URL, alias and published version; False when it had
        none. The caller has moved its traffic away first."""
        pinned = self._alias(function, alias(version))
        if pinned is None:
            return False
        self._find(f"deleting the URL of {function}:{alias(version)}",
                   "delete_function_url_config", FunctionName=function,
                   Qualifier=alias(version))
        self._call(f"deleting alias {function}:{alias(version)}", "delete_alias",
                   FunctionName=function, Name=alias(version))
        published = str(pinned["FunctionVersion"])
        live = self._alias(function, LIVE)
        in_live = live is not None and (str(live["FunctionVersion"]) == published or published
                                        in (live.get("RoutingConfig", {})
                                            .get("AdditionalVersionWeights") or {}))
        if not in_live:
            self._call(f"deleting {function}:{published}", "delete_function",
                       FunctionName=function, Qualifier=published)
        return True

    def delete(self, function: str) -> bool:
        """Delete the function with its versions, aliases and URLs; False when none."""
        if self._function(function) is None:
            return False
        self._call(f"deleting function {function}", "delete_function", FunctionName=function)
        return True

    def _put_function(self, name: str, image: str, config: dict[str, Any]) -> None:
        current = self._function(name)
        if current is None:
            self._call(f"creating function {name}", "create_function", FunctionName=name,
                       PackageType="Image", Code={"ImageUri": image}, Publish=False, **config)
            self._wait(f"creating function {name}", "function_active_v2", FunctionName=name)
            return
        latest = {**current["Configuration"], "ImageUri": current.get("Code", {}).get("ImageUri")}
        if latest.get("ImageUri") != image:
            self._call(f"updating the image of {name}", "update_function_code",
                       FunctionName=name, ImageUri=image)
            self._wait(f"updating the image of {name}", "function_updated_v2",
                       FunctionName=name)
        if not self._same({**latest, "ImageUri": image}, image, config):
            self._call(f"updating the configuration of {name}", "update_function_configuration",
                       FunctionName=name, **config)
            self._wait(f"updating the configuration of {name}", "function_updated_v2",
                       FunctionName=name)

    @staticmethod
    def _routing(split: Mapping[int, int], versions: Mapping[int, str]
                 ) -> tuple[str, dict[str, float] | None]:
        """(primary Lambda version, additional weights) for a model-version split."""
        serving = sorted(((p, v) for v, p in split.items() if p > 0), reverse=True)
        if len(serving) > MAX_SPLIT:
            raise DeployError(f"a Lambda alias splits traffic between {MAX_SPLIT} versions at "
                              f"most, not {len(serving)}: {dict(split)}")
        primary = versions[serving[0][1]]
        if len(serving) == 1:
            return primary, None
        percent, version = serving[1]
        return primary, {versions[version]: round(percent / 100, 4)}

    def _put_alias(self, function: str, name: str, version: str,
                   weights: dict[str, float] | None) -> bool:
        routing = {"AdditionalVersionWeights": weights or {}}
        current = self._alias(function, name)
        if current is None:
            self._call(f"creating alias {function}:{name}", "create_alias", FunctionName=function,
                       Name=name, FunctionVersion=version, RoutingConfig=routing)
            return True
        had = current.get("RoutingConfig", {}).get("AdditionalVersionWeights", {}) or {}
        if str(current["FunctionVersion"]) == version and had == (weights or {}):
            return False
        self._call(f"updating alias {function}:{name}", "update_alias", FunctionName=function,
                   Name=name, FunctionVersion=version, RoutingConfig=routing)
        return True

    def _url(self, function: str, qualifier: str, auth: str) -> tuple[str, bool]:
        auth_type = AUTH_TYPES[auth]
        changed = False
        found = self._find(f"reading the URL of {function}:{qualifier}",
                           "get_function_url_config", FunctionName=function, Qualifier=qualifier)
        if found is None:
            found = self._call(f"creating the URL of {function}:{qualifier}",
                               "create_function_url_config", FunctionName=function,
                               Qualifier=qualifier, AuthType=auth_type, InvokeMode="BUFFERED")
            changed = True
        if found["AuthType"] != auth_type:
            found = self._call(f"updating the URL of {function}:{qualifier}",
                               "update_function_url_config", FunctionName=function,
                               Qualifier=qualifier, AuthType=auth_type)
            changed = True
        if auth_type == AUTH_TYPES["none"]:
            changed |= self._public(function, qualifier)
        return str(found["FunctionUrl"]).rstrip("/"), changed  # paths are joined onto it

    def _public(self, function: str, qualifier: str) -> bool:
        """The two statements a NONE function URL needs; already there is not a change."""
        statements = (
            ("modelfn-url", {"Action": "lambda:InvokeFunctionUrl",
                             "FunctionUrlAuthType": "NONE"}),
            ("modelfn-invoke", {"Action": "lambda:InvokeFunction",
                                "InvokedViaFunctionUrl": True}),
        )
        found = self._find(f"reading the policy of {function}:{qualifier}", "get_policy",
                           FunctionName=function, Qualifier=qualifier)
        policy = json.loads(found["Policy"]) if found is not None else {}
        present = {statement.get("Sid") for statement in policy.get("Statement", [])}
        added = False
        for sid, extra in statements:
            if f"{sid}-{qualifier}" in present:
                continue
            try:
                self._call(f"allowing public calls to {function}:{qualifier}",
                           "add_permission", FunctionName=function, Qualifier=qualifier,
                           StatementId=f"{sid}-{qualifier}", Principal="*", **extra)
                added = True
            except Conflict:  # the statement is there already
                pass
        return added
