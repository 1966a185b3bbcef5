"""``python -m modelfn.handlers.http`` as the container runs it: a real process on loopback."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import TYPE_CHECKING

import httpx
import numpy as np
import pytest
from onnx_models import save, slow_graph
from prometheus_client.parser import text_string_to_metric_families

from modelfn.process.supervisor import Process, free_port, http_probe

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

#: one instance, one thread, no batching: requests run one after another, each a while
SLOW_CONFIG = """
max_batch_size: 0
instance_group [{ count: 1 kind: KIND_CPU }]
parameters { key: "intra_op_thread_count" value: { string_value: "1" } }
"""
REQUEST = {"inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [1.0]}]}


class Function:
    """The HTTP entrypoint in its own process, as a container platform starts it."""

    def __init__(self, repo: Path, **env: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = Process(
            [sys.executable, "-m", "modelfn.handlers.http"], name="function",
            env={**os.environ, "PORT": str(self.port),
                 "MODELFN_HOST": "127.0.0.1", "MODELFN_REPOSITORY": str(repo),
                 "MODELFN_STORE": "", "MODELFN_MODELS": "", "MODELFN_MAX_BODY_BYTES": "",
                 "MODELFN_LOG_LEVEL": "info", **env},
            tail_lines=2000,
        ).start()

    def wait_ready(self, timeout: float = 60) -> None:
        self.proc.wait_ready(http_probe(f"{self.url}/v2/health/ready"), timeout)

    def terminate(self) -> None:
        """SIGTERM, as Knative sends on scale-down; the function drains and exits."""
        self.proc.terminate()

    def output(self, timeout: float = 60) -> str:
        self.proc.wait(timeout)
        return self.proc.tail()

    def kill(self) -> None:
        self.proc.kill()


@pytest.fixture
def slow_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "models"
    save(repo / "slow", slow_graph(), config=SLOW_CONFIG)
    return repo


@pytest.fixture
def function(slow_repo: Path) -> Iterator[Function]:
    fn = Function(slow_repo)
    try:
        fn.wait_ready()
        yield fn
    finally:
        fn.kill()


def slow_metric(url: str, name: str) -> int:
    text = httpx.get(f"{url}/metrics").text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.removesuffix("_total") == name and sample.labels.get("model") == "slow":
                return int(sample.value)
    raise AssertionError(f"no {name} for model 'slow' in /metrics")


def refused(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            return False
    except ConnectionRefusedError:
        return True


def test_ready_serves_and_exits_zero_on_sigterm(function: Function) -> None:
    assert httpx.get(f"{function.url}/v2/health/ready").json() == {"ready": True}
    response = httpx.post(f"{function.url}/v2/models/slow/infer", json=REQUEST, timeout=30)
    assert response.status_code == 200
    assert response.json()["outputs"][0]["data"] == pytest.approx([1.0])
    function.terminate()
    log = function.output()
    assert function.proc.returncode == 0, log
    assert "ready: slow:1" in log
    assert "drained after SIGTERM" in log


def test_sigterm_drains_in_flight_requests_and_refuses_new_ones(function: Function) -> None:
    count = 4

    def infer(value: float) -> httpx.Response:
        body = {"inputs": [{**REQUEST["inputs"][0], "data": [value]}]}
        with httpx.Client(base_url=function.url, timeout=60) as client:
            return client.post("/v2/models/slow/infer", json=body)

    with ThreadPoolExecutor(count) as pool:
        futures = [pool.submit(infer, float(i + 1)) for i in range(count)]
        # one request runs at a time: wait until every one has arrived and two still queue
        deadline = time.monotonic() + 30
        while True:
            queued = slow_metric(function.url, "nv_inference_pending_request_count")
            served = slow_metric(function.url, "nv_inference_request_success")
            if queued >= 2 and queued + served == count - 1:
                break
            assert time.monotonic() < deadline, f"{queued} queued and {served} served"
            time.sleep(0.01)
        function.terminate()
        deadline = time.monotonic() + 30
        while not refused(function.port):
            assert time.monotonic() < deadline, "the listener stayed open after SIGTERM"
            time.sleep(0.01)
        assert not all(f.done() for f in futures), "refusal came only after the drain"
        responses = [f.result() for f in futures]
    assert [r.status_code for r in responses] == [200] * count
    assert [r.json()["outputs"][0]["data"][0] for r in responses] == pytest.approx(
        [float(i + 1) for i in range(count)]
    )
    log = function.output()
    assert function.proc.returncode == 0, log
    assert "drained after SIGTERM" in log


def test_a_broken_model_config_exits_one_before_listening(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    save(repo / "slow", slow_graph(size=4, steps=1),
         config="max_batch_size: 0\nbogus_field: 3\n")
    fn = Function(repo)
    try:
        log = fn.output()
        assert fn.proc.returncode == 1, log
        assert "slow/config.pbtxt:2" in log and "bogus_field" in log
        assert refused(fn.port)
    finally:
        fn.kill()


def test_a_bad_port_is_a_clear_error(slow_repo: Path) -> None:
    fn = Function(slow_repo, PORT="http")
    try:
        log = fn.output()
        assert fn.proc.returncode == 1
        assert "PORT must be a whole number, not 'http'" in log
    finally:
        fn.kill()


def grpc_ready(address: str) -> Callable[[], bool]:
    """A readiness probe over gRPC: ServerReady answers true."""
    import tritonclient.grpc as tg
    from tritonclient.utils import InferenceServerException

    def probe() -> bool:
        try:
            with tg.InferenceServerClient(address) as client:
                return bool(client.is_server_ready(client_timeout=1))
        except InferenceServerException:
            return False

    return probe


def test_protocol_grpc_serves_grpc_on_port_and_drains_on_sigterm(slow_repo: Path) -> None:
    import tritonclient.grpc as tg

    fn = Function(slow_repo, MODELFN_PROTOCOL="grpc")
    address = f"127.0.0.1:{fn.port}"
    try:
        fn.proc.wait_ready(grpc_ready(address), 60)
        with pytest.raises(httpx.HTTPError):  # gRPC instead of REST, not beside it
            httpx.get(f"{fn.url}/v2/health/ready", timeout=5)

        def infer(value: float) -> float:
            with tg.InferenceServerClient(address) as client:
                tensor = tg.InferInput("x", [1, 1], "FP32")
                tensor.set_data_from_numpy(np.full((1, 1), value, np.float32))
                return float(client.infer("slow", [tensor]).as_numpy("y")[0, 0])

        with ThreadPoolExecutor(3) as pool:
            futures = [pool.submit(infer, float(i + 1)) for i in range(3)]
            next(as_completed(futures)).result()  # one answered: the others are in flight
            fn.terminate()
            assert sorted(f.result() for f in futures) == pytest.approx([1.0, 2.0, 3.0])
        log = fn.output()
        assert fn.proc.returncode == 0, log
        assert "KServe V2 gRPC on 127.0.0.1" in log and "drained after SIGTERM" in log
    finally:
        fn.kill()


def test_a_signal_before_uvicorn_listens_stops_the_server_it_is_not_swallowed() -> None:
    """The handler uvicorn finds in place: after a drain (uvicorn re-raises the signal it
    caught) it only logs; before uvicorn has taken the signals over, it stops the server."""
    from types import SimpleNamespace

    from modelfn.handlers.http import _on_signal

    starting = SimpleNamespace(should_exit=False)
    _on_signal(starting, signal.SIGTERM, None)
    assert starting.should_exit is True
    drained = SimpleNamespace(should_exit=True)
    _on_signal(drained, signal.SIGTERM, None)
    assert drained.should_exit is True


@pytest.mark.parametrize("delay_ms", range(0, 70, 10))
def test_a_sigterm_at_any_moment_of_the_start_ends_the_process(
    slow_repo: Path, delay_ms: int
) -> None:
    """Knative may stop a pod while it starts. A SIGTERM from the ready line on, however
    soon, ends the function in seconds: once one that landed between the ready line and
    uvicorn's own handlers was swallowed, and the process served on until SIGKILL."""
    port = free_port()
    env = {**os.environ, "PORT": str(port), "MODELFN_HOST": "127.0.0.1",
           "MODELFN_REPOSITORY": str(slow_repo), "MODELFN_STORE": "", "MODELFN_MODELS": "",
           "MODELFN_LOG_LEVEL": "info"}
    proc = subprocess.Popen([sys.executable, "-m", "modelfn.handlers.http"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if "ready:" in line:
                break
        time.sleep(delay_ms / 1000)
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=15)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode in (0, -signal.SIGTERM), rest
