"""Cloud Run's limits where they are not Knative's.

Cloud Run runs a Knative Service's YAML (``gcloud run services replace``) but checks it
against its own limits: a request may take up to 60 minutes (Knative's default cluster
allows 10), and a GPU instance has one NVIDIA L4, which needs at least 4 CPU and 16 GiB
of memory (https://cloud.google.com/run/docs/configuring/services/gpu).
"""

from __future__ import annotations

from dataclasses import replace

from modelfn.platforms import knative as kn

MAX_TIMEOUT_S = 3600
#: what Cloud Run admits of a template, in the terms Knative's admission checks
DEFAULTS = replace(kn.DEFAULTS, max_revision_timeout_s=MAX_TIMEOUT_S)

GPU_ACCELERATOR = "nvidia-l4"
MAX_GPUS = 1
GPU_MIN_CPU = "4"
GPU_MIN_MEMORY = "16Gi"
