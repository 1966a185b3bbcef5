"""Errors of image builds and deploys, in modelfn's one hierarchy (status code included)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from modelfn.runtime.errors import ModelfnError

if TYPE_CHECKING:
    from collections.abc import Sequence


class BuildError(ModelfnError):
    """An image build or push failed; carries the command and the tail of its output."""

    status_code = 500

    def __init__(
        self,
        message: str,
        *,
        command: Sequence[str] = (),
        returncode: int | None = None,
        output_tail: Sequence[str] = (),
    ) -> None:
        text = message
        if returncode is not None:
            text += f" (exit status {returncode})"
        if output_tail:
            text += "\n" + "\n".join(output_tail)
        super().__init__(text)
        self.command = list(command)
        self.returncode = returncode
        self.output_tail = list(output_tail)


class DeployError(ModelfnError):
    """A platform refused or failed a deploy step; the message names the step."""

    status_code = 500


class Unauthorised(DeployError):
    """The platform did not accept the credentials (none, expired, or not valid)."""

    status_code = 401


class Forbidden(DeployError):
    """The credentials are valid but may not do this."""

    status_code = 403


class PlatformNotFound(DeployError):
    """The platform has no such object (a function, a Service, a namespace)."""

    status_code = 404


class Conflict(DeployError):
    """The object changed underneath, or an operation on it is still in progress."""

    status_code = 409


class InvalidObject(DeployError):
    """The platform refused the object as invalid; the message names the field."""

    status_code = 400


class QuotaExceeded(DeployError):
    """An account or namespace quota, or the platform's rate limit, was hit."""

    status_code = 429


class ImageMissing(DeployError):
    """The function's image is not in the registry (or the platform cannot pull it)."""

    status_code = 404


class RoleMissing(DeployError):
    """The Lambda execution role does not exist or Lambda cannot assume it."""

    status_code = 400
