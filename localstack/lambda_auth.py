"""Who may call a function URL: SigV4 for ``AWS_IAM`` URLs, the resource policy for ``NONE``.

``AWS_IAM``: ``localstack/sigv4.py`` checks the caller's signature for service ``lambda``
(the body always covered: no unsigned payload), against the secret the platform knows for
the access key: the platform's own credentials, or an IAM user's key made at its endpoint.

``public_access_allowed`` evaluates a function's resource policy the way Lambda does
for a ``NONE`` URL: the caller is anonymous, so a statement must allow principal ``*``
``lambda:InvokeFunctionUrl`` with ``lambda:FunctionUrlAuthType`` = ``NONE``, and (since
October 2025) another must allow ``lambda:InvokeFunction`` when invoked via a function URL.
Lambda's ``AddPermission`` stores ``FunctionUrlAuthType`` and ``InvokedViaFunctionUrl``
as conditions; moto keeps them as the request's own keys. Both spellings are read.
A ``NONE`` URL with both permissions is public by design, as on AWS: anyone who can reach
its loopback port may call it.

Not emulated: identity-based IAM policies. Any key the platform knows may call any
``AWS_IAM`` URL, as an account administrator could.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from modelfn.localstack.sigv4 import check_sigv4

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping
    from datetime import datetime

    from modelfn.localstack.sigv4 import HttpRequest

SERVICE = "lambda"
_ALL_PRINCIPALS = ("*", {"AWS": "*"})


def verify_sigv4(request: HttpRequest, secret_for: Callable[[str], str | None], *,
                 region: str, now: datetime | None = None) -> bool:
    """True when ``request`` is validly signed for ``lambda`` in ``region``; raises
    ``SignatureRefused`` (with AWS's message for the fault) when it is not."""
    check_sigv4(request, secret_for, region=region, service=SERVICE, now=now)
    return True


def _condition(statement: Mapping[str, Any], operator: str, key: str) -> Any:
    block = statement.get("Condition") or {}
    values = block.get(operator) or {}
    for name, value in values.items():
        if name.lower() == key.lower():
            return value[0] if isinstance(value, list) and len(value) == 1 else value
    return None


def _allows(statement: Mapping[str, Any], action: str, resources: Iterable[str]) -> bool:
    if statement.get("Effect", "Allow") != "Allow":
        return False
    if statement.get("Principal") not in _ALL_PRINCIPALS:
        return False
    actions = statement.get("Action")
    if action not in (actions if isinstance(actions, list) else [actions]):
        return False
    return statement.get("Resource") in set(resources)


def public_access_allowed(
    statements: Iterable[Mapping[str, Any]], function_arn: str, qualifier: str | None
) -> bool:
    """Whether a ``NONE`` URL of ``function_arn[:qualifier]`` may be called by anyone."""
    resources = [function_arn] if qualifier is None else [f"{function_arn}:{qualifier}"]
    url_permission = invoke_permission = False
    for statement in statements:
        if _allows(statement, "lambda:InvokeFunctionUrl", resources):
            auth_type = statement.get("FunctionUrlAuthType") or _condition(
                statement, "StringEquals", "lambda:FunctionUrlAuthType"
            )
            url_permission |= auth_type == "NONE"
        if _allows(statement, "lambda:InvokeFunction", resources):
            via_url = statement.get("InvokedViaFunctionUrl")
            if via_url is None:
                via_url = _condition(statement, "Bool", "lambda:InvokedViaFunctionUrl")
            # without the condition the statement allows every invoke, URLs included
            invoke_permission |= via_url in (None, True, "true", "True")
    return url_permission and invoke_permission
