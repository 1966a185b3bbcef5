"""API errors as a Kubernetes API server answers them: ``Status`` objects with causes.

Every error the local Knative API raises is an ``ApiError`` carrying its HTTP code and
Kubernetes ``reason``, and the ``Cause`` of each field refused
(``platforms.knative_schema``); ``status()`` renders the ``Status`` object clients parse
(``kubectl`` prints its ``message``; the ``kubernetes`` client raises ``ApiException``
with it as the body).
"""

from __future__ import annotations

from typing import Any

from modelfn.platforms.knative import GROUP, KIND, PLURAL
from modelfn.platforms.knative_schema import Cause, invalid_message
from modelfn.runtime.errors import ModelfnError

RESOURCE = f"{PLURAL}.{GROUP}"


class ApiError(ModelfnError):
    """An error the API answers with a ``Status``; subclasses fix ``status_code``/``reason``."""

    status_code = 500
    reason = "InternalError"
    #: ``details.kind``: the API server names the resource ("services") for most errors
    #: and the Kind ("Service") for a 422 Invalid, which ``kubectl`` prints as
    #: ``The Service "x" is invalid``
    details_kind = PLURAL

    def __init__(self, message: str, *, name: str = "", causes: tuple[Cause, ...] = ()) -> None:
        super().__init__(message)
        self.name = name
        self.causes = causes

    def status(self) -> dict[str, Any]:
        details: dict[str, Any] = {"group": GROUP, "kind": self.details_kind}
        if self.name:
            details["name"] = self.name
        if self.causes:
            details["causes"] = [c.render() for c in self.causes]
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": self.message, "reason": self.reason, "details": details,
                "code": self.status_code}


class MalformedRequest(ApiError):
    status_code = 400
    reason = "BadRequest"


class NotFound(ApiError):
    status_code = 404
    reason = "NotFound"

    def __init__(self, name: str) -> None:
        super().__init__(f'{RESOURCE} "{name}" not found', name=name)


class AlreadyExists(ApiError):
    status_code = 409
    reason = "AlreadyExists"

    def __init__(self, name: str) -> None:
        super().__init__(f'{RESOURCE} "{name}" already exists', name=name)


class ObjectModified(ApiError):
    status_code = 409
    reason = "Conflict"

    def __init__(self, name: str) -> None:
        super().__init__(
            f'Operation cannot be fulfilled on {RESOURCE} "{name}": the object has been '
            "modified; please apply your changes to the latest version and try again",
            name=name)


class PreconditionFailed(ApiError):
    """A delete whose ``preconditions`` (uid, resourceVersion) the object does not meet."""

    status_code = 409
    reason = "Conflict"

    def __init__(self, name: str, field: str, wanted: str, have: str) -> None:
        super().__init__(f"Precondition failed: {field} in precondition: {wanted}, {field} "
                         f"in object meta: {have}", name=name)


class Gone(ApiError):
    status_code = 410
    reason = "Expired"


class TooLargeResourceVersion(ApiError):
    """A watch from a resourceVersion this server has not reached (the API server waits a
    moment for its cache, then answers this)."""

    status_code = 504
    reason = "Timeout"

    def __init__(self, wanted: int, current: int) -> None:
        message = f"Too large resource version: {wanted}, current: {current}"
        super().__init__(message, causes=(Cause("", message, "ResourceVersionTooLarge"),))


class Unauthenticated(ApiError):
    status_code = 401
    reason = "Unauthorized"


class RequestForbidden(ApiError):
    status_code = 403
    reason = "Forbidden"


class RequestEntityTooLarge(ApiError):
    status_code = 413
    reason = "RequestEntityTooLarge"


class UnsupportedMediaType(ApiError):
    status_code = 415
    reason = "UnsupportedMediaType"


class MethodNotAllowed(ApiError):
    status_code = 405
    reason = "MethodNotAllowed"


class Invalid(ApiError):
    """The object breaks the CRD's schema or Knative's webhook rules: 422 naming each field."""

    status_code = 422
    reason = "Invalid"
    details_kind = KIND

    def __init__(self, name: str, causes: tuple[Cause, ...]) -> None:
        super().__init__(invalid_message(name, causes), name=name, causes=causes)


class PathNotFound(ApiError):
    """A path the API server does not serve."""

    status_code = 404
    reason = "NotFound"

    def __init__(self, path: str) -> None:
        super().__init__(f"the server could not find the requested resource ({path})")
