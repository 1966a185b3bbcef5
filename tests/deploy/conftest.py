"""Cleanup of the state podman and buildah keep outside --root."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

#: state podman and buildah write outside --root/--runroot
GLOBAL_STATE = ("/var/lib/containers/cache", "/etc/containers/networks", "/run/containers",
                "/run/libpod")


@pytest.fixture(scope="module")
def container_global_state() -> Iterator[None]:
    """Removes what of ``GLOBAL_STATE`` the module's podman and buildah runs created."""
    created = [Path(p) for p in GLOBAL_STATE if not Path(p).exists()]
    try:
        yield
    finally:
        for path in created:
            shutil.rmtree(path, ignore_errors=True)
