"""Fixtures for the gateway suite: two digits functions (versions 1 and 2) and a gateway."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from functions import Function, GatewayProcess, digits_repository, digits_routes, start_gateway

from modelfn.model_store.routes import RouteSource
from modelfn.process.supervisor import free_port

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


@pytest.fixture(scope="module")
def functions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[int, Function]]:
    root = tmp_path_factory.mktemp("functions")
    started = {v: Function(digits_repository(root, v), free_port()).start() for v in (1, 2)}
    try:
        for function in started.values():
            function.wait_ready()
        yield started
    finally:
        for function in started.values():
            function.stop()


@pytest.fixture
def routes_dir(tmp_path: Path) -> Path:
    return tmp_path / "routes"


@pytest.fixture
def gateway(functions: dict[int, Function], routes_dir: Path) -> Iterator[GatewayProcess]:
    RouteSource(directory=routes_dir).write(digits_routes(functions, {1: 70, 2: 30}))
    gw = start_gateway(routes_dir)
    try:
        yield gw
    finally:
        gw.process.stop()
