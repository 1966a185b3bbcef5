"""What the gateway says it is: its V2 server metadata, the same over REST and gRPC."""

from __future__ import annotations

from typing import Any

from modelfn.protocol.server_metadata import modelfn_version

NAME = "modelfn-gateway"
#: the V2 extensions a request through the gateway gets, as the function's ``GET /v2`` names
#: them: binary tensors, classification, parameters and the schedule policy (``timeout``) are
#: answered by the functions or by the gateway's own batching, which reads them;
#: ``statistics`` (``GET /v2/models/stats`` merges every routed version's) and
#: ``model_repository`` (``POST /v2/repository/index`` lists the routed versions) are the
#: gateway's own; model control is not served, as on the functions
EXTENSIONS = ("binary_tensor_data", "classification", "model_configuration",
              "model_repository", "schedule_policy", "statistics", "parameters")


def server_metadata() -> dict[str, Any]:
    return {"name": NAME, "version": modelfn_version(), "extensions": list(EXTENSIONS)}
