"""One exception hierarchy for all of modelfn.

Every error carries the HTTP status it maps to (Triton's mapping: 400 invalid,
404 unknown, 503 unavailable, 500 internal). The V2 app renders any of them as
``{"error": message}`` with that status, and the CLI maps them to exit codes.
Subclasses take domain arguments and build the message themselves.
"""

from __future__ import annotations


class ModelfnError(Exception):
    """Base of every error modelfn raises on purpose."""

    status_code: int = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidInput(ModelfnError):
    """The request is malformed: bad JSON, wrong name, dtype, shape or size."""

    status_code = 400


class ConfigError(ModelfnError):
    """A model configuration is wrong or names a field modelfn does not support."""

    status_code = 400

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None) -> None:
        where = path or ""
        if line is not None:
            where = f"{where}:{line}" if where else f"line {line}"
        super().__init__(f"{where}: {message}" if where else message)
        self.path = path
        self.line = line


class ModelNotFound(ModelfnError):
    status_code = 404

    def __init__(self, name: str, version: str | int | None = None) -> None:
        if version is None or version == "":
            super().__init__(f"Request for unknown model: '{name}' is not found")
        else:
            super().__init__(
                f"Request for unknown model: '{name}' version {version} is not found"
            )
        self.name = name
        self.version = version


class ModelNotReady(ModelfnError):
    status_code = 503

    def __init__(self, name: str, version: str | int | None = None, reason: str = "") -> None:
        target = f"'{name}'" if version in (None, "") else f"'{name}' version {version}"
        tail = f": {reason}" if reason else ""
        super().__init__(f"Model {target} is not ready{tail}")


class QueueFull(ModelfnError):
    status_code = 503

    def __init__(self) -> None:
        super().__init__("Exceeds maximum queue size")


class RequestTimeout(ModelfnError):
    """A request waited out its queue timeout (its own ``timeout`` or the model's queue
    policy): Triton's status and words, which a gateway reads as final, not as cold."""

    status_code = 503
    MESSAGE = "Request timeout expired"

    def __init__(self) -> None:
        super().__init__(self.MESSAGE)


class PayloadTooLarge(ModelfnError):
    status_code = 413

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"Request body of {size} bytes exceeds the limit of {limit} bytes")
        self.size, self.limit = size, limit


class JsonTooLarge(ModelfnError):
    status_code = 413

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            f"The JSON part of the request ({size} bytes) exceeds the limit of {limit} bytes; "
            "send large tensors as binary data (Triton's binary tensor extension)")


class ResponseTooLarge(ModelfnError):
    """An answer larger than the server may send (gRPC's max send message length); gRPC
    reports it as RESOURCE_EXHAUSTED."""

    status_code = 500

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"The response of {size} bytes exceeds the server's limit of {limit} "
                         "bytes per message; ask for fewer rows or outputs, or raise the limit")
        self.size, self.limit = size, limit


class Unsupported(ModelfnError):
    status_code = 501


class BackendError(ModelfnError):
    """The model itself failed while running; the message is the backend's."""

    status_code = 500


class StepFailed(ModelfnError):
    """A step of an ensemble failed, so its request did: the message names the ensemble,
    the step and its model; the status is the step's own (400 for a tensor the model
    refuses, 503 for a full queue or a timeout, 500 for a model that failed)."""

    def __init__(self, step: str, cause: Exception) -> None:
        detail = cause.message if isinstance(cause, ModelfnError) else (
            str(cause) or type(cause).__name__)
        super().__init__(f"{step}: {detail}")
        self.status_code = cause.status_code if isinstance(cause, ModelfnError) else 500


class StoreError(ModelfnError):
    """The model store failed: unreachable, access denied, corrupt object."""

    status_code = 500


class NoModelServes(ModelfnError):
    """Every model a start was to serve failed to load: a function serving nothing must not
    look healthy to its platform. The status is the failures' own when they share one."""

    def __init__(self, failures: list[tuple[str, ModelfnError]]) -> None:
        if len(failures) == 1:
            what, error = failures[0]
            message = f"{what} failed to load: {error.message}"
        else:
            message = "no model can serve; " + "; ".join(
                f"{what} failed to load: {error.message}" for what, error in failures)
        super().__init__(message)
        codes = {error.status_code for _, error in failures}
        self.status_code = codes.pop() if len(codes) == 1 else 500
        self.failures = failures
