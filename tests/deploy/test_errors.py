"""Platform errors as the ``DeployError`` a user can act on, with its exit code.

The AWS answers are botocore ``ClientError``s built from the error shapes Lambda documents
(there is no AWS account here); the Kubernetes ones are the statuses an API server sends.
The errors the local platform can really produce are tested end to end in
tests/cli/test_deploy.py."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError, NoCredentialsError

from modelfn.cli.errors import EXIT_CODES, MissingExtra, require
from modelfn.deploy import errors
from modelfn.deploy.aws_errors import aws_error
from modelfn.deploy.knative_target import knative_error


def client_error(code: str, message: str, status: int = 400) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message},
                        "ResponseMetadata": {"HTTPStatusCode": status}}, "CreateFunction")


@pytest.mark.parametrize(("code", "message", "status", "kind", "exit_code"), [
    ("UnrecognizedClientException", "The security token included in the request is invalid.",
     403, errors.Unauthorised, 6),
    ("ExpiredTokenException", "The security token included in the request is expired", 403,
     errors.Unauthorised, 6),
    ("AccessDeniedException", "User: arn:aws:iam::1:user/u is not authorized to perform: "
     "lambda:CreateFunction", 403, errors.Forbidden, 7),
    ("ResourceNotFoundException", "Function not found: arn:aws:lambda:us-east-1:1:function:x",
     404, errors.PlatformNotFound, 3),
    ("InvalidParameterValueException", "The role defined for the function cannot be assumed "
     "by Lambda.", 400, errors.RoleMissing, 2),
    ("InvalidParameterValueException", "Source image 1.dkr.ecr.us-east-1.amazonaws.com/x:1 "
     "does not exist. Provide a valid source image.", 400, errors.ImageMissing, 3),
    ("InvalidParameterValueException", "MemorySize must be between 128 and 10240", 400,
     errors.InvalidObject, 2),
    ("CodeStorageExceededException", "Code storage limit exceeded.", 400,
     errors.QuotaExceeded, 8),
    ("TooManyRequestsException", "Rate exceeded", 429, errors.QuotaExceeded, 8),
    ("ResourceConflictException", "The operation cannot be performed at this time. An update "
     "is in progress", 409, errors.Conflict, 4),
])
def test_aws_errors(code: str, message: str, status: int, kind: type[errors.DeployError],
                       exit_code: int) -> None:
    error = aws_error("creating function digits", client_error(code, message, status))
    assert type(error) is kind
    assert error.message.startswith(f"creating function digits failed: {code}: {message}")
    assert EXIT_CODES[error.status_code] == exit_code


def test_no_credentials_is_unauthorised_and_says_where_they_come_from() -> None:
    error = aws_error("creating function digits", NoCredentialsError())
    assert isinstance(error, errors.Unauthorised)
    assert "AWS_ACCESS_KEY_ID" in error.message


@pytest.mark.parametrize(("status", "message", "kind"), [
    (401, "Unauthorized", errors.Unauthorised),
    (403, 'services.serving.knative.dev is forbidden: User "dev" cannot create resource',
     errors.Forbidden),
    (403, 'services.serving.knative.dev "digits" is forbidden: exceeded quota: compute',
     errors.QuotaExceeded),
    (404, 'namespaces "ml" not found', errors.PlatformNotFound),
    (409, "the object has been modified; please apply your changes to the latest version",
     errors.Conflict),
    (422, 'Service.serving.knative.dev "digits" is invalid: spec.traffic: Invalid value',
     errors.InvalidObject),
    (500, "etcdserver: request timed out", errors.DeployError),
])
def test_knative_errors(status: int, message: str, kind: type[errors.DeployError]) -> None:
    error = knative_error(status, "creating service ml/digits", message)
    assert type(error) is kind
    assert message in error.message


def test_a_missing_extra_is_one_line_naming_it() -> None:
    require("deploy --target knative", "knative", "json")  # present: nothing happens
    with pytest.raises(MissingExtra) as caught:
        require("deploy --target knative", "knative", "json", "no_such_module_x")
    assert caught.value.message == ("deploy --target knative needs no_such_module_x: install "
                                    "the knative extra, pip install 'modelfn[knative]'")
