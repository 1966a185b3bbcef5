"""What the server says about itself, the same over REST (``GET /v2``) and gRPC."""

from __future__ import annotations

import functools
import os

#: what ``GET /v2`` and gRPC ``ServerMetadata`` call the server, unless
#: ``MODELFN_SERVER_NAME`` (``modelfn serve --server-name``) says otherwise
NAME = "modelfn"


def server_name() -> str:
    """The server's name in its metadata: ``MODELFN_SERVER_NAME``, else "modelfn". Some
    clients insist on a name (Triton's health and metadata examples exit unless it is
    "triton"); only the metadata answers change with it."""
    return os.environ.get("MODELFN_SERVER_NAME") or NAME
EXTENSIONS = [
    "binary_tensor_data",
    "classification",
    "model_configuration",
    "model_repository",
    "schedule_policy",
    "statistics",
    "parameters",
]


@functools.cache
def modelfn_version() -> str:
    # importlib.metadata is slow to import (bench/RESULTS.md): only pay it when asked
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("modelfn")
    except PackageNotFoundError:  # running from a source tree
        return "0+unknown"
