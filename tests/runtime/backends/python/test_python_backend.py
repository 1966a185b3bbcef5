"""Triton's Python backend under a real `modelfn serve`: python_backend's add_sub,
auto_complete and BLS examples, and models that misbehave on purpose, called with
tritonclient over HTTP and gRPC."""

from __future__ import annotations

import json
import os
import signal
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton
from onnx import TensorProto
from onnx_models import add_sub_graph, save
from python_models import (
    ADD_SUB,
    ADD_SUB_CONFIG,
    AUTO_COMPLETE,
    BATCHED,
    BATCHED_CONFIG,
    BLS_ASYNC,
    BLS_ASYNC_CONFIG,
    BLS_SYNC,
    BLS_SYNC_CONFIG,
    ECHO,
    ECHO_CONFIG,
    FAILING_INIT,
    FAILING_INIT_CONFIG,
    ONNX_ADD_SUB_CONFIG,
    save_python,
)
from servers import Server
from serving_support import alive, wait_for
from tritonclient.utils import InferenceServerException

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

Http = triton.InferenceServerClient
Grpc = triton_grpc.InferenceServerClient


def python_repository(repo: Path) -> Path:
    save_python(repo / "add_sub", ADD_SUB, ADD_SUB_CONFIG)
    save_python(repo / "auto_complete", AUTO_COMPLETE)
    save_python(repo / "echo", ECHO, ECHO_CONFIG)
    save_python(repo / "batched", BATCHED, BATCHED_CONFIG)
    save_python(repo / "failing_init", FAILING_INIT, FAILING_INIT_CONFIG)
    save_python(repo / "bls_sync", BLS_SYNC, BLS_SYNC_CONFIG)
    save_python(repo / "bls_async", BLS_ASYNC, BLS_ASYNC_CONFIG)
    save(repo / "onnx_add_sub", add_sub_graph(TensorProto.FLOAT, [4]),
         config=ONNX_ADD_SUB_CONFIG)
    return repo


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    repo = python_repository(tmp_path_factory.mktemp("python") / "models")
    srv = Server(repo, grpc=True)
    try:
        srv.wait_ready(timeout=120)
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def http(server: Server) -> Iterator[triton.InferenceServerClient]:
    with triton.InferenceServerClient(server.url) as client:
        yield client


@pytest.fixture(scope="module")
def grpc(server: Server) -> Iterator[triton_grpc.InferenceServerClient]:
    with triton_grpc.InferenceServerClient(server.grpc_url) as client:
        yield client


def workers_of(server_pid: int, model: str) -> set[int]:
    """The live worker processes of ``model`` among the server's children."""
    pids = set()
    for task in os.listdir(f"/proc/{server_pid}/task"):
        with open(f"/proc/{server_pid}/task/{task}/children") as f:
            pids |= {int(p) for p in f.read().split()}
    found = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"modelfn.runtime.backends.python.worker" in argv and model.encode() in argv \
                and alive(pid):
            found.add(pid)
    return found


def add_sub_inputs(module: Any = triton, rows: int | None = None) -> list[Any]:
    shape = [4] if rows is None else [rows, 4]
    a = np.tile(np.arange(4, dtype=np.float32), (rows or 1, 1)).reshape(shape)
    inputs = [module.InferInput(name, shape, "FP32") for name in ("INPUT0", "INPUT1")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(np.ones(shape, np.float32))
    return inputs


def echo(client: triton.InferenceServerClient, text: list[bytes], *,
         outputs: list[str] | None = None, **parameters: Any) -> triton.InferResult:
    tensor = triton.InferInput("TEXT", [len(text)], "BYTES")
    tensor.set_data_from_numpy(np.array(text, dtype=np.object_))
    wanted = [triton.InferRequestedOutput(o) for o in outputs] if outputs else None
    return client.infer("echo", [tensor], outputs=wanted, request_id="r-1",
                        parameters=parameters or None)


def refused(call: Any) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as info:
        call()
    return info.value


def test_add_sub_answers_over_http_and_grpc(http: Http, grpc: Grpc) -> None:
    result = http.infer("add_sub", add_sub_inputs())
    assert result.as_numpy("OUTPUT0").tolist() == [1, 2, 3, 4]
    assert result.as_numpy("OUTPUT1").tolist() == [-1, 0, 1, 2]
    answer = grpc.infer("add_sub", add_sub_inputs(triton_grpc))
    assert answer.as_numpy("OUTPUT0").tolist() == [1, 2, 3, 4]


def test_config_and_metadata_are_tritons(http: Http) -> None:
    config = http.get_model_config("add_sub")
    assert (config["platform"], config["backend"], config["max_batch_size"]) == ("", "python", 0)
    assert http.get_model_metadata("add_sub")["platform"] == "python"
    assert [t["name"] for t in config["input"]] == ["INPUT0", "INPUT1"]


def test_auto_complete_config_declares_a_model_without_config_file(http: Http) -> None:
    config = http.get_model_config("auto_complete")
    assert config["max_batch_size"] == 4 and "dynamic_batching" in config
    assert [(t["name"], t["data_type"], t["dims"]) for t in config["input"]] == [
        ("INPUT0", "TYPE_FP32", [4]), ("INPUT1", "TYPE_FP32", [4])]
    result = http.infer("auto_complete", add_sub_inputs(rows=2))
    assert result.as_numpy("OUTPUT0").tolist() == [[1, 2, 3, 4]] * 2


def _batched(server: Server, first: float) -> np.ndarray | str:
    x = triton.InferInput("X", [1, 2], "FP32")
    x.set_data_from_numpy(np.array([[first, 1.0]], np.float32))
    try:
        with triton.InferenceServerClient(server.url) as client:
            result = client.infer("batched", [x])
    except InferenceServerException as exc:
        return f"{exc.status()} {exc.message()}"
    return np.concatenate([result.as_numpy("Y"), result.as_numpy("REQUESTS")], axis=1)


def test_dynamic_batching_hands_execute_several_requests(server: Server) -> None:
    # the batch forms when four requests wait (preferred_batch_size), else after a minute
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda v: _batched(server, v), [1.0, 2.0, 3.0, 4.0]))
    assert [a.tolist() for a in answers] == [[[2 * v, 2, 4]] for v in (1, 2, 3, 4)]  # type: ignore[union-attr]


def test_an_error_response_fails_its_request_alone(server: Server) -> None:
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda v: _batched(server, v), [1.0, -1.0, 3.0, 4.0]))
    assert answers[1] == "500 row starts with -1"
    assert [answers[i].tolist() for i in (0, 2, 3)] == [  # type: ignore[union-attr]
        [[2, 2, 4]], [[6, 2, 4]], [[8, 2, 4]]]


def test_request_id_parameters_and_requested_outputs_reach_the_model(
        http: Http, grpc: Grpc) -> None:
    result = echo(http, [b"abc", "é".encode()], outputs=["SEEN", "UPPER"], k="v", n=3)
    seen = json.loads(result.as_numpy("SEEN")[0])
    assert seen["id"] == "r-1" and seen["parameters"] == {"k": "v", "n": 3}
    assert seen["outputs"] == ["SEEN", "UPPER"]
    # "model_repository" is the model's directory, as Triton's models join it with the version
    assert "model.py" in seen["files"]
    assert result.as_numpy("UPPER").tolist() == [b"ABC", "é".encode()]
    assert result.as_numpy("PID") is None
    tensor = triton_grpc.InferInput("TEXT", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([b"xyz"], dtype=np.object_))
    answer = grpc.infer("echo", [tensor], request_id="g-2", parameters={"flag": True})
    seen = json.loads(answer.as_numpy("SEEN")[0])
    assert (seen["id"], seen["parameters"], seen["outputs"]) == ("g-2", {"flag": True}, [])
    assert answer.as_numpy("UPPER").tolist() == [b"XYZ"]


def test_an_exception_in_execute_fails_the_request_and_the_model_serves_on(http: Http) -> None:
    error = refused(lambda: echo(http, [b"a"], do="raise"))
    assert error.status() == "500" and "echo was told to raise" in error.message()
    assert echo(http, [b"a"]).as_numpy("UPPER").tolist() == [b"A"]


def test_a_response_error_carries_its_code_as_status(http: Http, grpc: Grpc) -> None:
    error = refused(lambda: echo(http, [b"a"], do="error"))
    assert (error.status(), error.message()) == ("400", "echo refuses this one")
    tensor = triton_grpc.InferInput("TEXT", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([b"a"], dtype=np.object_))
    failure = refused(lambda: grpc.infer("echo", [tensor], parameters={"do": "error"}))
    assert failure.status() == "StatusCode.INVALID_ARGUMENT"


@pytest.mark.parametrize(("do", "words"), [
    ("float64", "python model 'echo' output 'PID': is float64, but its config says TYPE_INT64"),
    ("omit", "python model 'echo' returned no output 'PID'"),
    ("extra", "python model 'echo' returned output 'NOPE', which its config does not "
     "declare"),
])
def test_a_response_that_breaks_the_config_is_a_clear_error(
        do: str, words: str, http: Http) -> None:
    error = refused(lambda: echo(http, [b"a"], do=do))
    assert error.status() == "500" and words in error.message()


def test_two_instances_are_two_worker_processes(server: Server, http: Http) -> None:
    pids = workers_of(server.proc.pid, "echo")
    assert len(pids) == 2
    assert int(echo(http, [b"a"]).as_numpy("PID")[0]) in pids
    log = server.proc.tail()
    for instance in ("echo_0_0", "echo_0_1"):
        assert f"initialized {instance}; onnxruntime imported: False" in log
    assert "model echo instance 0: echo logs through pb_utils" in log


def test_a_worker_that_exits_fails_its_request_and_is_restarted(server: Server, http: Http) -> None:
    error = refused(lambda: echo(http, [b"a"], do="exit"))
    assert error.status() == "500"
    assert "exited with code 7" in error.message() and "echo exits now" in error.message()
    pid = int(echo(http, [b"b"]).as_numpy("PID")[0])
    assert len(workers_of(server.proc.pid, "echo")) == 2 and pid in workers_of(
        server.proc.pid, "echo")


def test_a_worker_killed_mid_request_fails_it_cleanly(
        server: Server, tmp_path: Path, http: Http) -> None:
    pidfile = tmp_path / "worker.pid"
    with ThreadPoolExecutor(1) as pool:
        def hang() -> InferenceServerException:
            with triton.InferenceServerClient(server.url) as client:
                return refused(lambda: echo(client, [b"a"], do="hang", pidfile=str(pidfile)))

        pending = pool.submit(hang)
        wait_for(lambda: pidfile.exists() and pidfile.read_text() != "", "the model to hang")
        worker = int(pidfile.read_text())
        os.kill(worker, signal.SIGKILL)
        error = pending.result()
    assert error.status() == "500" and "was killed by SIGKILL" in error.message()
    assert int(echo(http, [b"b"]).as_numpy("PID")[0]) != worker


def test_a_failing_initialize_makes_the_model_unavailable_with_its_error(http: Http) -> None:
    assert not http.is_model_ready("failing_init") and http.is_model_ready("add_sub")
    index = {m["name"]: m for m in http.get_model_repository_index()}
    assert index["failing_init"]["state"] == "UNAVAILABLE"
    assert ("python model 'failing_init' failed in initialize: ValueError: the tokenizer "
            "file is missing") in index["failing_init"]["reason"]


def _bls_sync(client: triton.InferenceServerClient, model: bytes) -> triton.InferResult:
    name = triton.InferInput("MODEL_NAME", [1], "BYTES")
    name.set_data_from_numpy(np.array([model], dtype=np.object_))
    return client.infer("bls_sync", [name, *add_sub_inputs()])


def test_bls_calls_python_and_onnx_models_through_their_batchers(http: Http) -> None:
    for model in (b"add_sub", b"onnx_add_sub"):
        result = _bls_sync(http, model)
        assert result.as_numpy("OUTPUT0").tolist() == [1, 2, 3, 4]
        assert result.as_numpy("OUTPUT1").tolist() == [-1, 0, 1, 2]
    error = refused(lambda: _bls_sync(http, b"no_such_model"))
    assert error.status() == "500" and "'no_such_model' is not found" in error.message()
    stats = http.get_inference_statistics("onnx_add_sub")
    assert stats["model_stats"][0]["inference_stats"]["success"]["count"] >= 1


def test_async_bls_runs_two_calls_at_once(http: Http) -> None:
    result = http.infer("bls_async", add_sub_inputs())
    assert result.as_numpy("OUTPUT0").tolist() == [1, 2, 3, 4]  # onnx_add_sub's
    assert result.as_numpy("OUTPUT1").tolist() == [-1, 0, 1, 2]  # add_sub's


def test_no_worker_outlives_a_stopped_or_killed_server(tmp_path: Path) -> None:
    for stop in ("SIGTERM", "SIGKILL"):
        repo = tmp_path / stop / "models"
        save_python(repo / "add_sub", ADD_SUB, ADD_SUB_CONFIG.replace(
            "{ kind: KIND_CPU }", "{ count: 2 kind: KIND_CPU }"))
        srv = Server(repo)
        try:
            srv.wait_ready(timeout=120)
            workers = workers_of(srv.proc.pid, "add_sub")
            assert len(workers) == 2
            if stop == "SIGKILL":  # the server alone, not its group: its workers see EOF
                os.kill(srv.proc.pid, signal.SIGKILL)
            else:
                srv.proc.terminate()
            wait_for(lambda ws=workers: not any(alive(p) for p in ws),  # type: ignore[misc]
                     f"workers to end ({stop})")
            log = srv.stop()
        finally:
            srv.stop()
        if stop == "SIGTERM":
            assert log.count("Cleaning up...") == 2  # each instance finalized

