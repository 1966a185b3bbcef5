"""The local Knative API: ``serving.knative.dev/v1`` Services, reconciled onto a serving plane.

Needs the ``local`` extra (``jsonschema``, and ``kubernetes`` for clients).
"""

from __future__ import annotations

from modelfn.localstack.knative.api import ApiServer, KnativeApi, write_kubeconfig
from modelfn.localstack.knative.errors import ApiError
from modelfn.localstack.knative.patches import json_patch, merge_patch
from modelfn.localstack.knative.platform import KnativePlatform
from modelfn.localstack.knative.reconciler import Reconciler
from modelfn.localstack.knative.schema import admit
from modelfn.localstack.knative.store import Event, ServiceStore
from modelfn.platforms.knative_schema import Cause, crd

__all__ = ["ApiError", "ApiServer", "Cause", "Event", "KnativeApi", "KnativePlatform",
           "Reconciler", "ServiceStore", "admit", "crd", "json_patch", "merge_patch",
           "write_kubeconfig"]
