"""The local platform's cap on instances running at once, with real digits instances.

A revision that finds no place starts nothing: with no instance it is ``InstanceLimit``
naming the cap, a request to it is held and then answered 503 naming the cap, and it
starts once a place frees. A min-scale above the cap starts only what the cap allows.
(There was no platform-wide cap: every revision started what it asked for.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import httpx
from serving_support import NS, spec, wait_for, wait_settled

from modelfn.localstack.plane import RevisionState, RouteSpec, TrafficTarget
from modelfn.localstack.serving import LocalServingPlane

if TYPE_CHECKING:
    from pathlib import Path

INFER = "/v2/models/digits/infer"


def route(service: str, revision: str) -> RouteSpec:
    return RouteSpec(NS, service, (TrafficTarget(revision, 100),))


def test_a_revision_beyond_the_cap_says_so_answers_503_and_starts_when_a_place_frees(
        tmp_path: Path, repos: dict[int, Path], digits_request: dict[str, Any]) -> None:
    with LocalServingPlane(max_instances=1, queue_timeout_s=2.0, log_dir=tmp_path) as plane, \
            httpx.Client(timeout=60) as http:
        plane.ensure_revision(spec("a-00001", repos[1], service="a", min_scale=1))
        a = plane.set_route(route("a", "a-00001"))
        assert wait_settled(plane, "a-00001") is RevisionState.READY

        plane.ensure_revision(spec("b-00001", repos[2], service="b"))
        b = plane.set_route(route("b", "b-00001"))
        status = plane.revision_status(NS, "b-00001")
        assert (status.state, status.reason) == (RevisionState.FAILED, "InstanceLimit")
        assert "at most 1 instances" in status.message and status.instances == 0

        refused = http.post(b.url + INFER, json=digits_request)
        assert refused.status_code == 503, refused.text
        assert "at most 1 instances" in refused.json()["error"]
        assert http.post(a.url + INFER, json=digits_request).status_code == 200
        assert plane.revision_status(NS, "b-00001").cold_starts == 0

        plane.remove_revision(NS, "a-00001")  # its place frees: b starts
        wait_for(lambda: plane.revision_status(NS, "b-00001").state is RevisionState.READY,
                 "b to start once a place is free")
        answer = http.post(b.url + INFER, json=digits_request)
        assert answer.status_code == 200 and answer.json()["model_version"] == "2"


def test_a_min_scale_above_the_cap_starts_only_what_the_cap_allows(
        tmp_path: Path, repos: dict[int, Path]) -> None:
    with LocalServingPlane(max_instances=2, log_dir=tmp_path) as plane:
        plane.ensure_revision(spec("a-00001", repos[1], service="a", min_scale=2_000_000_000,
                                   initial_scale=2_000_000_000))
        assert wait_settled(plane, "a-00001") is RevisionState.READY
        wait_for(lambda: plane.revision_status(NS, "a-00001").ready_instances == 2,
                 "two instances")
        status = plane.revision_status(NS, "a-00001")
        assert status.instances == 2 and status.cold_starts == 2
