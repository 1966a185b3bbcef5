"""``modelfn push`` of Python models and ensembles through click, on the S3 emulator: what it
checks before a version becomes immutable, and what it says."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import pytest
from click.testing import CliRunner
from ensemble_repos import ensemble_repository
from python_models import ADD_SUB, ADD_SUB_CONFIG, save_python

from modelfn.cli.store import push
from modelfn.localstack.s3 import S3Emulator
from modelfn.model_store import open_store

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

MISSING = "modelfn-test-not-installed==1.0"


@pytest.fixture(scope="module")
def emulator() -> Iterator[S3Emulator]:
    with S3Emulator() as s3:
        yield s3


@pytest.fixture
def store(emulator: S3Emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh bucket on the S3 emulator, and the environment that reaches it."""
    bucket = f"models-{uuid.uuid4().hex[:12]}"
    emulator.create_bucket(bucket)
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                        ("AWS_DEFAULT_REGION", "us-east-1"),
                        ("MODELFN_S3_ENDPOINT", emulator.endpoint_url),
                        ("MODELFN_CACHE", str(tmp_path / "cache"))):
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("MODELFN_STORE", raising=False)
    return f"s3://{bucket}/models"


def test_a_python_model_pushes_and_names_the_requirements_missing_here(
        tmp_path: Path, store: str) -> None:
    model = tmp_path / "add_sub"
    save_python(model, ADD_SUB, ADD_SUB_CONFIG)
    (model / "1" / "requirements.txt").write_text(f"numpy\n{MISSING}\n")
    result = CliRunner().invoke(push, [str(model), "--store", store])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("pushed add_sub version 1 (digest ")
    assert result.stderr.strip() == (f"note: requirements.txt asks for {MISSING}, not "
                                     "installed here; modelfn build installs them into the "
                                     "function's image")
    files = [f.path for f in open_store(store).manifest("add_sub", 1).files]
    assert files == ["model.py", "requirements.txt"]


def test_a_python_model_that_does_not_load_is_not_pushed(tmp_path: Path, store: str) -> None:
    """push runs the model's auto_complete_config, as serve's load would: a model.py that
    fails there is refused with its error, and nothing is written."""
    model = tmp_path / "broken"
    save_python(model, "import triton_python_backend_utils as pb_utils\n"
                       "class TritonPythonModel:\n"
                       "    @staticmethod\n"
                       "    def auto_complete_config(config):\n"
                       "        raise ValueError('no such tokenizer')\n",
                'backend: "python"\n')
    result = CliRunner().invoke(push, [str(model), "--store", store])
    assert result.exit_code != 0
    assert "no such tokenizer" in result.stderr
    assert open_store(store).list_models() == []


def test_a_bad_requirement_line_is_refused_with_its_file_and_line(
        tmp_path: Path, store: str) -> None:
    model = tmp_path / "add_sub"
    save_python(model, ADD_SUB, ADD_SUB_CONFIG)
    (model / "requirements.txt").write_text("numpy\nnot a requirement ===\n")
    result = CliRunner().invoke(push, [str(model), "--store", store])
    assert result.exit_code == 2, result.output
    assert f"{model / 'requirements.txt'}:2: not a requirement" in result.stderr


def test_an_ensemble_pushes_with_the_versions_it_runs(tmp_path: Path, store: str) -> None:
    repo = ensemble_repository(tmp_path / "repo")
    refused = CliRunner().invoke(push, [str(repo / "chain"), "--store", store])
    assert refused.exit_code == 3, refused.output  # 404: models not in the store
    assert ("ensemble 'chain' runs models the model store " in refused.stderr
            and "'add' (not in the store), 'twice' (not in the store)" in refused.stderr)
    for model in ("add", "twice"):
        assert CliRunner().invoke(push, [str(repo / model), "--store", store]).exit_code == 0
    result = CliRunner().invoke(push, [str(repo / "chain"), "--store", store])
    assert result.exit_code == 0, result.output
    assert "pushed chain version 1" in result.stdout
    assert "; it runs add:1, twice:1 (a step's model_version -1 is the latest there" in \
        result.stdout
