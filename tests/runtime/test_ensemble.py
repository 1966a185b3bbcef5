"""Ensembles in the engine: loaded after their steps' models, checked against them with
Triton's rules, and run over arrays through each step model's own batcher."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import numpy as np
import pytest
from ensemble_repos import (
    BATCHING,
    ensemble_config,
    ensemble_repository,
    save_ensemble,
    step,
    tensor,
)
from onnx import TensorProto
from onnx_models import identity_graph, save, simple_graph

from modelfn.runtime.ensemble import EnsembleVersion
from modelfn.runtime.errors import InvalidInput, ModelNotReady, StepFailed
from modelfn.runtime.repository import Repository

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from modelfn.runtime.batch_request import Answer, Outputs
    from modelfn.runtime.model import ModelVersion

A = np.arange(8, dtype=np.float32).reshape(2, 4)
B = np.full((2, 4), 0.5, np.float32)
ONE = {"A": A[:1], "B": B[:1]}


@pytest.fixture
async def repo(tmp_path: Path) -> AsyncIterator[Repository]:
    repository = Repository(ensemble_repository(tmp_path / "models"))
    repository.load(strict=True)
    yield repository
    await repository.stop()


async def answered(answer: Answer) -> Outputs | Exception:
    """What the callback of a ``submit`` caller (the HTTP edge) gets."""
    future: asyncio.Future[Outputs | Exception] = asyncio.get_running_loop().create_future()
    answer.then(future.set_result)
    return await future


def stats(model: ModelVersion) -> dict[str, int]:
    doc = model.stats.to_json()
    flat = {k: doc[k] for k in ("inference_count", "execution_count")}
    for name, value in doc["inference_stats"].items():
        flat[f"{name}.count"], flat[f"{name}.ns"] = value["count"], value["ns"]
    return flat


async def test_a_chain_and_a_diamond_answer_as_numpy_does(repo: Repository) -> None:
    chain, diamond = repo.get("chain"), repo.get("diamond")
    assert isinstance(chain, EnsembleVersion) and isinstance(diamond, EnsembleVersion)
    assert (chain.sequential, diamond.sequential) == (True, False)
    for outputs in (await chain.infer({"A": A, "B": B}, 2),
                    await answered(chain.submit({"A": A, "B": B}, 2))):
        assert not isinstance(outputs, Exception)
        np.testing.assert_allclose(outputs["OUT"], (A + B + B) * 2)
    for outputs in (await diamond.infer({"A": A, "B": B}, 2),
                    await answered(diamond.submit({"A": A, "B": B}, 2))):
        assert not isinstance(outputs, Exception)
        np.testing.assert_allclose(outputs["OUT"], 4 * A)
        np.testing.assert_allclose(outputs["LEFT"], 2 * B)
    assert chain.metadata()["platform"] == "ensemble"


async def test_statistics_are_tritons_for_the_ensemble_and_each_step_model(
        repo: Repository) -> None:
    chain, add, twice = repo.get("chain"), repo.get("add"), repo.get("twice")
    for rows in (1, 2, 2):
        await chain.infer({"A": A[:rows], "B": B[:rows]}, rows)
    ens, first, second = stats(chain), stats(add), stats(twice)
    assert (first["success.count"], second["success.count"]) == (3, 3)
    assert (first["inference_count"], second["inference_count"]) == (5, 5)
    assert ens["success.count"] == ens["execution_count"] == 3
    assert ens["inference_count"] == 5
    assert (ens["queue.count"], ens["queue.ns"]) == (3, 0)  # an ensemble has no queue
    for part in ("compute_input", "compute_infer", "compute_output"):
        assert ens[f"{part}.count"] == 3
        # each step ran alone in its batch: the ensemble's time is its steps' sum
        assert ens[f"{part}.ns"] == first[f"{part}.ns"] + second[f"{part}.ns"]
    assert ens["compute_infer.ns"] > 0 and ens["fail.count"] == 0
    sizes = [b["batch_size"] for b in chain.stats.to_json()["batch_stats"]]
    assert sizes == [1, 2]


async def test_concurrent_requests_batch_in_their_step_models(repo: Repository) -> None:
    diamond, add, twice = repo.get("diamond"), repo.get("add"), repo.get("twice")
    answers = await asyncio.gather(*(diamond.infer(ONE, 1) for _ in range(16)))
    for outputs in answers:
        np.testing.assert_allclose(outputs["OUT"], 4 * A[:1])
    assert add.stats.success.count == 32 and twice.stats.success.count == 16
    assert add.stats.execution_count < 32 and twice.stats.execution_count < 16
    assert diamond.stats.execution_count == 16  # one per request, as Triton counts it
    # 'pair' runs a batch only once it holds two requests: two ensemble requests met there
    paired, pair = repo.get("paired"), repo.get("pair")
    both = await asyncio.gather(paired.infer(ONE, 1), paired.infer(ONE, 1))
    assert [o["OUT"].tolist() for o in both] == [(A[:1] + B[:1]).tolist()] * 2
    assert pair.stats.execution_count == 1 and pair.stats.inference_count == 2


@pytest.mark.parametrize("callback", [False, True], ids=["infer", "submit"])
async def test_a_failing_step_fails_its_request_naming_the_step(repo: Repository,
                                                                callback: bool) -> None:
    looked_up, lookup = repo.get("looked_up"), repo.get("lookup")
    bad = {"INDEX": np.array([[9]], np.int64)}
    if callback:
        error = await answered(looked_up.submit(bad, 1))
    else:
        with pytest.raises(StepFailed) as caught:
            await looked_up.infer(bad, 1)
        error = caught.value
    assert isinstance(error, StepFailed) and error.status_code == 500
    assert error.message.startswith("ensemble 'looked_up' step 0 (model 'lookup' version 1): ")
    assert looked_up.stats.fail.count == 1 and looked_up.stats.failures["OTHER"] == 1
    assert lookup.stats.failures["BACKEND"] == 1
    good = await looked_up.infer({"INDEX": np.array([[2]], np.int64)}, 1)  # table[2] = 3
    assert good["OUT"].tolist() == [[12.0]]


async def test_a_steps_timeout_is_the_requests_503(repo: Repository) -> None:
    with pytest.raises(StepFailed, match="step 0 .model 'pair' version 1.: Request timeout "
                       "expired") as caught:
        await repo.get("paired").infer(ONE, 1, timeout_us=1000)  # no second request comes
    assert caught.value.status_code == 503


async def test_cancelling_a_request_withdraws_its_steps(repo: Repository) -> None:
    paired, pair = repo.get("paired"), repo.get("pair")
    answer = paired.submit(ONE, 1)  # its step waits in 'pair' for a second request
    await asyncio.sleep(0)
    assert pair.stats.pending == 1 and answer.cancel()
    assert pair.stats.pending == 0 and pair.stats.failures["CANCELED"] == 1
    task = asyncio.ensure_future(paired.infer(ONE, 1))
    await asyncio.sleep(0.01)
    assert pair.stats.pending == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert pair.stats.pending == 0 and pair.stats.failures["CANCELED"] == 2
    assert paired.stats.failures["CANCELED"] == 2 and paired.stats.success.count == 0


async def test_strings_reach_a_text_model_as_text_and_bad_utf8_is_a_400(
        repo: Repository) -> None:
    echoed = repo.get("echoed")
    words = np.array([[b"hello", "wörld".encode()]], dtype=object)
    assert (await echoed.infer({"TEXT": words}, 1))["ECHO"].tolist() == [["hello", "wörld"]]
    with pytest.raises(StepFailed) as caught:
        await echoed.infer({"TEXT": np.array([[b"ok", b"\xff"]], dtype=object)}, 1)
    assert caught.value.status_code == 400
    assert caught.value.message == (
        "ensemble 'echoed' step 0 (model 'strings' version 1): ensemble 'echoed' step 0 "
        "(model 'strings' version 1) input 'IN': BYTES element 1 is not valid UTF-8, and "
        "the model takes text (an ONNX string tensor)")


async def test_rows_beyond_the_ensembles_max_batch_size_are_refused(repo: Repository) -> None:
    paired = repo.get("paired")
    rows = {"A": np.zeros((3, 4), np.float32), "B": np.zeros((3, 4), np.float32)}
    with pytest.raises(InvalidInput, match="batch-size must be <= 2 for 'paired'"):
        await paired.infer(rows, 3)
    with pytest.raises(InvalidInput, match="batch-size must be <= 2 for 'paired'"):
        paired.submit(rows, 3)


async def test_stop_lets_requests_in_flight_finish_before_their_steps_stop(
        tmp_path: Path) -> None:
    repository = Repository(ensemble_repository(tmp_path / "models"))
    repository.load(strict=True)
    chain = repository.get("chain")
    task = asyncio.ensure_future(chain.infer({"A": A, "B": B}, 2))
    await asyncio.sleep(0)
    await repository.stop()
    np.testing.assert_allclose((await task)["OUT"], (A + B + B) * 2)
    with pytest.raises(ModelNotReady):
        await chain.infer({"A": A, "B": B}, 2)


# --- loading -------------------------------------------------------------------------------


async def test_ensembles_load_after_their_models_and_a_ref_brings_them(tmp_path: Path) -> None:
    root = tmp_path / "models"
    save(root / "scaled", simple_graph(width=4, scale=1.0), version=1,
         config=BATCHING + "version_policy { all { } }\n")
    save(root / "scaled", simple_graph(width=4, scale=3.0), version=2)
    ab = [tensor("A"), tensor("B")]
    for name, version in (("a_newest", -1), ("a_first", 1)):  # sorted before their model
        save_ensemble(root / name, ensemble_config(
            [step("scaled", {"INPUT0": "A", "INPUT1": "B"}, {"OUTPUT0": "OUT"}, version)],
            ab, [tensor("OUT")]))
    repository = Repository(root)
    repository.load(["a_first", "a_newest"], strict=True)
    try:
        assert sorted(repository.models) == ["a_first", "a_newest", "scaled"]
        first = await repository.get("a_first").infer({"A": A, "B": B}, 2)
        newest = await repository.get("a_newest").infer({"A": A, "B": B}, 2)
        np.testing.assert_allclose(first["OUT"], A + B)
        np.testing.assert_allclose(newest["OUT"], (A + B) * 3)
    finally:
        await repository.stop()


AB = [tensor("A"), tensor("B")]
ADD = {"INPUT0": "A", "INPUT1": "B"}


def _one_step(model: str = "add", inputs: dict[str, str] | None = None,
              outputs: dict[str, str] | None = None, version: int = -1,
              ensemble_inputs: list[str] | None = None, max_batch_size: int = 8) -> str:
    return ensemble_config([step(model, ADD if inputs is None else inputs,
                                 {"OUTPUT0": "OUT"} if outputs is None else outputs, version)],
                           AB if ensemble_inputs is None else ensemble_inputs, [tensor("OUT")],
                           max_batch_size)


@pytest.mark.parametrize(("config", "message"), [
    (_one_step("nope"), "ensemble 'ens' step 0: model 'nope' is not in the model repository"),
    (_one_step(version=2),
     "ensemble 'ens' step 0: model 'add' version 2 is not served (versions served: 1)"),
    (_one_step("broken"), "ensemble 'ens' step 0: model 'broken' has no ready version: "),
    (_one_step(inputs={"INPUT0": "A", "NOPE": "B"}),
     "ensemble 'ens' step 0 (model 'add'): ensemble tensor 'B' is mapped to non-existing "
     "input 'NOPE' of model 'add' (its inputs are 'INPUT0', 'INPUT1')"),
    (_one_step(outputs={"NOPE": "OUT"}),
     "ensemble 'ens' step 0 (model 'add'): ensemble tensor 'OUT' is mapped from "
     "non-existing output 'NOPE' of model 'add' (its outputs are 'OUTPUT0', 'OUTPUT1')"),
    (_one_step(inputs={"INPUT0": "A"}, ensemble_inputs=[tensor("A")]),
     "ensemble 'ens' step 0 (model 'add'): input 'INPUT1' of model 'add' is not mapped to "
     "any ensemble tensor"),
    (_one_step(ensemble_inputs=[tensor("A", datatype="TYPE_INT32"), tensor("B")]),
     "ensemble 'ens' step 0 (model 'add'): ensemble tensor 'A': inconsistent data type: "
     "TYPE_INT32 is inferred from model 'ens' (the ensemble) while TYPE_FP32 is inferred "
     "from model 'add'"),
    (_one_step(ensemble_inputs=[tensor("A", "[ 5 ]"), tensor("B")]),
     "ensemble 'ens' step 0 (model 'add'): ensemble tensor 'A': inconsistent shape: [-1,5] "
     "is inferred from model 'ens' (the ensemble) while [-1,4] is inferred from model 'add'"),
    (_one_step(max_batch_size=16),
     "ensemble 'ens' allows maximum batch size 16, but its step 0 runs model 'add', which "
     "only allows maximum batch size to be 8"),
    (_one_step("loop"),  # 'loop' loads first, and fails: it runs 'ens', which runs it
     "ensemble 'ens' step 0: model 'loop' has no ready version: {root}/loop/config.pbtxt:7: "
     "ensemble 'loop' step 0: circular dependency between ensembles: loop -> ens -> loop"),
], ids=["unknown-model", "version-not-served", "model-failed", "unknown-input",
        "unknown-output", "input-not-mapped", "datatype", "shape", "max-batch-size",
        "circular"])
async def test_a_bad_ensemble_is_unavailable_with_its_reason_and_the_others_serve(
        tmp_path: Path, config: str, message: str) -> None:
    root = tmp_path / "models"
    save(root / "add", simple_graph(width=4), config=BATCHING)
    save(root / "broken", simple_graph(width=4), config="max_batch_size: 8\ninput [{ name: "
         '"INPUT0" data_type: TYPE_INT32 dims: [4] }]\n')
    save_ensemble(root / "loop", _one_step("ens"))
    save_ensemble(root / "ens", config)
    repository = Repository(root)
    repository.load(["add", "ens"], strict=False)
    try:
        ens = repository.get("ens")
        assert ens.state == "UNAVAILABLE"
        expected = f"{root}/ens/config.pbtxt:7: {message.format(root=root)}"
        assert ens.reason.startswith(expected), ens.reason
        with pytest.raises(ModelNotReady, match="'ens' version 1 is not ready: "):
            ens.submit({"A": A, "B": B}, 2)
        outputs = await repository.get("add").infer({"INPUT0": A, "INPUT1": B}, 2)
        np.testing.assert_allclose(outputs["OUTPUT0"], A + B)
    finally:
        await repository.stop()


async def test_an_ensemble_that_does_not_batch_passes_its_rows_to_a_model_that_does(
        tmp_path: Path) -> None:
    """Triton's rule: a non-batching ensemble's dims [-1, 4] are a batching model's [4]."""
    root = tmp_path / "models"
    save(root / "add", simple_graph(width=4), config=BATCHING)
    save_ensemble(root / "whole", ensemble_config(
        [step("add", {"INPUT0": "A", "INPUT1": "B"}, {"OUTPUT1": "OUT"})],
        [tensor("A", "[ -1, 4 ]"), tensor("B", "[ -1, 4 ]")], [tensor("OUT", "[ -1, 4 ]")],
        max_batch_size=0))
    repository = Repository(root)
    repository.load(strict=True)
    try:
        outputs = await repository.get("whole").infer({"A": A, "B": B}, 1)
        np.testing.assert_allclose(outputs["OUT"], A - B)
        assert repository.get("add").stats.inference_count == 2  # its batch had both rows
    finally:
        await repository.stop()


async def test_a_step_models_reshape_applies_on_the_way_in_and_out(tmp_path: Path) -> None:
    """Ensemble tensors have the step model's dims; its session takes its reshape."""
    root = tmp_path / "models"
    save(root / "flat", identity_graph(TensorProto.FLOAT, ["N", 4]), config=(
        'max_batch_size: 8\ninput [{ name: "IN" data_type: TYPE_FP32 dims: [2, 2] '
        'reshape { shape: [4] } }]\noutput [{ name: "OUT" data_type: TYPE_FP32 dims: [2, 2] '
        'reshape { shape: [4] } }]\n'))
    square = tensor("X", "[ 2, 2 ]")
    save_ensemble(root / "squares", ensemble_config(
        [step("flat", {"IN": "X"}, {"OUT": "Y"})], [square], [tensor("Y", "[ 2, 2 ]")]))
    repository = Repository(root)
    repository.load(strict=True)
    try:
        x = np.arange(8, dtype=np.float32).reshape(2, 2, 2)
        outputs = await repository.get("squares").infer({"X": x}, 2)
        np.testing.assert_array_equal(outputs["Y"], x)
    finally:
        await repository.stop()
