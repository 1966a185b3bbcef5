"""Cloud Run's limits where they are not Knative's.

Cloud Run runs a Knative Service's YAML (``gcloud run services replace``) but checks it
against its own limits: a request may take up to 60 minutes (Knative's default cluster
allows 10), and a GPU instance has one NVIDIA L4, which needs at least 4 CPU and 16 GiB
of memory (https://cloud.google.com/run/docs/configuring/services/gpu).

A Cloud Run service (or any remote cluster) fetches the model store itself: a store behind
a loopback endpoint (the local platform's emulated S3) is one it cannot reach, and the
same ``s3://`` URI there names some real bucket instead. ``check_store_reachable`` refuses
to render one.
"""

from __future__ import annotations

import ipaddress
from dataclasses import replace
from urllib.parse import urlsplit

from modelfn.platforms import knative as kn
from modelfn.runtime.errors import InvalidInput

MAX_TIMEOUT_S = 3600
#: what Cloud Run admits of a template, in the terms Knative's admission checks
DEFAULTS = replace(kn.DEFAULTS, max_revision_timeout_s=MAX_TIMEOUT_S)

GPU_ACCELERATOR = "nvidia-l4"
MAX_GPUS = 1
GPU_MIN_CPU = "4"
GPU_MIN_MEMORY = "16Gi"


class UnreachableStore(InvalidInput):
    """A deploy to a remote platform of a model whose store only this machine reaches."""

    def __init__(self, store: str, endpoint_url: str, platform: str) -> None:
        super().__init__(
            f"the model store {store} is at {endpoint_url}, on this machine (the local "
            f"platform's emulated endpoint): {platform} cannot reach it; give --store of a "
            f"real bucket (and --endpoint-url only if {platform} can reach it)")


def is_loopback(url: str) -> bool:
    """Whether ``url``'s host is this machine (127.0.0.0/8, ::1, localhost)."""
    host = (urlsplit(url if "://" in url else f"//{url}").hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_store_reachable(store: str | None, endpoint_url: str | None,
                          platform: str = "a Cloud Run service") -> None:
    """``UnreachableStore`` when functions on ``platform`` would fetch an S3 ``store``
    (None: the model is baked into the image) from a loopback ``endpoint_url``."""
    if (store is not None and urlsplit(store).scheme == "s3" and endpoint_url
            and is_loopback(endpoint_url)):
        raise UnreachableStore(store, endpoint_url, platform)
