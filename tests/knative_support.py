"""Helpers for the local Knative API's tests (tests/localstack/knative)."""

from __future__ import annotations

import base64
import os
import shutil
import ssl
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client, config

from modelfn.platforms import knative as kn

G, V, P = kn.GROUP, kn.VERSION, kn.PLURAL
NS = "default"
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def service(name: str, image: str = "modelfn-digits:test", **spec: Any) -> dict[str, Any]:
    """A minimal Knative Service; ``spec`` adds to (or replaces) its spec."""
    body: dict[str, Any] = {
        "apiVersion": kn.API_VERSION, "kind": kn.KIND, "metadata": {"name": name},
        "spec": {"template": {"spec": {"containers": [{"image": image}]}}}}
    body["spec"].update(spec)
    return body


def kube_client(kubeconfig: Path) -> client.ApiClient:
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    return client.ApiClient(configuration)


KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed "
                                   "(Debian's kubernetes-client; scripts/ci-containers.sh)")


def kubectl(kubeconfig: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """The real kubectl against ``kubeconfig``; its exit must be 0 unless ``check`` is off."""
    assert KUBECTL is not None
    done = subprocess.run([KUBECTL, *args], env={**os.environ, "KUBECONFIG": str(kubeconfig)},
                          capture_output=True, text=True, timeout=60, check=False)
    if check:
        assert done.returncode == 0, done.stderr
    return done


def token_of(kubeconfig: Path) -> str:
    """The bearer token the kubeconfig's user carries."""
    config = yaml.safe_load(kubeconfig.read_text())
    return str(config["users"][0]["user"]["token"])


def raw_client(kubeconfig: Path) -> httpx.Client:
    """A plain HTTP client of the API the kubeconfig names, trusting its certificate and
    sending its token."""
    cluster = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]
    trust = ssl.create_default_context(
        cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
    return httpx.Client(base_url=cluster["server"], timeout=10, verify=trust,
                        headers={"authorization": f"Bearer {token_of(kubeconfig)}"})
