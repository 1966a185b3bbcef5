"""A handler that misbehaves on request: crash the process, overrun, answer too much.

The request is the event, or the JSON body of a function URL event."""

from __future__ import annotations

import json
import os
import time
from typing import Any


def handler(event: dict[str, Any], context: Any) -> Any:
    if "requestContext" in event:
        event = json.loads(event["body"])
    action = event.get("do")
    if action == "crash":
        print("about to crash", flush=True)
        os._exit(3)
    if action == "sleep":
        time.sleep(event["seconds"])
    if action == "big":
        return "x" * event["size"]
    return {"pid": os.getpid()}
