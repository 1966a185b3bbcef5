"""AWS errors as the ``DeployError`` a user can act on: botocore's codes, read once here,
for every step of a Lambda deploy and for the ECR registry lookup."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError, NoCredentialsError, WaiterError

from modelfn.deploy.errors import (
    Conflict,
    DeployError,
    Forbidden,
    ImageMissing,
    InvalidObject,
    PlatformNotFound,
    QuotaExceeded,
    RoleMissing,
    Unauthorised,
)


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


_UNAUTHORISED = frozenset({"UnrecognizedClientException", "InvalidClientTokenId",
                           "ExpiredTokenException", "ExpiredToken", "InvalidSignatureException",
                           "MissingAuthenticationTokenException", "IncompleteSignature"})
_QUOTA = frozenset({"TooManyRequestsException", "CodeStorageExceededException",
                    "ServiceQuotaExceededException", "ThrottlingException",
                    "LimitExceededException", "ResourceLimitExceededException"})
_NOT_FOUND = frozenset({"ResourceNotFoundException",
                        "ProvisionedConcurrencyConfigNotFoundException"})


def aws_error(what: str, exc: Exception) -> DeployError:
    """A botocore error as the ``DeployError`` a user can act on; ``what`` names the step."""
    if not isinstance(exc, ClientError):
        if isinstance(exc, NoCredentialsError):
            return Unauthorised(f"{what} failed: no AWS credentials were found (set "
                                "AWS_PROFILE or AWS_ACCESS_KEY_ID, or run aws configure)")
        if isinstance(exc, WaiterError):
            last: dict[str, Any] = dict(exc.last_response or {})
            reason = last.get("Configuration", last)
            detail = reason.get("StateReason") or reason.get("LastUpdateStatusReason") or exc
            return DeployError(f"{what} failed: {detail}")
        return DeployError(f"{what} failed: {exc}")
    code = _code(exc)
    message = str(exc.response.get("Error", {}).get("Message", "")) or str(exc)
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    text = f"{what} failed: {code}: {message}"
    if code in _UNAUTHORISED:
        return Unauthorised(f"{text} (check the AWS credentials: aws sts get-caller-identity)")
    if code == "AccessDeniedException" or code == "AccessDenied" or status == 403:
        return Forbidden(text)
    if code in _QUOTA:
        return QuotaExceeded(text)
    if code in _NOT_FOUND:
        return PlatformNotFound(text)
    if code == "ResourceConflictException":
        return Conflict(text)
    if code in ("InvalidParameterValueException", "ValidationException"):
        lowered = message.lower()
        if "role" in lowered:
            return RoleMissing(f"{text} (--role must name an existing role that "
                               "lambda.amazonaws.com may assume)")
        if "image" in lowered:
            return ImageMissing(f"{text} (push the image first: modelfn build --push)")
        return InvalidObject(text)
    return DeployError(text)
