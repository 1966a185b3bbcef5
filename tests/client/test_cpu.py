"""The client-bound verdict on given numbers: no timing on this machine."""

from __future__ import annotations

import pytest

from modelfn.client.cpu import (
    CLIENT_BOUND_SHARE,
    CpuClock,
    client_bound,
    client_warning,
    cpu_share,
)


@pytest.mark.parametrize(
    ("share", "bound"),
    [(None, False), (0.0, False), (0.5, False), (0.89, False), (0.9, True), (0.99, True),
     (1.02, True)],
)
def test_client_bound_from_its_share_of_a_core(share: float | None, bound: bool) -> None:
    assert CLIENT_BOUND_SHARE == 0.9
    assert client_bound(share) is bound


def test_threshold_can_be_given() -> None:
    assert client_bound(0.6, threshold=0.5)
    assert not client_bound(0.4, threshold=0.5)


def test_cpu_share_is_cpu_over_wall_per_core() -> None:
    assert cpu_share(9.5, 10.0) == pytest.approx(0.95)
    assert cpu_share(3.0, 2.0, cores=2) == pytest.approx(0.75)
    assert cpu_share(1.0, 0.0) is None
    assert cpu_share(1.0, 1.0, cores=0) is None


def test_warning_only_for_a_bound_client() -> None:
    assert client_warning(8, 0.4) is None
    assert client_warning(8, None) is None
    message = client_warning(32, 0.97)
    assert message is not None
    assert message.startswith("c=32: the load generator used 97% of its CPU core")
    assert "lower bound" in message


def test_clock_reports_a_share_after_stop() -> None:
    clock = CpuClock()
    assert clock.share is None
    clock.start()
    share = clock.stop()
    assert share is None or share >= 0.0  # an empty window has no share
    assert clock.share == share
