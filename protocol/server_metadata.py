"""What the server says about itself, the same over REST (``GET /v2``) and gRPC."""

from __future__ import annotations

import functools

NAME = "modelfn"
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
