"""AWS Lambda's vocabulary: its names, limits and what one execution environment takes.

What deploy renders and checks before calling Lambda, and what the gateway needs to
route to a function URL, spelt once: a function name, the aliases modelfn names, the
split an alias can hold, memory, timeout and storage bounds, the synchronous payload
limit and the function URL auth types.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from modelfn.runtime.errors import InvalidInput

if TYPE_CHECKING:
    from collections.abc import Mapping

#: one execution environment runs one invocation at a time: a function instance's
#: concurrency, as the routing table records it (the gateway batches for it)
CONCURRENCY = 1
#: the synchronous invocation payload limit (the event, request and response), bytes
PAYLOAD_BYTES = 6 * 1024 * 1024
#: function URL auth types: SigV4-signed (``iam``) or public (``none``)
AUTH_TYPES = {"iam": "AWS_IAM", "none": "NONE"}
#: the alias that holds the split, behind the unpinned function URL
LIVE = "live"
#: the alias of a model version: v<version>
VERSION_ALIAS = re.compile(r"v([1-9][0-9]*)")
#: what Lambda takes as a function name (the model's): letters, digits, - and _, 64 at most
FUNCTION_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
FUNCTION_NAME_MAX = 64
#: versions a Lambda alias splits traffic between at most
MAX_SPLIT = 2
#: Lambda's own bounds (MB, s)
MEMORY_MB = (128, 10_240)
TIMEOUT_S = (1, 900)
EPHEMERAL_MB = (512, 10_240)
DEFAULT_MEMORY_MB = 2048
DEFAULT_EPHEMERAL_MB = 1024


def alias(version: int) -> str:
    """The alias of a model version (``v2``), which has its pinned function URL."""
    return f"v{version}"


def check_function_name(model: str) -> str:
    """``model`` if Lambda takes it as a function name, else ``InvalidInput`` saying why."""
    if FUNCTION_NAME.fullmatch(model):
        return model
    if len(model) > FUNCTION_NAME_MAX:
        why = f"is {len(model)} characters, over Lambda's {FUNCTION_NAME_MAX}"
    else:
        bad = sorted({c for c in model if not re.fullmatch(r"[A-Za-z0-9_-]", c)})
        why = f"has {', '.join(repr(c) for c in bad)}: Lambda takes letters, digits, - and _"
    raise InvalidInput(f"model '{model}' cannot be a Lambda function name: it {why}. Push "
                       "the model under a name Lambda takes (modelfn push DIR --name NAME) "
                       "and deploy that")


def check_split(model: str, split: Mapping[int, int]) -> None:
    """``InvalidInput`` when ``split`` gives traffic to more versions than a Lambda alias
    can split between (two)."""
    serving = {v: p for v, p in sorted(split.items()) if p > 0}
    if len(serving) <= MAX_SPLIT:
        return
    shown = " ".join(f"{v}={p}" for v, p in serving.items())
    keep = sorted(serving, key=lambda v: (serving[v], v))[-1]
    raise InvalidInput(
        f"a Lambda alias splits traffic between {MAX_SPLIT} versions at most, and this "
        f"deploy would split '{model}' between {len(serving)}: {shown}. Move the traffic to "
        f"one version first (e.g. modelfn traffic {model} {keep}=100), then "
        "deploy the canary")
