"""A model that fails to load is UNAVAILABLE with its reason while the others serve; a start
where none serves fails with every model's error; ``strict`` is the all-or-nothing start."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest
from onnx import TensorProto
from onnx_models import identity_graph, save, simple_graph

from modelfn.runtime.backends import BACKENDS
from modelfn.runtime.backends.onnxruntime import OnnxRuntimeBackend
from modelfn.runtime.errors import BackendError, ConfigError, ModelNotFound, NoModelServes
from modelfn.runtime.repository import Repository, open_repository

if TYPE_CHECKING:
    from pathlib import Path

CONTRADICTION = ('max_batch_size: 4\ninput [{ name: "IN" data_type: TYPE_FP32 dims: [3] }]\n')


def _good_and_bad(root: Path) -> Path:
    save(root / "good", identity_graph(TensorProto.INT32, ["N", 3]))
    save(root / "bad", identity_graph(TensorProto.INT32, ["N", 3]), config=CONTRADICTION)
    return root


async def test_a_model_that_fails_is_unavailable_and_the_others_serve(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="modelfn.repository")
    repo = open_repository(_good_and_bad(tmp_path / "models"))
    try:
        bad, good = repo.get("bad"), repo.get("good")
        assert (bad.state, good.state) == ("UNAVAILABLE", "READY")
        assert "TYPE_FP32" in bad.reason
        assert repo.ready  # some model serves: a readiness probe lets it
        assert [what for what, _ in repo.failures] == ["model 'bad' version 1"]
        assert "model 'bad' version 1 failed to load: " in caplog.text
        assert "UNAVAILABLE: bad:1" in caplog.text  # the ready line names it too
        x = np.array([[1, 2, 3]], np.int32)
        assert (await good.infer({"IN": x}, 1))["OUT"].tolist() == [[1, 2, 3]]
    finally:
        await repo.stop()


def test_strict_is_all_or_nothing(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="TYPE_FP32"):
        open_repository(_good_and_bad(tmp_path / "models"), strict=True)


@pytest.mark.parametrize("strict", [False, True])
def test_a_start_where_no_model_serves_fails_with_every_error(tmp_path: Path,
                                                              strict: bool) -> None:
    root = tmp_path / "models"
    save(root / "bad", identity_graph(TensorProto.INT32, ["N", 3]), config=CONTRADICTION)
    (root / "empty").mkdir()
    (root / "empty" / "config.pbtxt").write_text('name: "empty"\n')
    if strict:  # the first failure stops the start
        with pytest.raises(ConfigError, match="TYPE_FP32"):
            open_repository(root, strict=True)
        return
    with pytest.raises(NoModelServes) as info:
        open_repository(root)
    message = info.value.message
    assert message.startswith("no model can serve; model 'bad' version 1 failed to load: ")
    assert "TYPE_FP32" in message
    assert "model 'empty' failed to load: model 'empty' has no version directory" in message
    assert info.value.status_code == 400  # both are config errors: the CLI exits 2


def test_one_failed_model_is_the_whole_message_with_its_own_status(tmp_path: Path) -> None:
    save(tmp_path / "bad", identity_graph(TensorProto.INT32, ["N", 3]), config=CONTRADICTION)
    with pytest.raises(NoModelServes) as info:
        open_repository(tmp_path)
    assert info.value.message.startswith("model 'bad' version 1 failed to load: ")
    assert info.value.status_code == ConfigError.status_code


def test_a_ref_naming_a_missing_version_is_refused_either_way(tmp_path: Path) -> None:
    save(tmp_path / "m", simple_graph(width=4))
    with pytest.raises(ModelNotFound, match="'m' version 7"):
        open_repository(tmp_path, ["m:7"])


class Faulty(OnnxRuntimeBackend):
    """A backend that fails as third-party code does: with an exception of its own."""

    def load(self) -> None:
        raise ValueError("the runtime cannot parse this graph")


def test_a_backends_own_exception_is_a_clear_failure_not_a_traceback(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setitem(BACKENDS, "onnxruntime_onnx", Faulty)
    save(tmp_path / "m", simple_graph(width=4))
    repo = Repository(tmp_path)
    repo.load(strict=False)
    model = repo.get("m")
    assert model.state == "UNAVAILABLE"
    assert model.reason == "ValueError: the runtime cannot parse this graph"
    assert "Traceback" not in caplog.text
    assert "model 'm' version 1 failed to load: ValueError: the runtime" in caplog.text
    with pytest.raises(BackendError, match="ValueError: the runtime cannot parse"):
        Repository(tmp_path).load(strict=True)
    with pytest.raises(NoModelServes, match="model 'm' version 1 failed to load: ValueError"):
        open_repository(tmp_path)
