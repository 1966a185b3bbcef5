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

Deploying what already runs changes nothing: an alias already pointing at a published
version with the same image and configuration is kept as it is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from modelfn.deploy.errors import DeployError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from modelfn.deploy.deployment import Deployment

LIVE = "live"
#: Lambda's own bounds (MB, s)
MEMORY_MB = (128, 10_240)
TIMEOUT_S = (1, 900)
EPHEMERAL_MB = (512, 10_240)
DEFAULT_MEMORY_MB = 2048
DEFAULT_EPHEMERAL_MB = 1024


def alias(version: int) -> str:
    return f"v{version}"


@dataclass(frozen=True)
class LambdaOptions:
    role: str
    memory_mb: int = DEFAULT_MEMORY_MB
    ephemeral_mb: int = DEFAULT_EPHEMERAL_MB
    auth: str = "iam"  # iam | none
    env: Mapping[str, str] = field(default_factory=dict)  # beyond the function's own

    def __post_init__(self) -> None:
        for what, value, (low, high) in (("memory", self.memory_mb, MEMORY_MB),
                                         ("ephemeral storage", self.ephemeral_mb, EPHEMERAL_MB)):
            if not low <= value <= high:
                raise DeployError(f"Lambda {what} must be {low} to {high} MB, not {value}")
        if self.auth not in ("iam", "none"):
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


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


class LambdaTarget:
    """Applies deployments through an injected boto3 Lambda client."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def _config(self, deployment: Deployment, options: LambdaOptions) -> dict[str, Any]:
        timeout = deployment.scaling.timeout_s
        if not TIMEOUT_S[0] <= timeout <= TIMEOUT_S[1]:
            raise DeployError(f"Lambda timeout must be 1 to 900 s, not {timeout}")
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
        except ClientError as exc:
            raise DeployError(f"{what} failed: {_code(exc)}: "
                              f"{exc.response.get('Error', {}).get('Message', exc)}") from exc

    def _function(self, name: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = self.client.get_function(FunctionName=name)
        except ClientError as exc:
            if _code(exc) == "ResourceNotFoundException":
                return None
            raise DeployError(f"reading function {name} failed: {exc}") from exc
        return found

    def _alias(self, function: str, name: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = self.client.get_alias(FunctionName=function, Name=name)
        except ClientError as exc:
            if _code(exc) == "ResourceNotFoundException":
                return None
            raise DeployError(f"reading alias {function}:{name} failed: {exc}") from exc
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
        name = deployment.model
        config = self._config(deployment, options)
        changed = False
        pinned = self._alias(name, alias(deployment.version))
        if pinned is not None and self._same(
                self._version_config(name, pinned["FunctionVersion"]), deployment.image, config):
            published = str(pinned["FunctionVersion"])
        else:
            self._put_function(name, deployment.image, config)
            out = self._call(f"publishing {name}", "publish_version", FunctionName=name,
                             Description=f"modelfn {name}:{deployment.version}")
            published = str(out["Version"])
            self.client.get_waiter("published_version_active").wait(
                FunctionName=name, Qualifier=published)
            changed = True
        versions = {deployment.version: published}
        for version in deployment.traffic:
            if version == deployment.version:
                continue
            other = self._alias(name, alias(version))
            if other is None:
                raise DeployError(f"version {version} of '{name}' is not deployed to Lambda, so "
                                  "it cannot take part in the split")
            versions[version] = str(other["FunctionVersion"])
        changed |= self._put_alias(name, alias(deployment.version), published, None)
        changed |= self._put_alias(name, LIVE, *self._routing(deployment.traffic, versions))
        urls = {}
        for qualifier in (alias(deployment.version), LIVE):
            url, url_changed = self._url(name, qualifier, options.auth)
            urls[qualifier] = url
            changed |= url_changed
        return LambdaResult(name, versions, urls, changed)

    def _put_function(self, name: str, image: str, config: dict[str, Any]) -> None:
        current = self._function(name)
        if current is None:
            self._call(f"creating function {name}", "create_function", FunctionName=name,
                       PackageType="Image", Code={"ImageUri": image}, Publish=False, **config)
            self.client.get_waiter("function_active_v2").wait(FunctionName=name)
            return
        latest = {**current["Configuration"], "ImageUri": current.get("Code", {}).get("ImageUri")}
        if latest.get("ImageUri") != image:
            self._call(f"updating the image of {name}", "update_function_code",
                       FunctionName=name, ImageUri=image)
            self.client.get_waiter("function_updated_v2").wait(FunctionName=name)
        if not self._same({**latest, "ImageUri": image}, image, config):
            self._call(f"updating the configuration of {name}", "update_function_configuration",
                       FunctionName=name, **config)
            self.client.get_waiter("function_updated_v2").wait(FunctionName=name)

    @staticmethod
    def _routing(split: Mapping[int, int], versions: Mapping[int, str]
                 ) -> tuple[str, dict[str, float] | None]:
        """(primary Lambda version, additional weights) for a model-version split."""
        serving = sorted(((p, v) for v, p in split.items() if p > 0), reverse=True)
        if len(serving) > 2:
            raise DeployError("a Lambda alias splits traffic between two versions at most, not "
                              f"{len(serving)}: {dict(split)}")
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
        auth_type = "AWS_IAM" if auth == "iam" else "NONE"
        changed = False
        try:
            found = self.client.get_function_url_config(FunctionName=function,
                                                        Qualifier=qualifier)
        except ClientError as exc:
            if _code(exc) != "ResourceNotFoundException":
                raise DeployError(f"reading the URL of {function}:{qualifier} failed: {exc}") \
                    from exc
            found = self._call(f"creating the URL of {function}:{qualifier}",
                               "create_function_url_config", FunctionName=function,
                               Qualifier=qualifier, AuthType=auth_type, InvokeMode="BUFFERED")
            changed = True
        if found["AuthType"] != auth_type:
            found = self._call(f"updating the URL of {function}:{qualifier}",
                               "update_function_url_config", FunctionName=function,
                               Qualifier=qualifier, AuthType=auth_type)
            changed = True
        if auth_type == "NONE":
            changed |= self._public(function, qualifier)
        return str(found["FunctionUrl"]), changed

    def _public(self, function: str, qualifier: str) -> bool:
        """The two statements a NONE function URL needs; already there is not a change."""
        statements = (
            ("modelfn-url", {"Action": "lambda:InvokeFunctionUrl",
                             "FunctionUrlAuthType": "NONE"}),
            ("modelfn-invoke", {"Action": "lambda:InvokeFunction",
                                "InvokedViaFunctionUrl": True}),
        )
        try:
            policy = json.loads(self.client.get_policy(FunctionName=function,
                                                       Qualifier=qualifier)["Policy"])
            present = {statement.get("Sid") for statement in policy.get("Statement", [])}
        except ClientError as exc:
            if _code(exc) != "ResourceNotFoundException":
                raise DeployError(f"reading the policy of {function}:{qualifier} failed: "
                                  f"{exc}") from exc
            present = set()
        added = False
        for sid, extra in statements:
            if f"{sid}-{qualifier}" in present:
                continue
            try:
                self.client.add_permission(FunctionName=function, Qualifier=qualifier,
                                           StatementId=f"{sid}-{qualifier}", Principal="*",
                                           **extra)
                added = True
            except ClientError as exc:
                if _code(exc) != "ResourceConflictException":
                    raise DeployError(f"allowing public calls to {function}:{qualifier} "
                                      f"failed: {exc}") from exc
        return added
