"""gRPC (h2c) through the local serving plane's route URLs, with the real
`tritonclient.grpc`: each call is routed by the split (not each connection), a tag URL
pins its revision, a revision at zero holds the call until it is ready, a gRPC call to a
revision that serves REST is refused with the reason (and the instance keeps serving
REST), and a URL that is not a route answers an HTTP/2 preface with 505. Real instances
(`python -m modelfn.handlers.http`, MODELFN_PROTOCOL=grpc); nothing is mocked."""

from __future__ import annotations

import socket
from collections import Counter
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from serving_support import NS, spec, wait_for, wait_settled
from tritonclient.utils import InferenceServerException

from modelfn.localstack.plane import RevisionState, RouteSpec, TrafficTarget
from modelfn.localstack.serving import LocalServingPlane
from modelfn.localstack.serving.http import H2_PREFACE

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

ROWS = np.random.default_rng(3).random((2, 64), dtype=np.float32)
CALLS = 60  # at 50/50, one revision answering all of them has odds 2 ** -59


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[LocalServingPlane]:
    with LocalServingPlane(idle_s=1.0, log_dir=tmp_path) as p:
        yield p


def grpc_spec(name: str, repo: Path, **overrides: Any) -> Any:
    return spec(name, repo, env={"MODELFN_PROTOCOL": "grpc"}, readiness_path=None,
                **overrides)


def infer(address: str) -> str:
    client = grpcclient.InferenceServerClient(address)
    try:
        tensor = grpcclient.InferInput("input", list(ROWS.shape), "FP32")
        tensor.set_data_from_numpy(ROWS)
        result = client.infer("digits", [tensor])
        assert result.as_numpy("probabilities").shape == (2, 10)
        return str(result.get_response().model_version)
    finally:
        client.close()


def address(url: str) -> str:
    return url.removeprefix("http://")


def test_calls_follow_the_split_one_by_one_and_tags_pin(
        plane: LocalServingPlane, repos: dict[int, Path]) -> None:
    plane.ensure_revision(grpc_spec("digits-00001", repos[1], min_scale=1))
    plane.ensure_revision(grpc_spec("digits-00002", repos[2], min_scale=1))
    urls = plane.set_route(RouteSpec(NS, "digits", (
        TrafficTarget("digits-00001", 50, "one"), TrafficTarget("digits-00002", 50, "two"))))
    for name in ("digits-00001", "digits-00002"):
        assert wait_settled(plane, name) is RevisionState.READY
    client = grpcclient.InferenceServerClient(address(urls.url))  # one channel for all
    tensor = grpcclient.InferInput("input", list(ROWS.shape), "FP32")
    tensor.set_data_from_numpy(ROWS)
    seen = Counter(str(client.infer("digits", [tensor]).get_response().model_version)
                   for _ in range(CALLS))
    client.close()
    assert set(seen) == {"1", "2"}, seen
    assert {infer(address(urls.tags["two"])) for _ in range(5)} == {"2"}


def test_a_call_to_a_revision_at_zero_is_held_and_answered(
        plane: LocalServingPlane, repos: dict[int, Path]) -> None:
    plane.ensure_revision(grpc_spec("digits-00001", repos[1]))
    urls = plane.set_route(RouteSpec(NS, "digits", (TrafficTarget("digits-00001", 100),)))
    assert wait_settled(plane, "digits-00001") is RevisionState.READY
    wait_for(lambda: plane.revision_status(NS, "digits-00001").instances == 0, "scale to zero")
    assert infer(address(urls.url)) == "1"
    assert plane.revision_status(NS, "digits-00001").cold_starts >= 2
    assert plane.hold_times(NS, "digits-00001")  # the call was held, then answered


def test_grpc_to_a_rest_revision_is_refused_and_rest_keeps_working(
        plane: LocalServingPlane, repos: dict[int, Path], digits_request: dict[str, Any]
) -> None:
    plane.ensure_revision(spec("digits-00001", repos[1], min_scale=1))
    urls = plane.set_route(RouteSpec(NS, "digits", (TrafficTarget("digits-00001", 100),)))
    assert wait_settled(plane, "digits-00001") is RevisionState.READY
    with pytest.raises(InferenceServerException) as refused:
        infer(address(urls.url))
    assert refused.value.status() == "StatusCode.UNIMPLEMENTED"
    assert "answered in HTTP/1.x, not gRPC" in str(refused.value.message())
    answer = httpx.post(urls.url + "/v2/models/digits/infer", json=digits_request, timeout=30)
    assert answer.status_code == 200
    assert plane.revision_status(NS, "digits-00001").instances == 1  # nothing was evicted


def test_a_url_that_is_not_a_route_answers_http2_with_505(plane: LocalServingPlane) -> None:
    host, port = address(plane.status_url).split(":")
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(H2_PREFACE)
        answer = conn.recv(4096)
    assert answer.startswith(b"HTTP/1.1 505 ")
    assert httpx.get(plane.status_url, timeout=10).status_code == 200  # and keeps serving


def test_a_route_removed_under_an_open_grpc_connection_logs_no_traceback(
        plane: LocalServingPlane, repos: dict[int, Path], caplog: pytest.LogCaptureFixture
) -> None:
    """A call, its channel kept open, then the route goes (``undeploy``): the spliced
    connection ends with no error logged (it was a cancelled callback's traceback)."""
    plane.ensure_revision(grpc_spec("digits-00001", repos[1], min_scale=1))
    urls = plane.set_route(RouteSpec(NS, "digits", (TrafficTarget("digits-00001", 100),)))
    assert wait_settled(plane, "digits-00001") is RevisionState.READY
    client = grpcclient.InferenceServerClient(address(urls.url))
    try:
        tensor = grpcclient.InferInput("input", list(ROWS.shape), "FP32")
        tensor.set_data_from_numpy(ROWS)
        assert client.infer("digits", [tensor]).as_numpy("probabilities").shape == (2, 10)
        with caplog.at_level("WARNING"):
            plane.remove_route(NS, "digits")
            plane.remove_revision(NS, "digits-00001")
    finally:
        client.close()
    errors = [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL") or r.exc_info]
    assert not errors, [r.getMessage() for r in errors]
