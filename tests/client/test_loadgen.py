from __future__ import annotations

import asyncio
import json
import socket
import struct
import threading
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson
import pytest
import uvicorn
from click.testing import CliRunner
from starlette.applications import Starlette
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from modelfn.cli.bench import bench_command
from modelfn.client.bodies import (
    LoadgenError,
    input_file_rows,
    inputs_from_v2_json,
    prepare_request,
    random_inputs,
)
from modelfn.client.loadgen import run_bench, run_load
from modelfn.client.scrape import (
    StatsReading,
    batch_size,
    parse_batch_counters,
    parse_stats_reading,
    scrape_batch_counters,
    scrape_stats_reading,
    served_rate,
    stats_url,
)

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from starlette.requests import Request

METADATA = {
    "name": "tiny",
    "versions": ["1"],
    "platform": "onnxruntime_onnx",
    "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 3]}],
    "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 3]}],
}
DTYPES = {"FP32": np.dtype("<f4"), "INT64": np.dtype("<i8")}


class TinyV2:
    """A real V2 server for one model ``tiny`` (y = 2x) that checks every body it receives."""

    def __init__(self) -> None:
        self.inference_count = 0
        self.exec_count = 0
        self.bodies: set[str] = set()
        self.app = Starlette(
            routes=[
                Route("/v2/models/{model}", self.metadata),
                Route("/v2/models/{model}/versions/{version}", self.metadata),
                Route("/v2/models/{model}/infer", self.infer, methods=["POST"]),
                Route("/v2/models/{model}/versions/{version}/infer", self.infer, methods=["POST"]),
                Route("/metrics", self.metrics),
            ]
        )

    async def metadata(self, request: Request) -> Response:
        if request.path_params["model"] != "tiny":
            return JSONResponse({"error": "unknown model"}, 404)
        return JSONResponse(METADATA)

    async def infer(self, request: Request) -> Response:
        if request.path_params["model"] != "tiny":
            return JSONResponse({"error": "Request for unknown model: 'missing'"}, 404)
        body = await request.body()
        # answers are measured as sent, never compressed on the way (as a V2 server would
        # compress them when asked)
        assert "accept-encoding" not in request.headers
        header_length = request.headers.get("inference-header-content-length")
        split = int(header_length) if header_length is not None else len(body)
        doc = orjson.loads(body[:split])
        (spec,) = doc["inputs"]
        dtype = DTYPES[spec["datatype"]]
        size = spec.get("parameters", {}).get("binary_data_size")
        if size is None:
            x = np.asarray(spec["data"], dtype=dtype).reshape(spec["shape"])
            self.bodies.add("json")
        else:
            assert request.headers["content-type"] == "application/octet-stream"
            assert split + size == len(body)
            x = np.frombuffer(body[split:], dtype=dtype).reshape(spec["shape"])
            self.bodies.add("binary")
        self.inference_count += x.shape[0]
        self.exec_count += 1
        y = (x * 2).astype(dtype)
        out = {"name": "y", "datatype": spec["datatype"], "shape": list(y.shape)}
        if doc.get("parameters", {}).get("binary_data_output"):
            blob = y.tobytes()
            head = orjson.dumps({"outputs": [{**out, "parameters": {"binary_data_size": 8}}]})
            headers = {"Inference-Header-Content-Length": str(len(head))}
            return Response(head + blob, media_type="application/octet-stream", headers=headers)
        return JSONResponse(
            {"model_name": "tiny", "outputs": [{**out, "data": y.ravel().tolist()}]}
        )

    async def metrics(self, request: Request) -> Response:
        lines = [
            "# TYPE nv_inference_count counter",
            f'nv_inference_count{{model="tiny",version="1"}} {self.inference_count}',
            'nv_inference_count{model="other",version="1"} 1000',
            "# TYPE nv_inference_exec_count counter",
            f'nv_inference_exec_count{{model="tiny",version="1"}} {self.exec_count}',
            'nv_inference_exec_count{model="other",version="1"} 1',
        ]
        return PlainTextResponse("\n".join(lines) + "\n")


class BurstV2:
    """A real V2 server for ``tiny`` that answers like a batcher on a slow model: every
    ``period`` seconds (on a fixed schedule) one batch ends and answers every request that
    waited for it, and Triton's statistics count its rows and stamp its end."""

    def __init__(self, period: float, busy: float = 0.5) -> None:
        self.period = period
        self.busy = busy  # of each period, the share its batch "ran"
        self.waiting: list[asyncio.Future[None]] = []
        self.inference_count = 0
        self.last_inference_ms = 0
        self.infer_ns = 0
        self.ticker: asyncio.Task[None] | None = None
        self.app = Starlette(routes=[
            Route("/v2/models/{model}/infer", self.infer, methods=["POST"]),
            Route("/v2/models/{model}/stats", self.stats),
        ])

    async def infer(self, request: Request) -> Response:
        await request.body()
        if self.ticker is None:
            self.ticker = asyncio.create_task(self.tick())
        done = asyncio.get_running_loop().create_future()
        self.waiting.append(done)
        await done
        return JSONResponse({"model_name": "tiny", "outputs": []})

    async def tick(self) -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()
        for k in range(1, 10**6):
            await asyncio.sleep(max(0.0, start + k * self.period - loop.time()))
            batch, self.waiting = self.waiting, []
            if batch:
                self.inference_count += len(batch)
                self.last_inference_ms = time.time_ns() // 1_000_000
                self.infer_ns += round(self.busy * self.period * 1e9)
            for done in batch:
                done.set_result(None)

    async def stats(self, request: Request) -> Response:
        return JSONResponse({"model_stats": [{
            "name": request.path_params["model"], "version": "1",
            "last_inference": self.last_inference_ms,
            "inference_count": self.inference_count, "execution_count": 0,
            "batch_stats": [{"batch_size": 1, "compute_infer": {"count": 0, "ns": self.infer_ns}}],
            "inference_stats": {}}]})


def _serve(app: Starlette) -> Iterator[str]:
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, lifespan="off", ws="none", log_level="warning"
    )
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    while not srv.started:
        thread.join(0.01)
        assert thread.is_alive(), "the test server did not start"
    port = srv.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        srv.should_exit = True
        thread.join(10)


@pytest.fixture
def server() -> Iterator[tuple[str, TinyV2]]:
    tiny = TinyV2()
    for url in _serve(tiny.app):
        yield url, tiny


def test_json_run_counts_requests_and_batch_size(server: tuple[str, TinyV2]) -> None:
    url, tiny = server
    (result,) = run_bench(url, "tiny", concurrency=[4], duration=0.5, warmup=0.2)
    assert result.errors == 0 and result.first_error is None
    assert result.requests > 0
    assert result.rows == result.requests  # random inputs from metadata: -1 becomes 1
    assert result.p50_ms is not None and result.p99_ms is not None
    assert 0 < result.p50_ms <= result.p99_ms
    assert result.req_per_s == pytest.approx(result.requests / 0.5)
    assert result.avg_batch_size == pytest.approx(1.0)
    assert result.client_cpu is not None and result.client_cpu >= 0.0
    assert tiny.bodies == {"json"}


def test_binary_run_from_request_file(server: tuple[str, TinyV2], tmp_path: Path) -> None:
    url, tiny = server
    request = {
        "inputs": [
            {"name": "x", "datatype": "FP32", "shape": [2, 3], "data": [[1, 2, 3], [4, 5, 6]]}
        ]
    }
    path = tmp_path / "request.json"
    path.write_text(json.dumps(request))
    results = run_bench(
        url, "tiny", concurrency=[1, 3], duration=0.4, warmup=0.1, binary=True, input_path=path
    )
    assert [r.concurrency for r in results] == [1, 3]
    for result in results:
        assert result.errors == 0 and result.binary
        assert result.requests > 0 and result.rows == 2 * result.requests
        assert result.avg_batch_size == pytest.approx(2.0)
    assert tiny.bodies == {"binary"}


def test_versioned_npy_input(server: tuple[str, TinyV2], tmp_path: Path) -> None:
    url, _ = server
    path = tmp_path / "x.npy"
    np.save(path, np.ones((5, 3), dtype=np.float64))
    (result,) = run_bench(
        url, "tiny", version="1", concurrency=[2], duration=0.3, warmup=0.1, input_path=path
    )
    assert result.errors == 0 and result.rows == 5 * result.requests > 0


def test_errors_are_counted_with_the_first_message(server: tuple[str, TinyV2]) -> None:
    url, _ = server
    request = prepare_request({"x": np.zeros((1, 3), np.float32)})
    result = asyncio.run(run_load(url, "missing", request, concurrency=2, duration=0.3, warmup=0.0))
    assert result.requests == 0 and result.errors > 0
    assert result.first_error is not None and result.first_error.startswith("HTTP 404")
    assert "unknown model" in result.first_error
    assert result.p50_ms is None
    assert result.avg_batch_size is None  # no executions of "missing" in the window


def test_unreachable_server_reports_exceptions() -> None:
    with socket.socket() as sock:  # a port that nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    request = prepare_request({"x": np.zeros((1, 3), np.float32)})
    result = asyncio.run(
        run_load(
            f"http://127.0.0.1:{port}", "tiny", request, concurrency=1, duration=0.2, warmup=0.0
        )
    )
    assert result.requests == 0 and result.errors > 0
    assert result.first_error is not None and "Connect" in result.first_error
    assert result.avg_batch_size is None


def test_cli_command_prints_table_and_writes_json(
    server: tuple[str, TinyV2], tmp_path: Path
) -> None:
    url, _ = server
    out = tmp_path / "results.json"
    result = CliRunner().invoke(
        bench_command,
        [
            url,
            "--model",
            "tiny",
            "-c",
            "1,2",
            "--duration",
            "0.3",
            "--warmup",
            "0.1",
            "--json",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "req/s" in result.output
    rows = json.loads(out.read_text())
    assert [r["concurrency"] for r in rows] == [1, 2]
    assert all(r["errors"] == 0 and r["requests"] > 0 for r in rows)


def test_cli_sends_requests_of_several_rows(server: tuple[str, TinyV2], tmp_path: Path) -> None:
    url, tiny = server
    out = tmp_path / "results.json"
    result = CliRunner().invoke(bench_command, [url, "-m", "tiny", "-b", "4", "-c", "2",
                                                "--duration", "0.3", "--warmup", "0.1",
                                                "--binary", "--json", str(out)])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(out.read_text())
    assert row["errors"] == 0 and row["requests"] > 0
    assert row["rows"] == 4 * row["requests"]
    assert row["avg_batch_size"] == pytest.approx(4.0)  # the server counted 4 rows each
    assert tiny.inference_count == 4 * tiny.exec_count


def test_cli_refuses_rows_beside_an_input_file(tmp_path: Path) -> None:
    path = tmp_path / "x.npy"
    np.save(path, np.ones((5, 3), dtype=np.float32))
    result = CliRunner().invoke(bench_command, ["http://127.0.0.1:9", "-m", "tiny", "-b", "2",
                                                "--input", str(path)])
    assert result.exit_code == 2
    assert "the --input file's first dimension sets the rows per request" in result.output


def test_cli_says_a_model_without_a_batch_dimension_cannot_take_rows(
    server: tuple[str, TinyV2], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = server
    monkeypatch.setitem(METADATA, "inputs", [{"name": "x", "datatype": "FP32", "shape": [3]}])
    result = CliRunner().invoke(bench_command, [url, "-m", "tiny", "-b", "2", "-c", "1",
                                                "--duration", "0.1"])
    assert result.exit_code == 2  # a usage error, as invoke's
    assert ("input 'x' has shape [3]: its first dimension is not a batch dimension (-1), "
            "so a request cannot carry 2 rows") in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("value", ["1,x", "0,8", ","])
def test_cli_rejects_bad_concurrency(value: str) -> None:
    result = CliRunner().invoke(bench_command, ["http://127.0.0.1:1", "-m", "m", "-c", value])
    assert result.exit_code == 2
    assert "concurrency" in result.output


def test_cli_reports_missing_model(server: tuple[str, TinyV2]) -> None:
    url, _ = server
    result = CliRunner().invoke(bench_command, [url, "--model", "missing", "--duration", "0.1"])
    assert result.exit_code == 3  # not found, as invoke's
    assert result.output == "Error: HTTP 404: unknown model\n"


def test_binary_request_layout() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    ids = np.array([[7], [8]], dtype=np.int64)
    names = np.array([b"ab", b"c"], dtype=object)
    request = prepare_request({"x": x, "ids": ids, "names": names}, binary=True)
    assert request.binary and request.rows == 2
    split = int(request.headers["Inference-Header-Content-Length"])
    header = json.loads(request.body[:split])
    assert header["parameters"] == {"binary_data_output": True}
    sizes = [t["parameters"]["binary_data_size"] for t in header["inputs"]]
    assert sizes == [24, 16, 4 + 2 + 4 + 1]
    assert [t["datatype"] for t in header["inputs"]] == ["FP32", "INT64", "BYTES"]
    assert all("data" not in t for t in header["inputs"])
    blob = request.body[split:]
    assert len(blob) == sum(sizes)
    assert np.array_equal(np.frombuffer(blob[:24], "<f4").reshape(2, 3), x)
    assert np.array_equal(np.frombuffer(blob[24:40], "<i8").reshape(2, 1), ids)
    assert blob[40:] == struct.pack("<I", 2) + b"ab" + struct.pack("<I", 1) + b"c"


def test_json_request_is_compact_and_round_trips() -> None:
    x = np.array([[0.25, -1.5, 3.0]], dtype=np.float32)
    request = prepare_request({"x": x}, outputs=["y"])
    assert request.headers == {"Content-Type": "application/json"}
    doc = json.loads(request.body)
    assert doc["inputs"] == [
        {"name": "x", "shape": [1, 3], "datatype": "FP32", "data": [0.25, -1.5, 3.0]}
    ]
    assert doc["outputs"] == [{"name": "y"}]
    assert np.array_equal(inputs_from_v2_json(doc)["x"], x)


def test_inputs_from_v2_json_nested_and_errors() -> None:
    doc: dict[str, Any] = {
        "inputs": [{"name": "a", "datatype": "INT64", "shape": [2, 2], "data": [[1, 2], [3, 4]]}]
    }
    assert inputs_from_v2_json(doc)["a"].tolist() == [[1, 2], [3, 4]]
    doc["inputs"][0]["shape"] = [3, 2]
    with pytest.raises(LoadgenError, match="4 values for shape"):
        inputs_from_v2_json(doc)
    with pytest.raises(LoadgenError, match="no inputs"):
        inputs_from_v2_json({"inputs": []})


def test_random_inputs_follow_metadata() -> None:
    metadata = {
        "inputs": [
            {"name": "img", "datatype": "FP32", "shape": [-1, 3, 4]},
            {"name": "k", "datatype": "INT32", "shape": [-1]},
            {"name": "flag", "datatype": "BOOL", "shape": [2]},
        ]
    }
    arrays = random_inputs(metadata)
    assert arrays["img"].shape == (1, 3, 4) and arrays["img"].dtype == np.float32
    assert arrays["k"].shape == (1,) and arrays["k"].dtype == np.int32
    assert arrays["flag"].dtype == np.bool_
    assert np.array_equal(random_inputs(metadata)["img"], arrays["img"])  # seeded


def test_random_inputs_carry_rows_in_the_batch_dimension() -> None:
    metadata = {"inputs": [{"name": "img", "datatype": "FP32", "shape": [-1, 3, -1]},
                           {"name": "k", "datatype": "INT64", "shape": [-1]}]}
    arrays = random_inputs(metadata, rows=5)
    assert arrays["img"].shape == (5, 3, 1) and arrays["k"].shape == (5,)
    assert prepare_request(arrays, binary=True).rows == 5
    fixed = {"inputs": [{"name": "img", "datatype": "FP32", "shape": [3, 224]}]}
    assert random_inputs(fixed)["img"].shape == (3, 224)  # one request, as the model takes it
    with pytest.raises(LoadgenError, match=r"input 'img' has shape \[3, 224\]: its first "
                       "dimension is not a batch dimension .* cannot carry 2 rows"):
        random_inputs(fixed, rows=2)


def test_the_rows_an_input_file_carries(tmp_path: Path) -> None:
    doc = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [3, 2],
                       "data": [0.0] * 6}]}
    (tmp_path / "three.json").write_text(json.dumps(doc))
    assert input_file_rows(tmp_path / "three.json") == 3
    np.save(tmp_path / "four.npy", np.zeros((4, 64), np.float32))
    assert input_file_rows(tmp_path / "four.npy") == 4
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(LoadgenError, match="bad.json: cannot read the inputs"):
        input_file_rows(tmp_path / "bad.json")
    (tmp_path / "bad.npy").write_bytes(b"not an array")
    with pytest.raises(LoadgenError, match="bad.npy: cannot read the inputs"):
        input_file_rows(tmp_path / "bad.npy")


def test_parse_batch_counters() -> None:
    text = "\n".join(
        [
            "# HELP nv_inference_count Number of inferences performed",
            'nv_inference_count{model="digits",version="1"} 120',
            'nv_inference_count{model="digits",version="2"} 30',
            'nv_inference_count{model="cnn",version="1"} 999',
            'nv_inference_exec_count_total{model="digits",version="1"} 10',
            'nv_inference_exec_count_total{model="digits",version="2"} 5',
            'nv_inference_request_success{model="digits",version="1"} 150',
        ]
    )
    assert parse_batch_counters(text, "digits") == (150.0, 15.0)
    assert parse_batch_counters(text, "cnn") == (999.0, 0.0)
    assert parse_batch_counters(text, "absent") is None


def test_scrape_batch_counters_reads_a_server_without_an_event_loop(
        server: tuple[str, TinyV2]) -> None:
    url, tiny = server
    tiny.inference_count, tiny.exec_count = 12, 3
    assert scrape_batch_counters(f"{url}/metrics", "tiny") == (12.0, 3.0)
    assert scrape_batch_counters(f"{url}/metrics", "absent") is None
    assert scrape_batch_counters(f"{url}/nothing-here", "tiny") is None  # 404
    assert scrape_batch_counters("http://127.0.0.1:9/metrics", "tiny") is None  # refused


def test_parse_stats_reading_sums_the_models_versions() -> None:
    def stats(name: str, version: str, rows: int, last_ms: int, infer_ns: int) -> object:
        return {"name": name, "version": version, "inference_count": rows,
                "last_inference": last_ms,
                # the model's own compute_infer counts each request with its batch's time:
                # the busy share reads the batches' own
                "inference_stats": {"compute_infer": {"count": 9, "ns": 9 * infer_ns}},
                "batch_stats": [{"batch_size": 4, "compute_infer": {"count": 1, "ns": infer_ns}}]}

    doc = {"model_stats": [stats("digits", "1", 120, 5000, 10**9),
                           stats("digits", "2", 30, 7000, 5 * 10**8),
                           stats("cnn", "1", 999, 9000, 1)]}
    assert parse_stats_reading(doc, "digits") == (150, 7000, 15 * 10**8)
    assert parse_stats_reading(doc, "absent") is None
    assert parse_stats_reading({"ready": True}, "digits") is None  # not a statistics answer
    assert parse_stats_reading([1, 2], "digits") is None
    assert parse_stats_reading({"model_stats": [{"name": "digits"}]}, "digits") is None


def test_served_rate_is_rows_over_the_time_between_batch_ends() -> None:
    before = StatsReading(100, 10_000, 10**9)
    served = served_rate(before, StatsReading(180, 12_000, 29 * 10**8), 1.0)
    assert served is not None
    assert served.rows_per_s == pytest.approx(40.0)
    assert served.busy == pytest.approx(0.95)  # 1.9 s of the 2 s inside the model
    assert served_rate(before, StatsReading(180, 10_800, 10**9), 1.0) is None  # too few
    assert served_rate(before, before, 0.0) is None  # nothing ran
    assert served_rate(None, before, 1.0) is None


def test_scrape_stats_reading_reads_a_server_without_an_event_loop() -> None:
    burst = BurstV2(period=0.05)
    for url in _serve(burst.app):
        burst.inference_count, burst.last_inference_ms = 12, 3456
        assert scrape_stats_reading(stats_url(url, "tiny"), "tiny") == (12, 3456, 0)
        assert scrape_stats_reading(f"{url}/nothing-here", "tiny") is None  # 404
    assert scrape_stats_reading("http://127.0.0.1:9/stats", "tiny") is None  # refused


@pytest.mark.parametrize("counted_by", ["answers", "batches"])
def test_a_bursty_server_is_counted_over_its_whole_batches(counted_by: str) -> None:
    """Every 0.4 s one batch answers all 8 clients: 20 rows/s. Answers counted inside a 1 s
    window read 2 or 3 bursts (16 or 24 rows/s); the server's batches read 20."""
    burst = BurstV2(period=0.4)
    request = prepare_request({"x": np.zeros((1, 3), np.float32)})
    for url in _serve(burst.app):
        stats = stats_url(url, "tiny") if counted_by == "batches" else None
        result = asyncio.run(run_load(url, "tiny", request, concurrency=8, duration=1.0,
                                      warmup=0.5, stats_url=stats))
    assert result.errors == 0 and result.requests in (16, 24)
    assert result.rate_from == counted_by
    if counted_by == "batches":
        assert result.rows_per_s == pytest.approx(20.0, rel=0.1)
        assert result.busy == pytest.approx(0.5, rel=0.1)
    else:
        assert result.rows_per_s == result.requests
        assert result.busy is None


def test_cli_counts_a_bursty_server_over_its_batches(tmp_path: Path) -> None:
    """``modelfn bench --count-batches``: the same 20 rows/s as above, from the command."""
    request = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 3],
                           "data": [0.0, 0.0, 0.0]}]}
    (tmp_path / "x.json").write_text(json.dumps(request))
    out = tmp_path / "results.json"
    burst = BurstV2(period=0.4)
    for url in _serve(burst.app):
        result = CliRunner().invoke(bench_command, [
            url, "-m", "tiny", "--input", str(tmp_path / "x.json"), "-c", "8",
            "--duration", "1", "--warmup", "0.5", "--count-batches", "--json", str(out)])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(out.read_text())
    assert row["rate_from"] == "batches" and row["errors"] == 0
    assert row["rows_per_s"] == pytest.approx(20.0, rel=0.1)
    assert "in model" in result.stdout and "50%" in result.stdout
    assert "over the server's whole batches" in result.stdout
    assert "did not count" not in result.stderr


def test_cli_says_when_the_server_cannot_count_its_batches(server: tuple[str, TinyV2]) -> None:
    url, _ = server  # TinyV2 has no statistics endpoint
    result = CliRunner().invoke(bench_command, [url, "-m", "tiny", "-c", "2", "--duration",
                                                "0.3", "--warmup", "0.1", "--count-batches"])
    assert result.exit_code == 0, result.output
    assert ("c=2: the server's statistics did not count its batches (no statistics endpoint, "
            "or too few batches in the window): its rates count the answers inside the "
            "window") in result.stderr
    assert "in model" not in result.stdout


def test_batch_size_is_inferences_per_execution_between_readings() -> None:
    assert batch_size((100.0, 10.0), (180.0, 20.0)) == pytest.approx(8.0)
    assert batch_size((100.0, 10.0), (100.0, 10.0)) is None  # nothing ran
    assert batch_size(None, (1.0, 1.0)) is None


@pytest.mark.parametrize(("url", "message"), [
    ("http://127.0.0.1:9", "Error: http://127.0.0.1:9 refused the connection: is the server "
                           "running?"),
    ("127.0.0.1:9", "Error: http://127.0.0.1:9 refused the connection"),  # scheme assumed
    ("ftp://127.0.0.1:9", "Error: ftp://127.0.0.1:9: the URL must be http:// or https://"),
])
def test_bench_errors_are_one_clear_line(url: str, message: str) -> None:
    from click.testing import CliRunner

    from modelfn.cli.main import cli

    result = CliRunner().invoke(cli, ["bench", url, "--model", "digits", "-c", "1",
                                      "--duration", "0.5"])
    assert result.exit_code != 0
    assert result.output.strip() == message or result.output.strip().startswith(message)
    assert "ClientConnectorError" not in result.output and "Traceback" not in result.output
