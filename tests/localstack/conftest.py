"""Fixtures for the local Lambda: the platform on loopback, an IAM role, function code."""

from __future__ import annotations

import io
import uuid
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from modelfn.localstack.lambda_platform import LocalLambda

if TYPE_CHECKING:
    from collections.abc import Iterator

HANDLERS = Path(__file__).parent / "handlers"
#: how long an environment may idle here before it is reaped (short, for the reaping test)
IDLE_S = 2.0


@pytest.fixture(scope="module")
def aws() -> Iterator[LocalLambda]:
    with LocalLambda(idle_s=IDLE_S) as platform:
        yield platform


@pytest.fixture(scope="module")
def lam(aws: LocalLambda) -> Any:
    return aws.client("lambda")


@pytest.fixture(scope="module")
def role(aws: LocalLambda) -> str:
    iam = aws.client("iam")
    name = f"lambda-{uuid.uuid4().hex[:8]}"
    return str(iam.create_role(RoleName=name, AssumeRolePolicyDocument="{}")["Role"]["Arn"])


@pytest.fixture(scope="module")
def echo_zip() -> bytes:
    """tests/localstack/handlers/echo.py as a Zip function's code."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.write(HANDLERS / "echo.py", "echo.py")
    return buffer.getvalue()

