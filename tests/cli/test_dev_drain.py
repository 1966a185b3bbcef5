"""Ctrl-C under load: `modelfn dev` as a process, a model whose requests wait seconds in
its batcher (Triton's `max_queue_delay_microseconds`), deployed with `modelfn deploy
--target local`, three requests in flight through the route URL (httpx), then SIGINT.
Every request is answered (200 within the drain, 503 after it), nothing scales up while
draining, a second Ctrl-C stops at once and says so, and no traceback is printed."""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
import time
from typing import TYPE_CHECKING

import httpx
from dev_support import EXAMPLES, REQUEST, modelfn, start_dev

if TYPE_CHECKING:
    from pathlib import Path

    from modelfn.process.supervisor import Process


def slow_digits(where: Path, delay_s: float) -> Path:
    """digits whose every request waits ``delay_s`` for a batch of 64 that never fills."""
    model = where / "slow"
    shutil.copytree(EXAMPLES / "models" / "digits", model)
    config = model / "config.pbtxt"
    config.write_text(config.read_text().replace('name: "digits"', 'name: "slow"').replace(
        "dynamic_batching { }",
        "dynamic_batching { preferred_batch_size: [ 64 ] "
        f"max_queue_delay_microseconds: {int(delay_s * 1e6)} }}"))
    return model


def dev_with_slow_model(tmp_path: Path, *, drain: str, delay_s: float
                        ) -> tuple[Process, str]:
    """A running `modelfn dev` and the route URL of the slow model, one instance warm."""
    dev, env = start_dev(tmp_path / "dev", "--no-gateway", "--drain", drain, tail_lines=400)
    modelfn(env, "push", str(slow_digits(tmp_path, delay_s)))
    modelfn(env, "deploy", "slow:1", "--target", "local", "--min-scale", "1", "--wait", "120")
    status = json.loads(modelfn(env, "status", "slow", "--target", "local",
                                "--output", "json").stdout)
    return dev, str(status["url"])


def in_flight(url: str, count: int) -> tuple[list[threading.Thread], list[tuple[int, str]]]:
    answers: list[tuple[int, str]] = []

    def send() -> None:
        try:
            answer = httpx.post(f"{url}/v2/models/slow/infer", json=REQUEST, timeout=120)
            answers.append((answer.status_code, answer.text))
        except httpx.HTTPError as exc:  # an empty reply or a reset: the request was dropped
            answers.append((0, repr(exc)))

    threads = [threading.Thread(target=send) for _ in range(count)]
    for thread in threads:
        thread.start()
    return threads, answers


def test_ctrl_c_waits_for_the_requests_in_flight_and_answers_them(tmp_path: Path) -> None:
    dev, url = dev_with_slow_model(tmp_path, drain="30s", delay_s=3)
    try:
        threads, answers = in_flight(url, 3)
        time.sleep(1)  # queued in the instance's batcher
        os.kill(dev.pid, signal.SIGINT)
        for thread in threads:
            thread.join(60)
        code = dev.wait(90)
    finally:
        dev.stop(5)
    output = dev.tail()
    assert [status for status, _ in answers] == [200, 200, 200], answers
    assert code == 0, output
    assert "waiting for 3 request(s) in flight until" in output, output
    assert "Traceback" not in output, output
    assert " ready in " not in output.split("waiting for 3")[1], output  # no scale-up


def test_a_second_ctrl_c_stops_at_once_and_the_requests_left_get_a_503(
        tmp_path: Path) -> None:
    dev, url = dev_with_slow_model(tmp_path, drain="5m", delay_s=60)
    try:
        threads, answers = in_flight(url, 3)
        time.sleep(1)
        os.kill(dev.pid, signal.SIGINT)
        time.sleep(1)
        os.kill(dev.pid, signal.SIGINT)
        for thread in threads:
            thread.join(60)
        code = dev.wait(60)  # not the 5 minutes of the drain, nor the 60 s delay
    finally:
        dev.stop(5)
    output = dev.tail()
    assert [status for status, _ in answers] == [503, 503, 503], answers
    assert all("the local platform" in text and "stop" in text for _, text in answers), answers
    assert code == 0, output
    assert "stopping now: requests still in flight get a 503" in output, output
    assert "Traceback" not in output, output
