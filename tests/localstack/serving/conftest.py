"""Model repositories and specs for the serving plane's tests: real digits instances."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


@pytest.fixture(scope="session")
def repos(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """Two repositories serving digits: version 1 in one, the same model as version 2 in
    the other, so a response's ``model_version`` says which revision answered it."""
    root = tmp_path_factory.mktemp("repos")
    out = {}
    for version in (1, 2):
        model = root / f"v{version}" / "digits"
        model.mkdir(parents=True)
        shutil.copy(EXAMPLES / "models" / "digits" / "config.pbtxt", model / "config.pbtxt")
        shutil.copytree(EXAMPLES / "models" / "digits" / "1", model / str(version))
        out[version] = model.parent
    return out


@pytest.fixture(scope="session")
def digits_request() -> dict[str, Any]:
    return dict(json.loads((EXAMPLES / "requests" / "digits.json").read_text()))


@pytest.fixture(scope="session")
def digits_labels() -> list[int]:
    return list(json.loads((EXAMPLES / "requests" / "digits_expected.json").read_text())["label"])
