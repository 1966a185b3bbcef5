"""Ensembles and Python models in the store, on every backend: what a push records and
refuses, what a fetch lays out, and which versions a function serving an ensemble loads."""

from __future__ import annotations

import json
import shutil
from typing import TYPE_CHECKING, Any

import pytest
from ensemble_repos import ensemble_config as ensemble
from ensemble_repos import ensemble_repository, save_ensemble, step, tensor
from onnx_models import save, simple_graph
from python_models import ADD_SUB, ADD_SUB_CONFIG, save_python

from modelfn.model_store.composing import function_models
from modelfn.model_store.errors import CorruptObject, MissingComposingModels
from modelfn.model_store.manifest import MANIFEST_NAME, ModelRef
from modelfn.runtime.errors import ConfigError, InvalidInput

if TYPE_CHECKING:
    from pathlib import Path

    from modelfn.model_store import ModelStore


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return ensemble_repository(tmp_path / "repo")


def test_an_ensemble_whose_models_are_not_in_the_store_is_refused_naming_them(
        store: ModelStore, repo: Path) -> None:
    with pytest.raises(MissingComposingModels) as caught:
        store.push(repo / "chain")
    assert caught.value.status_code == 404
    assert "'add' (not in the store), 'twice' (not in the store)" in caught.value.message
    store.push(repo / "add")
    assert store.list_models() == ["add"]  # nothing of the ensemble was written
    pinned = ensemble([step("add", {"INPUT0": "A", "INPUT1": "B"}, {"OUTPUT0": "OUT"},
                            version=3)], [tensor("A"), tensor("B")], [tensor("OUT")])
    save_ensemble(repo / "pinned", pinned)
    with pytest.raises(MissingComposingModels, match=r"'add' version 3 \(versions there: 1\)"):
        store.push(repo / "pinned")


def test_a_push_records_each_step_at_the_version_it_resolves_to_now(
        store: ModelStore, repo: Path) -> None:
    """-1 is the store's latest at the push: a later version of a step's model changes
    nothing pushed; pushing the ensemble again records it, as a new version."""
    store.push(repo / "add")
    store.push(repo / "twice")
    first = store.push(repo / "chain")
    assert (first.version, first.created) == (1, True)
    assert first.composing == (ModelRef("add", 1), ModelRef("twice", 1))
    assert "it runs add:1, twice:1" in first.message
    assert store.manifest("chain", 1).composing == first.composing
    assert store.manifest("chain", 1).files == ()  # its version directory is empty

    again = store.push(repo / "chain")
    assert (again.version, again.created) == (1, False)
    assert "it runs add:1, twice:1" in again.message

    save(repo / "add", simple_graph(width=4, scale=3.0), version=2)
    store.push(repo / "add")
    assert store.manifest("chain", 1).composing == first.composing
    newer = store.push(repo / "chain")
    assert (newer.version, newer.created) == (2, True)
    assert newer.composing == (ModelRef("add", 2), ModelRef("twice", 1))
    assert newer.digest != first.digest

    fetched = store.fetch("chain", 2) / "chain"
    assert sorted(p.name for p in fetched.iterdir()) == ["2", "config.pbtxt"]
    assert list((fetched / "2").iterdir()) == []


def test_a_step_that_does_not_fit_its_model_is_refused(store: ModelStore, repo: Path) -> None:
    store.push(repo / "add")
    wrong = ensemble([step("add", {"INPUT0": "A", "NOPE": "B"}, {"OUTPUT0": "OUT"})],
                     [tensor("A"), tensor("B")], [tensor("OUT")])
    save_ensemble(repo / "wrong", wrong)
    with pytest.raises(ConfigError) as caught:
        store.push(repo / "wrong")
    assert "non-existing input 'NOPE' of model 'add'" in caught.value.message
    assert f"checked against add:1 in {store.uri}" in caught.value.message
    assert "wrong" not in store.list_models()


def test_a_function_serving_an_ensemble_loads_its_models_first(
        store: ModelStore, repo: Path) -> None:
    """Nested ensembles too: an ensemble step's own models come before it."""
    for model in ("add", "twice", "chain"):
        store.push(repo / model)
    outer = ensemble([step("chain", {"A": "X", "B": "Y"}, {"OUT": "Z"}),
                      step("add", {"INPUT0": "Z", "INPUT1": "Y"}, {"OUTPUT0": "OUT"})],
                     [tensor("X"), tensor("Y")], [tensor("OUT")])
    save_ensemble(repo / "outer", outer)
    assert store.push(repo / "outer").composing == (ModelRef("add", 1), ModelRef("chain", 1))
    assert [str(r) for r in function_models(store, "outer", 1)] == [
        "add:1", "twice:1", "chain:1", "outer:1"]
    assert function_models(store, "add", 1) == [ModelRef("add", 1)]

    save(repo / "add", simple_graph(width=4, scale=3.0), version=2)
    store.push(repo / "add")
    save_ensemble(repo / "mixed", outer)
    store.push(repo / "mixed")  # add:2 (latest) beside chain:1, which runs add:1
    with pytest.raises(InvalidInput, match="runs model 'add' at versions 1 and 2"):
        function_models(store, "mixed", 1)


def test_composing_models_are_part_of_the_manifest_digest(
        harness: Any, repo: Path) -> None:
    store = harness.store
    store.push(repo / "add")
    store.push(repo / "twice")
    store.push(repo / "chain")
    key = f"chain/1/{MANIFEST_NAME}"
    doc = json.loads(harness.get_raw(key))
    doc["composing"][0]["version"] = 7  # another version, behind the store's back
    harness.put_raw(key, json.dumps(doc).encode())
    with pytest.raises(CorruptObject, match="the digest does not match"):
        store.manifest("chain", 1)


def test_an_ensemble_cannot_run_itself(store: ModelStore, repo: Path) -> None:
    itself = ensemble([step("loop", {"A": "A"}, {"OUT": "OUT"})], [tensor("A")],
                      [tensor("OUT")])
    save_ensemble(repo / "loop", itself)
    with pytest.raises(ConfigError, match="an ensemble cannot contain itself"):
        store.push(repo / "loop")


def test_a_python_model_pushes_its_files_and_its_requirements(
        store: ModelStore, tmp_path: Path) -> None:
    """Everything in the version directory goes (model.py, a helper module, a
    requirements.txt beside them), and the model directory's requirements.txt with it; the
    interpreter's bytecode caches do not."""
    model = tmp_path / "local" / "add_sub"
    save_python(model, ADD_SUB, ADD_SUB_CONFIG)
    (model / "1" / "helpers.py").write_text("SCALE = 2\n")
    (model / "1" / "requirements.txt").write_text("numpy\n")
    (model / "requirements.txt").write_text("packaging>=20\n")
    (model / "1" / "__pycache__").mkdir()
    (model / "1" / "__pycache__" / "helpers.cpython-312.pyc").write_bytes(b"\x00" * 16)
    result = store.push(model)
    manifest = store.manifest("add_sub", result.version)
    assert [f.path for f in manifest.files] == ["helpers.py", "model.py", "requirements.txt"]
    assert [f.path for f in manifest.model_files] == ["requirements.txt"]
    fetched = store.fetch("add_sub", result.version) / "add_sub"
    assert (fetched / "requirements.txt").read_text() == "packaging>=20\n"
    assert (fetched / "1" / "requirements.txt").read_text() == "numpy\n"

    shutil.rmtree(model / "1" / "__pycache__")
    assert store.push(model).created is False  # the caches were never part of it
