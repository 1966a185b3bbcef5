"""The body limits of the function a request goes to, enforced by the gateway first.

The gateway refuses what the function would refuse, before reading it: a body whose
``Content-Length`` is over the limit gets a 413 at once, and one streamed past it a 413 as
soon as it is. An infer request is held to the function's own two limits (the runtime's):
its JSON (the whole body, or the binary extension's JSON header) to the JSON limit, the
rest to the body limit. A Lambda function takes at most Lambda's invocation payload (6 MB),
whatever the gateway's own limit. So a body the function would refuse never reaches the
gateway's batching (nor its JSON decoding helper).

The gateway's own batch for a Lambda function is one invocation whose binary body the
function URL carries base64-encoded in its event: ``invocation_fits`` says whether it
stays within the payload limit, so a batch over it is split.
"""

from __future__ import annotations

from dataclasses import dataclass

from modelfn.platforms.aws_lambda import PAYLOAD_BYTES as LAMBDA_PAYLOAD_BYTES
from modelfn.protocol.body_limits import BodyLimits
from modelfn.protocol.rest import DEFAULT_MAX_JSON_BYTES
from modelfn.runtime.errors import ModelfnError


class InvocationTooLarge(ModelfnError):
    """Rows that cannot be split further make an invocation over Lambda's payload limit."""

    status_code = 413

    def __init__(self, size: int) -> None:
        super().__init__(f"a batch request of {size} bytes (one request's rows) is over "
                         f"Lambda's invocation payload limit of {LAMBDA_PAYLOAD_BYTES} bytes "
                         "once base64-encoded in the function URL's event; send fewer rows "
                         "per request")

#: the gateway's own body limit unless told otherwise (the runtime's)
DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
#: what a function URL's event holds besides the body: headers, context, ids (a margin)
EVENT_OVERHEAD_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class FunctionLimits(BodyLimits):
    """The function's own ``BodyLimits``, and whether it is a Lambda function."""

    on_lambda: bool = False

    @classmethod
    def of_function(cls, max_body_bytes: int, *, on_lambda: bool = False) -> FunctionLimits:
        """The limits of a function behind a gateway that takes ``max_body_bytes``."""
        body = min(max_body_bytes, LAMBDA_PAYLOAD_BYTES) if on_lambda else max_body_bytes
        return cls(body, min(DEFAULT_MAX_JSON_BYTES, body), on_lambda)

    def invocation_fits(self, size: int) -> bool:
        """Whether a binary request body of ``size`` bytes fits one invocation."""
        if not self.on_lambda:
            return True  # the function takes what the gateway took from its callers
        return 4 * ((size + 2) // 3) + EVENT_OVERHEAD_BYTES <= LAMBDA_PAYLOAD_BYTES
