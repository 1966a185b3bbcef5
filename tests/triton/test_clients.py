"""Triton's own example clients, unchanged, against `modelfn serve` (scripts/triton-examples).

They run only where checkouts of Triton's repositories are given
(MODELFN_TRITON_CLIENT_DIR, MODELFN_TRITON_PYTHON_BACKEND_DIR, optionally
MODELFN_TRITON_SERVER_DIR): CI reaches PyPI only, not GitHub, and this repository holds none
of Triton's code. CI covers the same requests with the same models in test_example_models.py.
The server listens on 8000 and 8001, where the clients expect it (several hard-code them).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from importlib.machinery import SourceFileLoader
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from modelfn.process.supervisor import PortInUse

if TYPE_CHECKING:
    from collections.abc import Iterator
    from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "triton-examples"


def load_harness() -> ModuleType:
    """scripts/triton-examples as the module ``triton_examples``: its cases, layout and
    runner are what these tests use."""
    if "triton_examples" in sys.modules:
        return sys.modules["triton_examples"]
    loader = SourceFileLoader("triton_examples", str(SCRIPT))
    spec = importlib.util.spec_from_loader("triton_examples", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["triton_examples"] = module  # dataclasses look their module up while defined
    loader.exec_module(module)
    return module


harness = load_harness()
checkouts = harness.find_checkouts(os.environ.get("MODELFN_TRITON_CLIENT_DIR"),
                                   os.environ.get("MODELFN_TRITON_PYTHON_BACKEND_DIR"),
                                   os.environ.get("MODELFN_TRITON_SERVER_DIR"))
runnable, decided = harness.plan(harness.CASES, checkouts)
not_run = {outcome.case.name: outcome for outcome in decided}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One repository with every model the runnable clients call, served as Triton serves
    its repository; the fill-ins for the clients' arguments."""
    work: Path = tmp_path_factory.mktemp("triton-examples")
    repo, image = work / "models", harness.write_image(work / "image.jpg")
    models = {name for case in runnable for name in case.models}
    harness.layout(repo, models, checkouts)
    try:
        with harness.serving(repo, models, work / "server.log") as unready:
            yield {"fill": {"image": str(image), "repo": str(repo)}, "work": work,
                   "unready": unready}
    except PortInUse as exc:
        pytest.skip(f"{exc}: Triton's clients hard-code ports 8000 and 8001")


@pytest.mark.parametrize("case", harness.CASES, ids=lambda case: case.name)
def test_client(case: Any, request: pytest.FixtureRequest) -> None:
    if case.name in not_run:
        pytest.skip(f"{not_run[case.name].status.lower()}: {not_run[case.name].detail}")
    served = request.getfixturevalue("served")
    outcome = harness.run_client(case, checkouts.of(case), served["fill"], served["work"])
    unready = {name: why for name, why in served["unready"].items() if name in case.models}
    assert outcome.status == "PASS", f"{outcome.detail}\nnot ready: {unready}"
