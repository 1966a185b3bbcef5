"""``deploy --registry``: the account's ECR (moto's, at the local platform's AWS endpoint)
gives a repository and a push token; the token reaches the builders as a private
Docker-format auth file, never a command line. The push itself with that file runs for
real in tests/deploy/test_image.py."""

from __future__ import annotations

import base64
import json
import stat
from typing import TYPE_CHECKING

import pytest

from modelfn.deploy.builders import BUILDERS
from modelfn.deploy.registry import ecr_registry, repository_name, write_auth_file
from modelfn.platforms.podman import Storage

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from modelfn.localstack.lambda_platform import LocalLambda


@pytest.fixture(scope="module")
def aws() -> Iterator[LocalLambda]:
    from modelfn.localstack.lambda_platform import LocalLambda

    with LocalLambda(idle_s=60) as platform:
        yield platform


def test_ecr_repository_is_created_once_and_the_token_lands_in_a_private_file(
    aws: LocalLambda, tmp_path: Path
) -> None:
    ecr = aws.client("ecr")
    first = ecr_registry(ecr, "digits", tmp_path / "a")  # creates modelfn/digits
    second = ecr_registry(ecr, "digits", tmp_path / "b")  # finds it
    repos = ecr.describe_repositories()["repositories"]
    assert [r["repositoryName"] for r in repos].count(repository_name("digits")) == 1
    assert first.host == second.host and ".dkr.ecr." in first.host
    assert first.auth_file is not None
    assert stat.S_IMODE(first.auth_file.stat().st_mode) == 0o600
    auth = json.loads(first.auth_file.read_text())["auths"][first.host]["auth"]
    user, _, password = base64.b64decode(auth).decode().partition(":")
    assert user == "AWS" and password


def test_every_builder_pushes_with_the_auth_file(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    auth = write_auth_file(tmp_path / "a", "r.example:5000", "AWS", "secret")
    storage = Storage()
    for name in ("podman", "buildah"):
        command = BUILDERS[name].push("r.example:5000/m:1", storage, True, tmp_path / "d",
                                      auth)
        assert command[command.index("--authfile") + 1] == str(auth)
        assert "secret" not in " ".join(command)
    docker = BUILDERS["docker"].push("r.example:5000/m:1", storage, True, tmp_path / "d", auth)
    assert docker[:3] == ["docker", "--config", str(auth.parent)]
    assert auth.name == "config.json"
