"""Fixtures for the local Knative API: the REST server on loopback and real clients of it."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from knative_support import kube_client
from kubernetes import client

from modelfn.localstack.knative import ApiServer, ServiceStore

if TYPE_CHECKING:
    from collections.abc import Iterator

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


@pytest.fixture
def store() -> ServiceStore:
    return ServiceStore()


@pytest.fixture
def server(store: ServiceStore) -> Iterator[ApiServer]:
    api = ApiServer(store).start()
    try:
        yield api
    finally:
        api.stop()


@pytest.fixture
def kubeconfig(server: ApiServer, tmp_path: Path) -> Path:
    path = tmp_path / "kubeconfig"
    server.write_kubeconfig(path)
    return path


@pytest.fixture
def custom(kubeconfig: Path) -> Iterator[client.CustomObjectsApi]:
    with kube_client(kubeconfig) as api_client:
        yield client.CustomObjectsApi(api_client)


@pytest.fixture(scope="session")
def digits_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model repository holding a copy of examples/models/digits."""
    root = tmp_path_factory.mktemp("repo")
    shutil.copytree(EXAMPLES / "models" / "digits", root / "digits")
    return root
