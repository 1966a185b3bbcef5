"""Echo handlers: ``handler`` returns the event and what the runtime told the function;
``mirror`` answers a function URL request with its own body, method and a cookie."""

from __future__ import annotations

import os
from typing import Any

_ENV = (
    "AWS_LAMBDA_FUNCTION_NAME",
    "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
    "AWS_LAMBDA_FUNCTION_VERSION",
    "AWS_REGION",
    "LAMBDA_TASK_ROOT",
    "_HANDLER",
    "MODELFN_TEST_VALUE",
)


def handler(event: Any, context: Any) -> dict[str, Any]:
    client_context = context.client_context
    return {
        "event": event,
        "pid": os.getpid(),
        "cwd": os.getcwd(),
        "request_id": context.aws_request_id,
        "function_arn": context.invoked_function_arn,
        "remaining_ms": context.get_remaining_time_in_millis(),
        "custom": None if client_context is None else client_context.custom,
        "trace_id": os.environ.get("_X_AMZN_TRACE_ID"),
        "env": {name: os.environ.get(name) for name in _ENV},
    }


def mirror(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return {
        "statusCode": 201,
        "headers": {
            "Content-Type": event["headers"].get("content-type", "application/octet-stream"),
            "X-Method": event["requestContext"]["http"]["method"],
            "X-Base64": str(event["isBase64Encoded"]).lower(),
        },
        "cookies": ["seen=1; Path=/", "flavour=oat; Max-Age=60"],
        "body": event.get("body", ""),
        "isBase64Encoded": event["isBase64Encoded"],
    }
