"""The local platform's serving plane: functions that scale to zero behind loopback URLs."""

from __future__ import annotations

from modelfn.localstack.serving.revision import HoldTimeout, QueueFull, RevisionUnavailable
from modelfn.localstack.serving.server import LocalServingPlane, RevisionNotFound

__all__ = ["HoldTimeout", "LocalServingPlane", "QueueFull", "RevisionNotFound",
           "RevisionUnavailable"]
