"""What the gateway says it is: its V2 server metadata, the same over REST and gRPC."""

from __future__ import annotations

from typing import Any

from modelfn.protocol.server_metadata import modelfn_version

NAME = "modelfn-gateway"
#: the V2 extensions a request through the gateway gets: the functions answer them, the
#: gateway passes them on (server-wide statistics and model control are not among them)
EXTENSIONS = ("binary_tensor_data", "classification", "model_configuration")


def server_metadata() -> dict[str, Any]:
    return {"name": NAME, "version": modelfn_version(), "extensions": list(EXTENSIONS)}
