"""The local platform's serving plane: functions that scale to zero behind loopback URLs.

Knative's data plane, by role: the ingress (``server``: routes, their URLs, the pick of a
revision), and per revision the ``activator``, the ``breaker`` and the ``autoscaler``
over its instances (``instance``); ``revision`` holds a revision's parts together.
"""

from __future__ import annotations

from modelfn.localstack.serving.activator import HoldTimeout, RevisionUnavailable
from modelfn.localstack.serving.breaker import BreakerFull
from modelfn.localstack.serving.server import LocalServingPlane, RevisionNotFound

__all__ = ["BreakerFull", "HoldTimeout", "LocalServingPlane", "RevisionNotFound",
           "RevisionUnavailable"]
