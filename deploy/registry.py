"""Where ``deploy --registry`` pushes the image it builds, and with which credentials.

A registry is ``host[:port][/namespace]``; the image goes to
``<registry>/modelfn/<model>:<version>-<target>`` and is deployed by the digest the push
reports. ``ecr`` means the account's Amazon ECR registry: the repository is created when
missing (scan on push, immutable tags are left to the user), and the push authenticates
with a token from ``ecr:GetAuthorizationToken``, written to a private Docker-format auth
file that podman, buildah and docker all read, so no credential reaches a command line or
the user's own login state.
"""

from __future__ import annotations

import base64
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from modelfn.deploy.aws_errors import aws_error
from modelfn.deploy.errors import DeployError

ECR = "ecr"
REPOSITORY_PREFIX = "modelfn"
AUTH_FILE = "config.json"  # docker --config DIR reads DIR/config.json


@dataclass(frozen=True)
class Registry:
    host: str  # host[:port][/namespace], what images are tagged under
    auth_file: Path | None = None  # Docker-format credentials for the push, if any


def repository_name(model: str) -> str:
    return f"{REPOSITORY_PREFIX}/{model}"


def write_auth_file(directory: Path, host: str, username: str, password: str) -> Path:
    """A ``config.json`` with one registry's credentials, readable by its owner only."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = directory / AUTH_FILE
    token = base64.b64encode(f"{username}:{password}".encode()).decode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump({"auths": {host: {"auth": token}}}, out)
    return path


def ecr_registry(ecr: Any, model: str, directory: Path | None = None) -> Registry:
    """The account's ECR registry, with ``modelfn/<model>`` created if missing and a push
    token in an auth file under ``directory`` (a new private temporary one by default)."""
    def call(what: str, method: str, **kwargs: Any) -> Any:
        try:
            return getattr(ecr, method)(**kwargs)
        except (ClientError, BotoCoreError) as exc:
            raise aws_error(what, exc) from exc

    name = repository_name(model)
    try:
        ecr.describe_repositories(repositoryNames=[name])
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "RepositoryNotFoundException":
            raise aws_error(f"reading ECR repository {name}", exc) from exc
        call(f"creating ECR repository {name}", "create_repository", repositoryName=name,
             imageScanningConfiguration={"scanOnPush": True})
    except BotoCoreError as exc:
        raise aws_error(f"reading ECR repository {name}", exc) from exc
    data = call("getting an ECR push token", "get_authorization_token")["authorizationData"]
    if not data:
        raise DeployError("ECR gave no authorization data for this account")
    username, _, password = base64.b64decode(data[0]["authorizationToken"]).decode().partition(":")
    host = str(data[0]["proxyEndpoint"]).removeprefix("https://").removeprefix("http://")
    where = directory or Path(tempfile.mkdtemp(prefix="modelfn-ecr-"))
    return Registry(host.rstrip("/"), write_auth_file(where, host.rstrip("/"), username,
                                                        password))
