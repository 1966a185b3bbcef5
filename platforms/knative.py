"""Knative Serving's names and defaults: the API group, annotations and cluster defaults.

Values are Knative's own (``config-autoscaler``, ``config-defaults`` and
``config-deployment`` in the ``knative-serving`` namespace); a local platform that
starts from the same defaults behaves like a cluster nobody has tuned.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

GROUP = "serving.knative.dev"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "Service"
PLURAL = "services"
SHORT_NAMES = ("kservice", "ksvc")

#: annotations read from ``spec.template.metadata.annotations``
AUTOSCALING = "autoscaling.knative.dev"
CLASS = f"{AUTOSCALING}/class"
METRIC = f"{AUTOSCALING}/metric"
TARGET = f"{AUTOSCALING}/target"
TARGET_UTILIZATION = f"{AUTOSCALING}/target-utilization-percentage"
MIN_SCALE = f"{AUTOSCALING}/min-scale"
MAX_SCALE = f"{AUTOSCALING}/max-scale"
INITIAL_SCALE = f"{AUTOSCALING}/initial-scale"
SCALE_DOWN_DELAY = f"{AUTOSCALING}/scale-down-delay"
RETENTION = f"{AUTOSCALING}/scale-to-zero-pod-retention-period"
WINDOW = f"{AUTOSCALING}/window"
TARGET_BURST_CAPACITY = f"{AUTOSCALING}/target-burst-capacity"
PANIC_WINDOW_PERCENTAGE = f"{AUTOSCALING}/panic-window-percentage"
PANIC_THRESHOLD_PERCENTAGE = f"{AUTOSCALING}/panic-threshold-percentage"
PROGRESS_DEADLINE = f"{GROUP}/progress-deadline"
#: Cloud Run spells min/max scale in camel case; Knative accepts both
MIN_SCALE_CAMEL = f"{AUTOSCALING}/minScale"
MAX_SCALE_CAMEL = f"{AUTOSCALING}/maxScale"

#: labels Knative puts on revisions
SERVICE_LABEL = f"{GROUP}/service"
CONFIGURATION_LABEL = f"{GROUP}/configuration"

#: environment a container gets from Knative (reserved: a template may not set them)
RESERVED_ENV = ("PORT", "K_SERVICE", "K_CONFIGURATION", "K_REVISION")
DEFAULT_PORT = 8080
#: seconds a server drains in-flight requests after SIGTERM: inside the 30 s a pod gets
#: before SIGKILL (``terminationGracePeriodSeconds``' default)
DRAIN_SECONDS = 25

#: RFC 1035 label: Service and revision names, and each label of a tag's host
#: (``<tag>-<service>`` by Knative's default domain template)
DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS_1035_MAX = 63


@dataclass(frozen=True)
class Defaults:
    """Cluster-wide defaults, as a fresh Knative install has them."""

    container_concurrency: int = 0  # 0 = unlimited
    container_concurrency_max_limit: int = 1000
    container_concurrency_target_default: float = 100.0
    container_concurrency_target_percentage: float = 70.0
    target_burst_capacity: float = 200.0
    initial_scale: int = 1
    min_scale: int = 0
    max_scale: int = 0  # 0 = unlimited
    stable_window_s: float = 60.0
    scale_to_zero_grace_period_s: float = 30.0
    scale_to_zero_pod_retention_s: float = 0.0
    revision_timeout_s: int = 300
    max_revision_timeout_s: int = 600
    progress_deadline_s: float = 600.0


DEFAULTS = Defaults()

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s)")
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def parse_duration(text: str) -> float:
    """A Go duration as Knative's annotations spell it (``"90s"``, ``"1m30s"``, ``"500ms"``)."""
    value = text.strip()
    pos, total = 0, 0.0
    for match in _DURATION.finditer(value):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_S[match.group(2)]
        pos = match.end()
    if pos != len(value) or not value:
        raise ValueError(f"{text!r} is not a duration (like 30s, 1m30s, 500ms)")
    return total


def revision_name(service: str, generation: int) -> str:
    """The name Knative gives a revision whose template does not name it: ``<svc>-00001``."""
    return f"{service}-{generation:05d}"
