"""`modelfn serve` of a repository where a model fails to load: by default that model is
UNAVAILABLE with its reason and the others serve; ``--exit-on-error`` is Triton's all or
nothing; a start where no model loads fails either way. Real processes, tritonclient."""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx
import numpy as np
import tritonclient.http as triton
from onnx import TensorProto
from onnx_models import identity_graph, save
from servers import Server, serving

if TYPE_CHECKING:
    from pathlib import Path

CONTRADICTION = ('max_batch_size: 4\ninput [{ name: "IN" data_type: TYPE_FP32 dims: [3] }]\n')
REASON = "input 'IN': config data_type TYPE_FP32 but the model declares TYPE_INT32"


def _repo(root: Path, *, good: bool = True) -> Path:
    if good:
        save(root / "good", identity_graph(TensorProto.INT32, ["N", 3]))
    save(root / "bad", identity_graph(TensorProto.INT32, ["N", 3]), config=CONTRADICTION)
    return root


def test_a_broken_model_is_unavailable_with_its_reason_and_the_others_serve(
        tmp_path: Path) -> None:
    with serving(_repo(tmp_path / "models")) as srv:
        client = triton.InferenceServerClient(srv.url)
        assert client.is_server_ready()  # a readiness probe lets the good model serve
        assert client.is_model_ready("good") and not client.is_model_ready("bad")
        ready = httpx.get(f"http://{srv.url}/v2/models/bad/ready")
        assert ready.status_code == 503
        assert ready.json()["error"].startswith("Model 'bad' version 1 is not ready: ")
        assert REASON in ready.json()["error"]
        index = {m["name"]: m for m in client.get_model_repository_index()}
        assert index["bad"]["state"] == "UNAVAILABLE" and REASON in index["bad"]["reason"]
        assert index["good"]["state"] == "READY"
        refused = httpx.post(f"http://{srv.url}/v2/models/bad/infer", content=b"{}")
        assert refused.status_code == 503 and REASON in refused.json()["error"]
        x = np.array([[1, 2, 3]], np.int32)
        inp = triton.InferInput("IN", [1, 3], "INT32")
        inp.set_data_from_numpy(x)
        assert client.infer("good", [inp]).as_numpy("OUT").tolist() == [[1, 2, 3]]
        log = srv.proc.tail()
    assert "model 'bad' version 1 failed to load: " in log and REASON in log
    assert "ready: good:1" in log and "UNAVAILABLE: bad:1" in log
    assert "Traceback" not in log


def test_exit_on_error_is_all_or_nothing(tmp_path: Path) -> None:
    srv = Server(_repo(tmp_path / "models"), "--exit-on-error")
    out = srv.wait_exit()
    assert srv.proc.returncode == 2, out  # a config error
    assert REASON in out and "Traceback" not in out


def test_a_start_where_no_model_loads_fails_naming_the_model(tmp_path: Path) -> None:
    srv = Server(_repo(tmp_path / "models", good=False))
    out = srv.wait_exit()
    assert srv.proc.returncode == 2, out
    assert "Error: model 'bad' version 1 failed to load: " in out and REASON in out
    assert "Traceback" not in out
