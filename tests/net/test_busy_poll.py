"""Busy polling on real event loops (asyncio's and uvloop's), and in a real `modelfn serve`:
the loop keeps turning for the window after a request, then sleeps again."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.http as triton
import uvloop
from servers import Server, assert_polls_then_sleeps, serving

from modelfn.net.busy_poll import BusyPoll

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Iterator
    from typing import Any

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}


@pytest.fixture(params=sorted(LOOPS))
def run(request: pytest.FixtureRequest) -> Iterator[Callable[[Coroutine[Any, Any, None]], None]]:
    loop = LOOPS[request.param]()
    yield loop.run_until_complete
    loop.close()


def test_a_touched_loop_turns_without_sleeping_until_the_window_closes(
        run: Callable[[Coroutine[Any, Any, None]], None]) -> None:
    poll = BusyPoll(0.2)

    async def scenario() -> None:
        poll.touch(asyncio.get_running_loop())
        await asyncio.sleep(0.05)  # a sleeping loop would turn once or twice here
        assert poll.spinning and poll.spins > 100
        await asyncio.sleep(0.3)
        assert not poll.spinning
        spins = poll.spins
        await asyncio.sleep(0.05)
        assert poll.spins == spins, "the loop went on polling after its window"

    run(scenario())


def test_each_touch_moves_the_window_on(run: Callable[[Coroutine[Any, Any, None]], None]) -> None:
    poll = BusyPoll(0.1)

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        for _ in range(6):  # 0.3 s in all, three windows' worth, a touch every 0.05 s
            poll.touch(loop)
            await asyncio.sleep(0.05)
            assert poll.spinning
        await asyncio.sleep(0.2)
        assert not poll.spinning
        poll.touch(loop)  # a request after the window closed starts it again
        spins = poll.spins
        await asyncio.sleep(0.01)
        assert poll.spinning and poll.spins > spins

    run(scenario())


def test_a_spin_left_on_a_loop_the_server_moved_off_stops_there() -> None:
    poll = BusyPoll(1.0)
    first, second = asyncio.new_event_loop(), uvloop.new_event_loop()
    try:
        async def touch_and_turn() -> None:
            poll.touch(asyncio.get_running_loop())
            await asyncio.sleep(0.01)

        first.run_until_complete(touch_and_turn())
        second.run_until_complete(touch_and_turn())
        spins = poll.spins
        first.run_until_complete(asyncio.sleep(0.01))  # the first loop's spin runs once, ends
        assert poll.spins == spins
        second.run_until_complete(asyncio.sleep(0.01))
        assert poll.spins > spins
    finally:
        first.close()
        second.close()


@pytest.mark.parametrize("window", [0.0, -1e-6, 1.5])
def test_a_window_out_of_range_is_refused(window: float) -> None:
    with pytest.raises(ValueError, match="a busy-poll window must be more than 0 and at most"):
        BusyPoll(window)


@pytest.fixture(scope="module")
def polling() -> Iterator[Server]:
    """Polls 0.3 s after each request: long enough to see from outside."""
    env = {**os.environ, "MODELFN_BUSY_POLL_US": "300000"}
    with serving(EXAMPLES / "models", env=env) as server:
        yield server


@pytest.mark.parametrize("binary", [False, True])
def test_a_polling_server_answers_tritonclient(polling: Server, binary: bool) -> None:
    images = np.random.default_rng(3).uniform(0, 16, (5, 64)).astype(np.float32)
    with triton.InferenceServerClient(polling.url) as client:
        request = triton.InferInput("input", list(images.shape), "FP32")
        request.set_data_from_numpy(images, binary_data=binary)
        answers = [client.infer("digits", [request]).as_numpy("label") for _ in range(3)]
    session = ort.InferenceSession(str(EXAMPLES / "models" / "digits" / "1" / "model.onnx"))
    expected = session.run(["label"], {"input": images})[0]
    for answer in answers:  # the config serves the model's label [N] as [N, 1]
        np.testing.assert_array_equal(answer, expected.reshape(-1, 1))


def test_a_polling_server_polls_after_a_request_then_sleeps(polling: Server) -> None:
    body = (EXAMPLES / "requests" / "digits.json").read_bytes()
    with httpx.Client(base_url=f"http://{polling.url}") as client:
        def request() -> None:
            assert client.post("/v2/models/digits/infer", content=body).status_code == 200

        assert_polls_then_sleeps(polling.proc.pid, request, window_s=0.3)
