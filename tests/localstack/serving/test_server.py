"""The local serving plane end to end: real digits instances, real clients on loopback URLs.

Every instance is a real ``python -m modelfn.handlers.http`` process; requests go through
the plane's route URLs with httpx and tritonclient. Nothing is mocked.
"""

from __future__ import annotations

import asyncio
import math
import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np
import pytest
import tritonclient.http as triton
from serving_support import NS, alive, spec, wait_for, wait_settled

from modelfn.localstack.plane import RevisionState, RouteSpec, TrafficTarget
from modelfn.localstack.s3 import S3Emulator
from modelfn.localstack.serving import LocalServingPlane

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

INFER = "/v2/models/digits/infer"


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[LocalServingPlane]:
    with LocalServingPlane(idle_s=1.0, log_dir=tmp_path) as p:
        yield p


def route(name: str, *targets: tuple[str, int, str | None]) -> RouteSpec:
    return RouteSpec(NS, name, tuple(TrafficTarget(r, p, t) for r, p, t in targets))


def model_version(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    return str(response.json()["model_version"])


def test_a_revision_from_the_store_becomes_ready_and_answers_v2_at_its_url(
        tmp_path: Path, repos: dict[int, Path]) -> None:
    with S3Emulator() as s3:
        s3.create_bucket("models")
        env = {"MODELFN_S3_ENDPOINT": s3.endpoint_url, "AWS_ACCESS_KEY_ID": "testing",
               "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
               "MODELFN_CACHE": str(tmp_path / "cache")}
        pushed = subprocess.run(
            [sys.executable, "-m", "modelfn.cli.main", "push", str(repos[1] / "digits"),
             "--store", "s3://models/prod"],
            env={**os.environ, **env}, capture_output=True, text=True, check=False)
        assert pushed.returncode == 0, pushed.stderr
        with LocalServingPlane(log_dir=tmp_path) as plane:
            changes: list[tuple[str, str]] = []
            plane.on_change(lambda ns, name: changes.append((ns, name)))
            plane.ensure_revision(spec("digits-00001", "", env={
                **env, "MODELFN_STORE": "s3://models/prod", "MODELFN_MODELS": "digits:1"}))
            urls = plane.set_route(route("digits", ("digits-00001", 100, None)))
            assert wait_settled(plane, "digits-00001") is RevisionState.READY
            wait_for(lambda: changes, "the change callback")
            assert changes[0] == (NS, "digits-00001")

            client = triton.InferenceServerClient(urls.url.removeprefix("http://"))
            try:
                assert client.is_model_ready("digits")
                pixels = np.array([[0.0] * 64, [1.0] * 64], dtype=np.float32)
                tensor = triton.InferInput("input", list(pixels.shape), "FP32")
                tensor.set_data_from_numpy(pixels, binary_data=True)
                result = client.infer("digits", [tensor])
                assert result.as_numpy("probabilities").shape == (2, 10)
            finally:
                client.close()
            status = plane.revision_status(NS, "digits-00001")
            assert status.requests >= 2 and status.cold_starts == 1

            document = httpx.get(plane.status_url).json()
            (revision,) = document["revisions"]
            assert revision["name"] == "digits-00001" and revision["state"] == "True"
            assert document["routes"][0]["url"] == urls.url


def test_scale_to_zero_then_the_first_request_is_held_and_answered(
        plane: LocalServingPlane, repos: dict[int, Path], digits_request: dict[str, Any],
        digits_labels: list[int]) -> None:
    plane.ensure_revision(spec("digits-00001", repos[1]))
    urls = plane.set_route(route("digits", ("digits-00001", 100, None)))
    assert wait_settled(plane, "digits-00001") is RevisionState.READY
    (first,) = plane.pids(NS, "digits-00001")
    assert alive(first)

    # min-scale 0: the instance that proved the revision goes after the idle window
    wait_for(lambda: plane.revision_status(NS, "digits-00001").instances == 0, "scale to zero")
    assert plane.pids(NS, "digits-00001") == []
    wait_for(lambda: not alive(first), f"pid {first} to be gone")

    response = httpx.post(urls.url + INFER, json=digits_request, timeout=60)
    assert response.status_code == 200, response.text
    label = next(o for o in response.json()["outputs"] if o["name"] == "label")
    assert label["data"] == digits_labels
    (hold,) = plane.hold_times(NS, "digits-00001")
    assert hold > 0
    status = plane.revision_status(NS, "digits-00001")
    assert status.cold_starts == 2 and status.ready_instances == 1
    assert httpx.get(plane.status_url).json()["revisions"][0]["holds_s"] == [hold]


async def _load(url: str, body: dict[str, Any], clients: int, stop: threading.Event,
                codes: Counter[int]) -> None:
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:
        async def worker() -> None:
            while not stop.is_set():
                codes[(await client.post(INFER, json=body)).status_code] += 1

        await asyncio.gather(*(worker() for _ in range(clients)))


def test_32_clients_scale_out_and_scale_down_drops_nothing(
        plane: LocalServingPlane, repos: dict[int, Path], digits_request: dict[str, Any]) -> None:
    plane.ensure_revision(spec("digits-00001", repos[1], container_concurrency=2, target=1,
                               max_scale=3))
    urls = plane.set_route(route("digits", ("digits-00001", 100, None)))
    assert wait_settled(plane, "digits-00001") is RevisionState.READY

    stop, codes = threading.Event(), Counter[int]()
    load = threading.Thread(target=asyncio.run,
                            args=(_load(urls.url, digits_request, 32, stop, codes),))
    load.start()
    try:
        busiest: list[int] = []

        def sample() -> dict[str, Any]:
            (revision,) = httpx.get(plane.status_url).json()["revisions"]
            busiest.append(max((i["in_flight"] for i in revision["instance_list"]), default=0))
            return revision  # type: ignore[no-any-return]

        wait_for(lambda: int(sample()["ready_instances"]) > 1,
                 "more than one ready instance under 32 clients")
        peak = plane.pids(NS, "digits-00001")
        # a busy machine may scale out before a sample catches an instance at its limit
        wait_for(lambda: sample() and busiest[-1] >= 2,
                 "an instance at its containerConcurrency (2) under 32 clients")
    finally:
        stop.set()
        load.join()
    assert len(peak) > 1
    assert set(codes) == {200}, codes
    assert max(busiest) == 2  # containerConcurrency is a hard limit: the rest waited, in
    # every sample taken while 32 clients pressed

    # one client keeps requests in flight while the extra instances drain and stop
    stop, light = threading.Event(), Counter[int]()
    load = threading.Thread(target=asyncio.run,
                            args=(_load(urls.url, digits_request, 1, stop, light),))
    load.start()
    try:
        wait_for(lambda: plane.revision_status(NS, "digits-00001").instances == 1,
                 "scale down to one instance under light load")
    finally:
        stop.set()
        load.join()
    assert set(light) == {200}, light
    wait_for(lambda: plane.revision_status(NS, "digits-00001").instances == 0, "scale to zero")
    wait_for(lambda: not any(alive(pid) for pid in peak), "every instance process to be gone")


def test_traffic_splits_by_percent_and_tags_pin_their_revision(
        plane: LocalServingPlane, repos: dict[int, Path], digits_request: dict[str, Any]) -> None:
    plane.ensure_revision(spec("digits-00001", repos[1], min_scale=1))
    plane.ensure_revision(spec("digits-00002", repos[2], min_scale=1))
    urls = plane.set_route(route("digits", ("digits-00001", 80, "one"),
                                 ("digits-00002", 20, "two")))
    for name in ("digits-00001", "digits-00002"):
        assert wait_settled(plane, name) is RevisionState.READY

    n = 300
    with httpx.Client(timeout=60) as client:
        versions = Counter(model_version(client.post(urls.url + INFER, json=digits_request))
                           for _ in range(n))
        pinned = {tag: {model_version(client.post(url + INFER, json=digits_request))
                        for _ in range(10)} for tag, url in urls.tags.items()}
    p = 0.2
    sigma = math.sqrt(n * p * (1 - p))
    assert abs(versions["2"] - n * p) <= 4 * sigma, versions
    assert versions["1"] + versions["2"] == n
    assert pinned == {"one": {"1"}, "two": {"2"}}

    # a new split takes effect on the same URL; a removed tag's URL stops answering
    again = plane.set_route(route("digits", ("digits-00002", 100, "two")))
    assert again.url == urls.url and again.tags == {"two": urls.tags["two"]}
    with httpx.Client(timeout=60) as client:
        assert {model_version(client.post(urls.url + INFER, json=digits_request))
                for _ in range(10)} == {"2"}
        with pytest.raises(httpx.ConnectError):
            client.get(urls.tags["one"] + "/v2/health/ready")


def test_a_revision_whose_model_is_missing_fails_with_the_functions_message(
        plane: LocalServingPlane, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-repository"
    plane.ensure_revision(spec("digits-00003", missing))
    urls = plane.set_route(route("digits", ("digits-00003", 100, None)))
    assert wait_settled(plane, "digits-00003") is RevisionState.FAILED
    status = plane.revision_status(NS, "digits-00003")
    assert "exited with code 1" in status.message
    assert f"{missing} is not a directory" in status.message
    assert status.instances == 0

    response = httpx.post(urls.url + INFER, json={"inputs": []}, timeout=30)
    assert response.status_code == 503
    assert "is not a directory" in response.json()["error"]


def test_a_full_queue_answers_503_and_a_long_hold_504(repos: dict[int, Path],
                                                     tmp_path: Path) -> None:
    # an instance whose readiness never answers keeps requests held
    never_ready = spec("digits-00004", repos[1], readiness_path="/v2/health/never")
    with LocalServingPlane(queue_size=2, queue_timeout_s=2.0, log_dir=tmp_path) as plane:
        plane.ensure_revision(never_ready)
        urls = plane.set_route(route("digits", ("digits-00004", 100, None)))
        held: list[httpx.Response] = []

        def send() -> None:
            held.append(httpx.get(urls.url + "/v2/health/ready", timeout=60))

        threads = [threading.Thread(target=send) for _ in range(2)]
        for thread in threads:
            thread.start()
        wait_for(lambda: httpx.get(plane.status_url).json()["revisions"][0]["waiting"] == 2,
                 "two held requests")
        overflow = httpx.get(urls.url + "/v2/health/ready", timeout=60)
        for thread in threads:
            thread.join()
        assert plane.revision_status(NS, "digits-00004").state is RevisionState.UNKNOWN
    assert overflow.status_code == 503
    assert "queue full" in overflow.json()["error"]
    assert [r.status_code for r in held] == [504, 504]
    assert "within 2 s" in held[0].json()["error"]


def test_a_request_that_meets_a_dead_instance_is_answered_by_another(
        repos: dict[int, Path], digits_request: dict[str, Any], tmp_path: Path) -> None:
    """Killed between two requests, before the autoscaler notices: the next request finds
    the instance refusing connections and is handed to a replacement, not dropped."""
    with LocalServingPlane(log_dir=tmp_path) as plane:
        plane.ensure_revision(spec("digits-00001", repos[1], min_scale=1))
        urls = plane.set_route(route("digits", ("digits-00001", 100, None)))
        assert wait_settled(plane, "digits-00001") is RevisionState.READY
        with httpx.Client(timeout=60) as client:  # keeps its connection to the ingress
            assert client.post(urls.url + INFER, json=digits_request).status_code == 200
            (pid,) = plane.pids(NS, "digits-00001")
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda: not alive(pid), "the killed instance to be gone")
            response = client.post(urls.url + INFER, json=digits_request)
        assert response.status_code == 200, response.text
        assert plane.pids(NS, "digits-00001") != [pid]


def test_an_instance_that_dies_is_replaced(
        repos: dict[int, Path], digits_request: dict[str, Any], tmp_path: Path) -> None:
    with LocalServingPlane(log_dir=tmp_path) as plane:
        plane.ensure_revision(spec("digits-00001", repos[1], min_scale=1))
        urls = plane.set_route(route("digits", ("digits-00001", 100, None)))
        assert wait_settled(plane, "digits-00001") is RevisionState.READY
        (pid,) = plane.pids(NS, "digits-00001")
        os.kill(pid, signal.SIGKILL)
        # min-scale 1: the autoscaler notices and starts a replacement by itself
        wait_for(lambda: plane.revision_status(NS, "digits-00001").ready_instances == 1
                 and plane.pids(NS, "digits-00001") != [pid], "a replacement instance")
        response = httpx.post(urls.url + INFER, json=digits_request, timeout=60)
        assert response.status_code == 200, response.text
        assert plane.revision_status(NS, "digits-00001").cold_starts == 2
