"""The V2 app in-process: every endpoint and every error, over real ASGI calls."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np
import orjson
import pytest
import tritonclient.http as triton
from onnx import TensorProto
from onnx_models import failing_graph, identity_graph, save
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect

from modelfn.net.fast_path import HANG_UP
from modelfn.protocol.rest import create_app, infer_params, withdrawn_on_hang_up
from modelfn.runtime.errors import ConfigError
from modelfn.runtime.repository import Repository

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path


def _app(repo_path: Path, *, strict: bool = True, **kw: Any) -> Starlette:
    repository = Repository(repo_path)
    repository.load(strict=strict)
    return create_app(repository, **kw)


@pytest.fixture
async def client(simple_repo: Path) -> AsyncIterator[httpx.AsyncClient]:
    app = _app(simple_repo)
    async with app.router.lifespan_context(app), httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://modelfn"
    ) as c:
        yield c


def _simple_request(a: np.ndarray, b: np.ndarray, **extra: Any) -> dict[str, Any]:
    return {
        "inputs": [
            {"name": "INPUT0", "shape": list(a.shape), "datatype": "FP32",
             "data": a.ravel().tolist()},
            {"name": "INPUT1", "shape": list(b.shape), "datatype": "FP32",
             "data": b.tolist()},  # nested form
        ],
        **extra,
    }


def _outputs(body: dict[str, Any]) -> dict[str, np.ndarray]:
    return {o["name"]: np.array(o["data"], dtype=np.float32).reshape(o["shape"])
            for o in body["outputs"]}


async def test_health_and_server_metadata(client: httpx.AsyncClient) -> None:
    live = await client.get("/v2/health/live")
    assert live.status_code == 200 and live.json() == {"live": True}
    ready = await client.get("/v2/health/ready")
    assert ready.status_code == 200 and ready.json() == {"ready": True}
    meta = (await client.get("/v2")).json()
    assert meta["name"] == "modelfn"
    assert {"binary_tensor_data", "model_configuration", "statistics",
            "model_repository"} <= set(meta["extensions"])


async def test_model_metadata_lists_ready_versions_and_batch_dim(
    client: httpx.AsyncClient,
) -> None:
    meta = (await client.get("/v2/models/simple")).json()
    assert meta["name"] == "simple"
    assert meta["versions"] == ["1", "2"]
    assert meta["platform"] == "onnxruntime_onnx"
    assert meta["inputs"] == [
        {"name": "INPUT0", "datatype": "FP32", "shape": [-1, 16]},
        {"name": "INPUT1", "datatype": "FP32", "shape": [-1, 16]},
    ]
    versioned = (await client.get("/v2/models/simple/versions/1")).json()
    assert versioned["versions"] == ["1"]


async def test_model_ready(client: httpx.AsyncClient) -> None:
    response = await client.get("/v2/models/simple/versions/2/ready")
    assert response.status_code == 200
    assert response.json() == {"name": "simple", "ready": True}


async def test_config_is_the_completed_config(client: httpx.AsyncClient) -> None:
    config = (await client.get("/v2/models/simple/config")).json()
    assert config["name"] == "simple"
    assert config["platform"] == "onnxruntime_onnx"
    assert config["max_batch_size"] == 4
    assert "dynamic_batching" in config
    assert [i["name"] for i in config["input"]] == ["INPUT0", "INPUT1"]
    assert config["input"][0]["dims"] == [16]


@pytest.mark.parametrize(("path", "scale"), [
    ("/v2/models/simple/infer", 2.0),  # no version: the newest ready one
    ("/v2/models/simple/versions/1/infer", 1.0),
    ("/v2/models/simple/versions/2/infer", 2.0),
])
async def test_json_infer_routes_to_the_right_version(
    client: httpx.AsyncClient, rng: np.random.Generator, path: str, scale: float
) -> None:
    a = rng.random((3, 16), dtype=np.float32)
    b = rng.random((3, 16), dtype=np.float32)
    response = await client.post(path, content=orjson.dumps(_simple_request(a, b, id="r1")))
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["model_name"] == "simple"
    assert body["model_version"] == ("1" if scale == 1.0 else "2")
    assert body["id"] == "r1"
    out = _outputs(body)
    np.testing.assert_allclose(out["OUTPUT0"], (a + b) * scale, rtol=1e-6)
    np.testing.assert_allclose(out["OUTPUT1"], a - b, rtol=1e-6)


async def test_binary_infer_with_tritonclient_encoding(
    client: httpx.AsyncClient, rng: np.random.Generator
) -> None:
    a = rng.random((2, 16), dtype=np.float32)
    b = rng.random((2, 16), dtype=np.float32)
    inputs = [triton.InferInput("INPUT0", [2, 16], "FP32"),
              triton.InferInput("INPUT1", [2, 16], "FP32")]
    inputs[0].set_data_from_numpy(a, binary_data=True)
    inputs[1].set_data_from_numpy(b, binary_data=True)
    outputs = [triton.InferRequestedOutput("OUTPUT0", binary_data=True),
               triton.InferRequestedOutput("OUTPUT1", binary_data=False)]
    body, json_size = triton.InferenceServerClient.generate_request_body(inputs, outputs=outputs)
    response = await client.post(
        "/v2/models/simple/versions/1/infer", content=body,
        headers={"Inference-Header-Content-Length": str(json_size),
                 "Content-Type": "application/octet-stream"},
    )
    assert response.status_code == 200, response.text
    header = response.headers.get("inference-header-content-length")
    assert header is not None
    result = triton.InferResult.from_response_body(response.content, header_length=int(header))
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b, rtol=1e-6)
    np.testing.assert_allclose(result.as_numpy("OUTPUT1"), a - b, rtol=1e-6)


@pytest.mark.parametrize(("path", "body", "status", "message"), [
    ("/v2/models/simple/infer", b"{not json", 400, "JSON"),
    ("/v2/models/nope/infer", b"{}", 404, "unknown model"),
    ("/v2/models/simple/versions/7/infer", b"{}", 404, "version 7"),
    ("/v2/models/simple/infer",
     orjson.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP64",
                               "data": [0.0] * 16}]}), 400, "FP64"),
    ("/v2/models/simple/infer",
     orjson.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 15], "datatype": "FP32",
                               "data": [0.0] * 15},
                              {"name": "INPUT1", "shape": [1, 15], "datatype": "FP32",
                               "data": [0.0] * 15}]}), 400, "shape"),
    ("/v2/models/simple/infer",
     orjson.dumps({"inputs": [{"name": "BOGUS", "shape": [1, 16], "datatype": "FP32",
                               "data": [0.0] * 16}]}), 400, "BOGUS"),
    ("/v2/models/simple/infer",
     orjson.dumps({"inputs": [{"name": "INPUT0", "shape": [5, 16], "datatype": "FP32",
                               "data": [0.0] * 80},
                              {"name": "INPUT1", "shape": [5, 16], "datatype": "FP32",
                               "data": [0.0] * 80}]}), 400, "batch"),
    ("/v2/models/..%2F..%2Fetc/infer", b"{}", 404, ""),
])
async def test_bad_requests_get_precise_errors_and_the_server_keeps_serving(
    client: httpx.AsyncClient, path: str, body: bytes, status: int, message: str
) -> None:
    response = await client.post(path, content=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert message.lower() in error.lower()
    ok = np.ones((1, 16), dtype=np.float32)
    again = await client.post("/v2/models/simple/infer", content=orjson.dumps(
        _simple_request(ok, ok)))
    assert again.status_code == 200


async def test_bad_header_length_is_400(client: httpx.AsyncClient) -> None:
    response = await client.post("/v2/models/simple/infer", content=b"{}",
                                 headers={"Inference-Header-Content-Length": "abc"})
    assert response.status_code == 400
    assert "Inference-Header-Content-Length" in response.json()["error"]


async def test_oversize_body_is_413(simple_repo: Path) -> None:
    app = _app(simple_repo, max_body_bytes=1000)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://modelfn") as c:
        response = await c.post("/v2/models/simple/infer", content=b"x" * 5000)
        assert response.status_code == 413
        assert "exceeds the limit of 1000 bytes" in response.json()["error"]
        await app.state.repository.stop()


async def test_unknown_route_and_method(client: httpx.AsyncClient) -> None:
    missing = await client.get("/v3/nothing")
    assert missing.status_code == 404 and "no route" in missing.json()["error"]
    wrong = await client.get("/v2/models/simple/infer")
    assert wrong.status_code == 405 and "error" in wrong.json()
    assert wrong.headers["allow"] == "POST"
    put = await client.put("/v2/health/ready")
    assert put.status_code == 405 and set(put.headers["allow"].split(", ")) == {"GET", "HEAD"}


async def test_a_shared_memory_request_is_501_and_not_an_error_in_the_log(
    client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    region = {"shared_memory_region": "r", "shared_memory_byte_size": 64}
    body = {"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32",
                        "parameters": region}]}
    with caplog.at_level("INFO", "modelfn.app"):
        answer = await client.post("/v2/models/simple/infer", json=body)
    assert answer.status_code == 501
    assert "shared memory, which is not supported" in answer.json()["error"]
    assert [r.levelname for r in caplog.records if r.name == "modelfn.app"] == ["INFO"]


async def test_statistics_count_requests_rows_and_batches(
    client: httpx.AsyncClient,
) -> None:
    x = np.ones((2, 16), dtype=np.float32)
    for _ in range(3):
        assert (await client.post("/v2/models/simple/versions/1/infer",
                                  content=orjson.dumps(_simple_request(x, x)))).status_code == 200
    await client.post("/v2/models/simple/versions/1/infer", content=b"[]")
    stats = (await client.get("/v2/models/simple/versions/1/stats")).json()["model_stats"]
    assert len(stats) == 1
    s = stats[0]
    assert (s["name"], s["version"]) == ("simple", "1")
    assert s["inference_stats"]["success"]["count"] == 3
    assert s["inference_stats"]["fail"]["count"] == 1
    assert s["inference_count"] == 6
    assert 1 <= s["execution_count"] <= 3
    every = (await client.get("/v2/models/stats")).json()["model_stats"]
    assert {(m["name"], m["version"]) for m in every} == {
        ("simple", "1"), ("simple", "2"), ("identity_int32", "1")}
    per_model = (await client.get("/v2/models/simple/stats")).json()["model_stats"]
    assert {m["version"] for m in per_model} == {"1", "2"}


async def test_metrics_use_triton_names_and_labels(client: httpx.AsyncClient) -> None:
    x = np.ones((3, 16), dtype=np.float32)
    await client.post("/v2/models/simple/versions/1/infer",
                      content=orjson.dumps(_simple_request(x, x)))
    await client.post("/v2/models/simple/versions/1/infer", content=b"{bad")
    response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples = {
        (family.name, s.labels.get("model"), s.labels.get("version"), s.labels.get("reason")):
        s.value
        for family in text_string_to_metric_families(response.text) for s in family.samples
    }
    assert samples[("nv_inference_request_success", "simple", "1", None)] == 1
    assert samples[("nv_inference_request_failure", "simple", "1", "OTHER")] == 1
    assert samples[("nv_inference_count", "simple", "1", None)] == 3
    assert samples[("nv_inference_exec_count", "simple", "1", None)] == 1
    for name in ("nv_inference_pending_request_count", "nv_inference_request_duration_us",
                 "nv_inference_queue_duration_us", "nv_inference_compute_input_duration_us",
                 "nv_inference_compute_infer_duration_us",
                 "nv_inference_compute_output_duration_us", "nv_model_load_duration_secs"):
        assert (name, "simple", "1", None) in samples, name
    assert "nv_inference_count{" in response.text  # no _total suffix: Triton's exact names


async def test_outputs_that_do_not_fit_the_config_count_once_as_a_failure(
        tmp_path: Path) -> None:
    """The model answers (the batcher counts a success), then its output cannot take the
    config's reshape: the request is one failure, not a success and a failure."""
    repo = tmp_path / "models"
    save(repo / "misfit", identity_graph(TensorProto.FLOAT, ["N", "D"]), config=(
        'name: "misfit"\nmax_batch_size: 4\n'
        'input [{ name: "IN" data_type: TYPE_FP32 dims: [-1] }]\n'
        'output [{ name: "OUT" data_type: TYPE_FP32 dims: [2, 2] reshape: { shape: [4] } }]\n'))
    app = _app(repo)
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://modelfn") as c:
        for data in ([1, 2, 3], [1, 2, 3, 4]):
            await c.post("/v2/models/misfit/infer", content=orjson.dumps({"inputs": [
                {"name": "IN", "shape": [1, len(data)], "datatype": "FP32", "data": data}]}))
        stats = (await c.get("/v2/models/misfit/stats")).json()["model_stats"][0]
    inference = stats["inference_stats"]
    assert (inference["success"]["count"], inference["fail"]["count"]) == (1, 1)
    assert inference["success"]["ns"] > 0 and inference["fail"]["ns"] > 0
    # the reason /metrics gives it (nv_inference_request_failure{reason=...})
    assert app.state.repository.get("misfit").stats.failures["BACKEND"] == 1


async def test_repository_index(client: httpx.AsyncClient) -> None:
    index = (await client.post("/v2/repository/index", content=b'{"ready": true}')).json()
    assert {(m["name"], m["version"], m["state"]) for m in index} == {
        ("simple", "1", "READY"), ("simple", "2", "READY"), ("identity_int32", "1", "READY")}
    bad = await client.post("/v2/repository/index", content=b"{nope")
    assert bad.status_code == 400


async def test_broken_model_is_unavailable_and_the_rest_serve(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    save(repo / "good", identity_graph(TensorProto.INT32, ["N", 3]))
    save(repo / "bad", identity_graph(TensorProto.INT32, ["N", 3]),
         config='name: "bad"\nmax_batch_size: 4\ninput [{ name: "IN" data_type: TYPE_FP32 '
                'dims: [3] }]\n')
    app = _app(repo, strict=False)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://modelfn") as c:
        # the server is ready: its start is over and a model serves (not Triton's
        # strict readiness); the broken model says it is not, and why
        assert (await c.get("/v2/health/ready")).status_code == 200
        assert (await c.get("/v2/models/good/ready")).json() == {"name": "good",
                                                                  "ready": True}
        for path in ("/v2/models/bad/ready", "/v2/models/bad/versions/1/ready"):
            not_ready = await c.get(path)
            assert not_ready.status_code == 503, path
            assert not_ready.json()["ready"] is False
            assert not_ready.json()["error"].startswith(
                "Model 'bad' version 1 is not ready: "), path
            assert "TYPE_FP32" in not_ready.json()["error"], path
        index = (await c.post("/v2/repository/index")).json()
        bad = next(m for m in index if m["name"] == "bad")
        assert bad["state"] == "UNAVAILABLE" and "TYPE_FP32" in bad["reason"]
        for query, names in ((b'{"ready": false}', {"good", "bad"}),
                             (b'{"ready": true}', {"good"})):
            index = (await c.post("/v2/repository/index", content=query)).json()
            assert {m["name"] for m in index} == names, query
        for query in (b'{"ready": "false"}', b'{"ready": 0}', b'{"ready": null}'):
            refused = await c.post("/v2/repository/index", content=query)
            assert refused.status_code == 400, query
            assert refused.json()["error"].startswith(
                "repository index 'ready' must be true or false, not "), query
        response = await c.post("/v2/models/bad/infer", content=b"{}")
        assert response.status_code == 503
        good = await c.post("/v2/models/good/infer", content=orjson.dumps({"inputs": [
            {"name": "IN", "shape": [1, 3], "datatype": "INT32", "data": [1, 2, 3]}]}))
        assert good.status_code == 200 and good.json()["outputs"][0]["data"] == [1, 2, 3]
        await app.state.repository.stop()


async def test_backend_failure_is_500_with_the_backend_message(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    save(repo / "failing", failing_graph(),
         config='max_batch_size: 0\ninput [{ name: "X" data_type: TYPE_FP32 dims: [-1, 4] },'
                '{ name: "target" data_type: TYPE_INT64 dims: [-1] }]\n'
                'output [{ name: "Y" data_type: TYPE_FP32 dims: [-1] }]\n'
                'model_warmup [{ name: "w" batch_size: 1 inputs { key: "X" value: '
                '{ data_type: TYPE_FP32 dims: [1, 4] zero_data: true } } inputs { key: "target" '
                'value: { data_type: TYPE_INT64 dims: [1] input_data_file: "four" } } }]\n')
    (repo / "failing" / "warmup").mkdir()
    (repo / "failing" / "warmup" / "four").write_bytes(np.array([4], np.int64).tobytes())
    app = _app(repo)
    request = {"inputs": [
        {"name": "X", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]},
        {"name": "target", "shape": [1], "datatype": "INT64", "data": [3]}]}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://modelfn") as c:
        response = await c.post("/v2/models/failing/infer", content=orjson.dumps(request))
        assert response.status_code == 500
        assert "onnxruntime failed" in response.json()["error"]
        request["inputs"][1]["data"] = [4]  # type: ignore[index]
        ok = await c.post("/v2/models/failing/infer", content=orjson.dumps(request))
        assert ok.status_code == 200, ok.text
        assert ok.json()["outputs"][0]["data"] == [1.0, 2.0, 3.0, 4.0]
        await app.state.repository.stop()


async def test_classification_with_a_label_file(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    save(repo / "scores", identity_graph(TensorProto.FLOAT, ["N", 3]), config=(
        'max_batch_size: 4\ninput [{ name: "IN" data_type: TYPE_FP32 dims: [3] }]\n'
        'output [{ name: "OUT" data_type: TYPE_FP32 dims: [3] label_filename: "labels.txt" }]\n'))
    (repo / "scores" / "labels.txt").write_text("cat\ndog\nbird\n")
    app = _app(repo)
    request = {"inputs": [{"name": "IN", "shape": [2, 3], "datatype": "FP32",
                           "data": [0.1, 0.7, 0.2, 0.5, 0.2, 0.3]}],
               "outputs": [{"name": "OUT", "parameters": {"classification": 2}}]}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://modelfn") as c:
        response = await c.post("/v2/models/scores/infer", content=orjson.dumps(request))
        assert response.status_code == 200, response.text
        out = response.json()["outputs"][0]
        assert out["datatype"] == "BYTES" and out["shape"] == [2, 2]
        assert out["data"] == ["0.700000:1:dog", "0.200000:2:bird",
                               "0.500000:0:cat", "0.300000:2:bird"]
        await app.state.repository.stop()


def test_a_missing_label_file_fails_the_load(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    save(repo / "scores", identity_graph(TensorProto.FLOAT, ["N", 3]), config=(
        'max_batch_size: 4\n'
        'output [{ name: "OUT" data_type: TYPE_FP32 dims: [3] label_filename: "labels.txt" }]\n'))
    with pytest.raises(ConfigError, match="cannot read label file scores/labels.txt"):
        Repository(repo).load()


# the infer shortcut (V2App) answers exactly as Starlette's route does -------------------------

@pytest.mark.parametrize(("path", "params"), [
    ("/v2/models/simple/infer", {"model": "simple"}),
    ("/v2/models/simple/versions/2/infer", {"model": "simple", "version": "2"}),
    ("/v2/models//infer", None),
    ("/v2/models/infer", None),
    ("/v2/models/a/b/infer", None),
    ("/v2/models/a/versions//infer", None),
    ("/v2/models/a/versions/1/2/infer", None),
    ("/v2/models/simple/inferx", None),
    ("/v2/models/simple", None),
])
def test_infer_params_match_what_the_routes_match(path: str,
                                                  params: dict[str, str] | None) -> None:
    assert infer_params(path) == params


@pytest.fixture
async def both(simple_repo: Path) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    """Two clients on one app: through the shortcut, and through Starlette's stack alone."""
    app = _app(simple_repo, max_body_bytes=2000)

    async def starlette_only(scope: Any, receive: Any, send: Any) -> None:
        await Starlette.__call__(app, scope, receive, send)

    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://m") as fast,
        httpx.AsyncClient(transport=httpx.ASGITransport(app=starlette_only),
                          base_url="http://m") as slow,
    ):
        yield fast, slow


_CASES: list[tuple[str, bytes, dict[str, str]]] = [
    ("/v2/models/simple/infer", orjson.dumps(_simple_request(
        np.ones((1, 16), np.float32), np.ones((1, 16), np.float32))), {}),
    ("/v2/models/simple/versions/2/infer", orjson.dumps(_simple_request(
        np.ones((1, 16), np.float32), np.ones((1, 16), np.float32))), {}),
    ("/v2/models/missing/infer", b"{}", {}),
    ("/v2/models/simple/versions/9/infer", b"{}", {}),
    ("/v2/models/simple/infer", b"{not json", {}),
    ("/v2/models/simple/infer", b"{}", {"Inference-Header-Content-Length": "abc"}),
    ("/v2/models/simple/infer", b"x" * 5000, {}),
    ("/v2/models/simple/infer", b"x" * 5000, {"Inference-Header-Content-Length": "2"}),
]


@pytest.mark.parametrize(("path", "body", "headers"), _CASES)
async def test_shortcut_answers_as_starlette_does(
    both: tuple[httpx.AsyncClient, httpx.AsyncClient], path: str, body: bytes,
    headers: dict[str, str],
) -> None:
    fast, slow = both
    a = await fast.post(path, content=body, headers=headers)
    b = await slow.post(path, content=body, headers=headers)
    assert (a.status_code, a.content) == (b.status_code, b.content)
    assert a.headers == b.headers


async def test_shortcut_leaves_other_methods_to_the_router(
    both: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    fast, _ = both
    wrong = await fast.get("/v2/models/simple/infer")
    assert wrong.status_code == 405 and wrong.headers["allow"] == "POST"
    odd = await fast.post("/v2/models/a/b/infer", content=b"{}")
    assert odd.status_code == 404
    assert odd.json() == {"error": "no route for POST /v2/models/a/b/infer"}


async def test_shortcut_raises_an_unexpected_error_after_its_500(
    simple_repo: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    app = _app(simple_repo)

    async def boom(scope: Any, receive: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(app.infer, "answer", boom)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://m") as c:
        response = await c.post("/v2/models/simple/infer", content=b"{}")
    assert response.status_code == 500
    assert response.json() == {"error": "internal error: RuntimeError: boom"}
    with pytest.raises(RuntimeError, match="boom"):  # as ServerErrorMiddleware does
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://m") as c:
            await c.post("/v2/models/simple/infer", content=b"{}")
    await app.state.repository.stop()


async def _work(log: list[str], seconds: float) -> str:
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        log.append("cancelled")
        raise
    return "answer"


async def test_an_answer_leaves_no_hook_behind() -> None:
    """Without a hang-up the answer is returned, and the hook is gone from the scope: a
    server that never calls it (Mangum) pays nothing more."""
    scope: dict[str, Any] = {}
    log: list[str] = []
    assert await withdrawn_on_hang_up(scope, _work(log, 0.01)) == "answer"
    assert log == [] and scope == {}


async def test_a_hang_up_cancels_the_work_before_it_is_answered() -> None:
    scope: dict[str, Any] = {}
    log: list[str] = []
    asyncio.get_running_loop().call_later(0.01, lambda: scope[HANG_UP]())
    with pytest.raises(ClientDisconnect):
        await withdrawn_on_hang_up(scope, _work(log, 10))
    assert log == ["cancelled"]  # withdrawn before ClientDisconnect was raised
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_cancelling_the_request_cancels_its_work_and_stays_a_cancel() -> None:
    scope: dict[str, Any] = {}
    log: list[str] = []
    waiting = asyncio.ensure_future(withdrawn_on_hang_up(scope, _work(log, 10)))
    await asyncio.sleep(0.01)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert log == ["cancelled"] and scope == {}


async def test_a_hang_up_beside_a_cancel_stays_a_cancel() -> None:
    """A shutdown's cancel and a hang-up in the same turn: the cancel is not taken back."""
    scope: dict[str, Any] = {}
    log: list[str] = []
    waiting = asyncio.ensure_future(withdrawn_on_hang_up(scope, _work(log, 10)))
    await asyncio.sleep(0.01)
    scope[HANG_UP]()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert log == ["cancelled"]


async def test_a_hook_called_after_the_answer_cancels_nothing() -> None:
    """The server may call a hook it read before the answer was written: too late to
    withdraw anything, it must not cancel whatever the task does next."""
    scope: dict[str, Any] = {}
    log: list[str] = []
    await withdrawn_on_hang_up(scope, _work(log, 0))
    late = []

    async def keep(hook_scope: dict[str, Any]) -> str:
        late.append(hook_scope[HANG_UP])
        return "answer"

    assert await withdrawn_on_hang_up(scope, keep(scope)) == "answer"
    late[0]()
    await asyncio.sleep(0.01)  # a late cancel would land here
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
