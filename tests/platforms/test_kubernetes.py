"""Kubernetes quantities, as deploy checks options and the local platform reads limits."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from modelfn.platforms.kubernetes import cpu_cores, memory_bytes
from modelfn.runtime.errors import InvalidInput

if TYPE_CHECKING:
    from collections.abc import Callable


@pytest.mark.parametrize(("quantity", "cores"), [("2", 2.0), ("500m", 0.5), ("1.5", 1.5)])
def test_cpu_quantities(quantity: str, cores: float) -> None:
    assert cpu_cores(quantity) == cores


@pytest.mark.parametrize(("quantity", "size"), [
    ("2Gi", 2 * 2**30), ("512Mi", 512 * 2**20), ("1G", 10**9), ("1000", 1000)])
def test_memory_quantities(quantity: str, size: int) -> None:
    assert memory_bytes(quantity) == size


@pytest.mark.parametrize(("read", "quantity", "message"), [
    (cpu_cores, "two", "CPU 'two' is not a quantity like 1, 2.5 or 500m"),
    (cpu_cores, "0", "CPU '0' is not a quantity"),
    (memory_bytes, "2GB", "memory '2GB' is not a quantity like 512Mi, 2Gi or 1G"),
])
def test_a_quantity_kubernetes_refuses_is_invalid_input(
    read: Callable[[str], float], quantity: str, message: str
) -> None:
    with pytest.raises(InvalidInput, match=message):
        read(quantity)
