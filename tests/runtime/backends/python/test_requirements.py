"""A Python model's requirements.txt: what is missing is said at load, and callable by push."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import pytest
from python_models import ADD_SUB, ADD_SUB_CONFIG, AUTO_COMPLETE, save_python

from modelfn.runtime.backends.python.requirements import missing_requirements
from modelfn.runtime.errors import ConfigError
from modelfn.runtime.repository import Repository, check_version

if TYPE_CHECKING:
    from pathlib import Path

REQUIREMENTS = """\
# pre-processing
numpy>=1.0
modelfn-surely-not-installed==1.0  # a pinned one that is not here
numpy<1 ; python_version < "3"
-r more.txt
--index-url https://example.invalid/simple
"""


def test_missing_requirements_names_what_is_not_installed(tmp_path: Path) -> None:
    save_python(tmp_path / "m", ADD_SUB, ADD_SUB_CONFIG)
    (tmp_path / "m" / "1" / "requirements.txt").write_text(REQUIREMENTS)
    (tmp_path / "m" / "requirements.txt").write_text("numpy<1.0\n")
    assert missing_requirements(tmp_path / "m")[0].startswith("numpy<1.0 (")
    assert missing_requirements(tmp_path / "m")[1:] == ["modelfn-surely-not-installed==1.0"]


def test_a_line_that_is_no_requirement_names_its_file_and_line(tmp_path: Path) -> None:
    save_python(tmp_path / "m", ADD_SUB, ADD_SUB_CONFIG)
    (tmp_path / "m" / "requirements.txt").write_text("numpy\nnot a requirement!\n")
    with pytest.raises(ConfigError, match=r"requirements.txt:2: not a requirement"):
        missing_requirements(tmp_path / "m")


async def test_serve_warns_of_missing_requirements_naming_the_model(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    save_python(tmp_path / "add_sub", ADD_SUB, ADD_SUB_CONFIG)
    (tmp_path / "add_sub" / "1" / "requirements.txt").write_text(REQUIREMENTS)
    repository = Repository(tmp_path)
    with caplog.at_level(logging.WARNING, logger="modelfn.python"):
        repository.load(strict=True)
    await repository.stop()
    assert ("model add_sub: requirements.txt asks for modelfn-surely-not-installed==1.0, "
            "not installed here") in caplog.text


def test_push_checks_a_python_model_with_its_auto_complete_config(tmp_path: Path) -> None:
    save_python(tmp_path / "auto", AUTO_COMPLETE)
    config = check_version(tmp_path / "auto")
    assert config.max_batch_size == 4 and config.backend == "python"
    assert [t.name for t in config.inputs] == ["INPUT0", "INPUT1"]
    assert config.to_json()["platform"] == ""
