"""Ensembles behind `modelfn serve` (REST and gRPC in one process), called by tritonclient's
HTTP and gRPC clients as they call Triton: answers, config, metadata, statistics, batching
across requests, a failing step, and an ensemble that cannot load beside those that serve."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import tritonclient.grpc as tg
import tritonclient.http as th
from ensemble_repos import ensemble_config, ensemble_repository, save_ensemble, step, tensor
from servers import Server
from tritonclient.utils import InferenceServerException

if TYPE_CHECKING:
    from collections.abc import Iterator

A = np.arange(8, dtype=np.float32).reshape(2, 4)
B = np.full((2, 4), 0.5, np.float32)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = ensemble_repository(tmp_path_factory.mktemp("ensembles") / "models")
    save_ensemble(root / "orphan", ensemble_config(
        [step("nope", {"X": "A"}, {"Y": "OUT"})], [tensor("A")], [tensor("OUT")]))
    srv = Server(root, grpc=True)
    try:
        srv.wait_ready(timeout=90)
        yield srv
    finally:
        log = srv.stop()
        assert srv.proc.returncode == 0, log


@pytest.fixture
def http(server: Server) -> Iterator[th.InferenceServerClient]:
    with th.InferenceServerClient(server.url) as client:
        yield client


@pytest.fixture
def grpc(server: Server) -> Iterator[tg.InferenceServerClient]:
    with tg.InferenceServerClient(server.grpc_url) as client:
        yield client


def inputs(module: Any, binary: bool = True, **arrays: np.ndarray) -> list[Any]:
    found = []
    for name, array in arrays.items():
        item = module.InferInput(name, list(array.shape), "BYTES" if array.dtype == object
                                 else "FP32" if array.dtype == np.float32 else "INT64")
        if module is th:
            item.set_data_from_numpy(array, binary_data=binary)
        else:
            item.set_data_from_numpy(array)
        found.append(item)
    return found


def http_stats(client: th.InferenceServerClient, model: str) -> dict[str, Any]:
    [found] = client.get_inference_statistics(model)["model_stats"]
    return found


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_http_chain_and_diamond_answer_as_numpy_does(http: th.InferenceServerClient,
                                                     binary: bool) -> None:
    chain = http.infer("chain", inputs(th, binary, A=A, B=B))
    np.testing.assert_allclose(chain.as_numpy("OUT"), (A + B + B) * 2)
    diamond = http.infer("diamond", inputs(th, binary, A=A, B=B),
                         outputs=[th.InferRequestedOutput("LEFT", binary_data=binary)])
    np.testing.assert_allclose(diamond.as_numpy("LEFT"), 2 * B)
    assert diamond.as_numpy("OUT") is None  # only what was asked for


def test_grpc_chain_and_diamond_answer_as_numpy_does(grpc: tg.InferenceServerClient) -> None:
    chain = grpc.infer("chain", inputs(tg, A=A, B=B))
    np.testing.assert_allclose(chain.as_numpy("OUT"), (A + B + B) * 2)
    diamond = grpc.infer("diamond", inputs(tg, A=A, B=B))
    np.testing.assert_allclose(diamond.as_numpy("OUT"), 4 * A)
    np.testing.assert_allclose(diamond.as_numpy("LEFT"), 2 * B)


def test_config_and_metadata_are_tritons(http: th.InferenceServerClient,
                                         grpc: tg.InferenceServerClient) -> None:
    config = http.get_model_config("diamond")
    assert (config["platform"], config["max_batch_size"]) == ("ensemble", 8)
    assert [s["model_name"] for s in config["ensemble_scheduling"]["step"]] == [
        "add", "add", "twice"]
    assert config["ensemble_scheduling"]["step"][1]["output_map"] == {"OUTPUT1": "diff"}
    message = grpc.get_model_config("diamond").config
    assert [s.model_name for s in message.ensemble_scheduling.step] == ["add", "add", "twice"]
    assert dict(message.ensemble_scheduling.step[2].input_map) == {
        "INPUT0": "sum", "INPUT1": "diff"}
    metadata = http.get_model_metadata("diamond")
    assert metadata["platform"] == "ensemble"
    assert [o["name"] for o in metadata["outputs"]] == ["OUT", "LEFT"]
    assert grpc.get_model_metadata("chain").platform == "ensemble"


def test_statistics_count_the_ensemble_and_each_step_model(
        http: th.InferenceServerClient, grpc: tg.InferenceServerClient) -> None:
    before = {m: http_stats(http, m) for m in ("chain", "add", "twice")}
    http.infer("chain", inputs(th, A=A, B=B))
    grpc.infer("chain", inputs(tg, A=A[:1], B=B[:1]))
    after = {m: http_stats(http, m) for m in ("chain", "add", "twice")}

    def grown(model: str, *path: str) -> int:
        new, old = after[model], before[model]
        for key in path:
            new, old = new[key], old[key]
        return int(new) - int(old)

    for model in ("chain", "add", "twice"):
        assert grown(model, "inference_stats", "success", "count") == 2
        assert grown(model, "inference_count") == 3
    assert grown("chain", "execution_count") == 2
    assert grown("chain", "inference_stats", "queue", "ns") == 0
    assert grown("chain", "inference_stats", "compute_infer", "count") == 2
    assert grown("chain", "inference_stats", "compute_infer", "ns") == (
        grown("add", "inference_stats", "compute_infer", "ns")
        + grown("twice", "inference_stats", "compute_infer", "ns"))
    [via_grpc] = grpc.get_inference_statistics("chain").model_stats
    assert via_grpc.inference_stats.success.count == int(
        after["chain"]["inference_stats"]["success"]["count"])


def test_concurrent_requests_batch_in_the_step_model(server: Server,
                                                     http: th.InferenceServerClient) -> None:
    before = http_stats(http, "pair")

    def call(_: int) -> np.ndarray:
        with th.InferenceServerClient(server.url) as client:
            answer = client.infer("paired", inputs(th, A=A[:1], B=B[:1]))
            return answer.as_numpy("OUT")

    # 'pair' runs a batch only once it holds two requests: four ensemble requests can only
    # be answered in two batches of two
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(call, range(4)))
    for out in answers:
        np.testing.assert_allclose(out, A[:1] + B[:1])
    after = http_stats(http, "pair")
    assert int(after["execution_count"]) - int(before["execution_count"]) == 2
    assert int(after["inference_count"]) - int(before["inference_count"]) == 4


def test_a_failing_step_fails_its_request_alone(http: th.InferenceServerClient,
                                                grpc: tg.InferenceServerClient) -> None:
    past_the_table = np.array([[9]], np.int64)
    with pytest.raises(InferenceServerException) as caught:
        http.infer("looked_up", inputs(th, INDEX=past_the_table))
    assert caught.value.status() == "500"
    assert caught.value.message().startswith(
        "ensemble 'looked_up' step 0 (model 'lookup' version 1): ")
    with pytest.raises(InferenceServerException) as caught:
        grpc.infer("looked_up", inputs(tg, INDEX=past_the_table))
    assert caught.value.status() == "StatusCode.INTERNAL"
    answer = http.infer("looked_up", inputs(th, INDEX=np.array([[1], [3]], np.int64)))
    assert answer.as_numpy("OUT").tolist() == [[8.0], [16.0]]  # table[i] * 4


def test_strings_pass_through_and_bad_utf8_is_the_requests_400(
        http: th.InferenceServerClient) -> None:
    words = np.array([[b"hello", "wörld".encode()]], dtype=object)
    echoed = http.infer("echoed", inputs(th, TEXT=words))
    assert echoed.as_numpy("ECHO").tolist() == [[b"hello", "wörld".encode()]]
    with pytest.raises(InferenceServerException) as caught:
        http.infer("echoed", inputs(th, TEXT=np.array([[b"ok", b"\xff"]], dtype=object)))
    assert caught.value.status() == "400"
    assert "input 'IN': BYTES element 1 is not valid UTF-8" in caught.value.message()
    assert http.infer("echoed", inputs(th, TEXT=words)).as_numpy("ECHO") is not None


def test_an_ensemble_that_cannot_load_is_unavailable_while_the_others_serve(
        http: th.InferenceServerClient, grpc: tg.InferenceServerClient) -> None:
    assert not http.is_model_ready("orphan") and not grpc.is_model_ready("orphan")
    assert http.is_model_ready("chain") and http.is_server_ready()
    [entry] = [m for m in http.get_model_repository_index() if m["name"] == "orphan"]
    assert entry["state"] == "UNAVAILABLE"
    assert entry["reason"].endswith(
        "ensemble 'orphan' step 0: model 'nope' is not in the model repository")
    with pytest.raises(InferenceServerException) as caught:
        http.infer("orphan", inputs(th, A=A))
    assert caught.value.status() == "503"
    np.testing.assert_allclose(http.infer("chain", inputs(th, A=A, B=B)).as_numpy("OUT"),
                               (A + B + B) * 2)
