"""`modelfn tune` as a user runs it: clear errors, a real search on digits that writes a
config `modelfn serve` loads, budgets nobody meets, and Ctrl-C with nothing left behind."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from typing import TYPE_CHECKING, cast

import numpy as np
import pytest
from click.testing import CliRunner
from functions import DIGITS
from servers import Server

from modelfn.cli.tune import INTERRUPTED, tune
from modelfn.process.supervisor import Process, alive, descendants
from modelfn.runtime.config_file import parse_config

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

HEAVY = ("aiohttp", "onnxruntime", "numpy", "uvicorn", "rich", "matplotlib")
#: a search that ends in seconds: short windows, two levels; the aiohttp client, which every
#: machine has (wrk's own test is below)
QUICK = ["--duration", "0.5s", "--warmup", "0.2s", "-c", "1,4", "--client", "aiohttp"]
WRK = shutil.which("wrk")


@pytest.fixture
def digits(tmp_path: Path) -> Path:
    model = tmp_path / "models" / "digits"
    shutil.copytree(DIGITS, model)
    return model


def modelfn(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "modelfn.cli.main", *args],
                          capture_output=True, text=True, timeout=timeout)


def test_help_imports_nothing_heavy() -> None:
    code = ("import sys\nfrom modelfn.cli.main import cli\n"
            "try:\n    cli(['tune', '--help'])\nexcept SystemExit:\n    pass\n"
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert "--latency-budget-ms" in out
    assert out.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize(("args", "code", "message"), [
    (["{missing}"], 2, "no such directory"),
    (["{empty}"], 2, "no version folder"),
    (["{model}", "--concurrency", "1,x"], 2, "not a comma-separated list of integers"),
    (["{model}", "--concurrency", "0"], 2, "positive integer"),
    (["{model}", "--memory-budget", "lots"], 2, "is not a size"),
    (["{model}", "--time-budget", "soon"], 2, "is not a duration"),
    (["{model}", "--cpus", "4096"], 2, "--cpus 4096: this process may use only"),
    (["{model}", "-c", "1,8", "--optimize-for", "32"], 2,
     "32 is not one of the --concurrency levels (1,8)"),
    (["{model}", "-b", "8", "--input", "{model}/config.pbtxt"], 2,
     "the --input file's first dimension sets the rows per request"),
    (["{model}", "--rows-per-request", "0"], 2, "0 is not in the range x>=1"),
])
def test_bad_input_is_a_clear_error(tmp_path: Path, digits: Path, args: list[str], code: int,
                                    message: str) -> None:
    (tmp_path / "empty").mkdir()
    paths = {"missing": tmp_path / "nope", "empty": tmp_path / "empty", "model": digits}
    argv = [a.format(**{k: str(v) for k, v in paths.items()}) for a in args]
    result = CliRunner().invoke(tune, argv)
    assert result.exit_code == code, result.output
    assert message in result.output


def test_client_wrk_without_wrk_says_how_to_install_it(tmp_path: Path, digits: Path) -> None:
    result = CliRunner().invoke(tune, [str(digits), "--client", "wrk"],
                                env={"PATH": str(tmp_path)})  # an empty PATH: no wrk
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--client': wrk is not on PATH" in result.output
    assert "apt-get install wrk" in result.output


def test_a_config_that_does_not_load_is_reported(digits: Path) -> None:
    (digits / "config.pbtxt").write_text('name: "digits"\nmax_batch_size: 4\nbogus: 1\n')
    result = CliRunner().invoke(tune, [str(digits)])
    assert result.exit_code == 2
    assert "bogus" in result.output


def test_a_current_config_that_does_not_serve_is_shown_as_its_file_says(digits: Path) -> None:
    """``max_batch_size: 0`` with dims that leave out the model's batch dimension: the
    server refuses it. tune shows it as batch 0 under the user's own path, measures only
    what keeps that batch, and fails with the server's reason."""
    config = digits / "config.pbtxt"
    config.write_text(config.read_text().replace("max_batch_size: 64", "max_batch_size: 0"))
    result = modelfn("tune", str(digits), *QUICK, "--time-budget", "60s")
    assert result.returncode == 5, result.stderr
    assert "current: 1xauto threads, batch 0: failed" in result.stdout
    reason = f"{config}: input 'input': config dims [64] but the model declares shape [-1, 64]"
    assert f"Error: the current config could not be measured: exited with code 2: Error: " \
           f"model 'digits' version 1 failed to load: {reason}" in result.stderr
    assert "batch 4" not in result.stdout  # no placeholder, no doubling from it


@pytest.mark.slow
def test_tune_digits_writes_a_config_that_serves(digits: Path, tmp_path: Path) -> None:
    before = parse_config((digits / "config.pbtxt").read_text())
    run = modelfn("tune", str(digits), *QUICK, "--cpus", "1", "--time-budget", "40s",
                  "--write", "--report", str(tmp_path / "report"))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "modelfn tune digits (load: aiohttp)" in run.stdout and "current:" in run.stdout
    report = json.loads((tmp_path / "report" / "tune.json").read_text())
    assert report["client"] == "aiohttp"
    assert len(report["measurements"]) >= 2
    assert (tmp_path / "report" / "tune.csv").read_text().startswith("instances,")
    text = (digits / "config.pbtxt").read_text()
    written = parse_config(text)
    if "wrote " + str(digits / "config.pbtxt") in run.stdout:
        assert text.startswith("# Tuned by modelfn tune on ")
        assert "rows/s" in text.splitlines()[1]
    # what tune does not vary is kept
    assert [t.name for t in written.outputs] == [t.name for t in before.outputs]
    assert written.outputs[0].reshape == ()
    server = Server(digits.parent)
    try:
        server.wait_ready(60)
        body = json.dumps({"inputs": [{"name": "input", "shape": [1, 64], "datatype": "FP32",
                                       "data": [0.0] * 64}]}).encode()
        request = urllib.request.Request(f"http://{server.url}/v2/models/digits/infer", body,
                                         {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as response:
            answer = json.loads(response.read())
        config = json.loads(urllib.request.urlopen(
            f"http://{server.url}/v2/models/digits/config", timeout=10).read())
    finally:
        server.stop()
    assert {o["name"] for o in answer["outputs"]} == {"label", "probabilities"}
    assert config["max_batch_size"] == written.max_batch_size


@pytest.mark.slow
def test_requests_of_several_rows_tune_from_their_rows(digits: Path, tmp_path: Path) -> None:
    """Clients that send 8 rows a request: the current config (batch 4) refuses each one,
    which tune says; it is compared as it would serve with batch 8, and the candidates it
    measures, and the config it writes, take 8 rows."""
    config = digits / "config.pbtxt"
    config.write_text(config.read_text().replace("max_batch_size: 64", "max_batch_size: 4"))
    run = modelfn("tune", str(digits), *QUICK, "-b", "8", "--binary", "--cpus", "1",
                  "--time-budget", "20s", "--write", "--report", str(tmp_path / "report"))
    assert run.returncode == 0, run.stdout + run.stderr
    assert ("note: the current config refuses every request (max_batch_size 4, 8 rows a "
            "request): it is compared as it would serve with max_batch_size 8") in run.stderr
    assert "modelfn tune digits (load: aiohttp, 8 rows per request)" in run.stdout
    assert "current: 1xauto threads, batch 8" in run.stdout
    report = json.loads((tmp_path / "report" / "tune.json").read_text())
    assert report["rows_per_request"] == 8 and report["current_refused_the_requests"]
    refused, *candidates = report["measurements"]
    assert refused["error"] and refused["candidate"]["max_batch_size"] == 4
    assert candidates and all(m["candidate"]["max_batch_size"] >= 8 for m in candidates)
    served = [m for m in candidates if not m["error"]]
    assert served and all(p["errors"] == 0 and p["rows_per_s"] > 0
                          for m in served for p in m["points"])
    text = config.read_text()
    assert parse_config(text).max_batch_size >= 8, run.stdout
    assert "requests of 8 rows" in text.splitlines()[0]
    assert "max_batch_size 4 refused every request" in text.splitlines()[1]


@pytest.mark.slow
@pytest.mark.skipif(WRK is None, reason="wrk is not on PATH (Debian: apt-get install wrk)")
def test_tune_digits_with_wrk_pinned_to_the_client_cores(digits: Path, tmp_path: Path) -> None:
    run = modelfn("tune", str(digits), "--client", "wrk", "--cpus", "1", "-c", "1,4",
                  "--duration", "1s", "--warmup", "1s", "--time-budget", "1s",
                  "--report", str(tmp_path / "report"))
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"load generator: wrk ({WRK})" in run.stdout
    assert "modelfn tune digits (load: wrk)" in run.stdout
    report = json.loads((tmp_path / "report" / "tune.json").read_text())
    assert report["client"] == "wrk"
    (current, *_) = report["measurements"]
    assert current["error"] is None, current
    for point in current["points"]:
        assert point["rows_per_s"] > 0 and point["errors"] == 0
        assert point["p50_ms"] is not None and point["p99_ms"] >= point["p50_ms"]
        assert point["avg_batch"] is not None and point["avg_batch"] >= 1


@pytest.mark.slow
def test_budgets_no_candidate_meets_keep_the_current_config(digits: Path) -> None:
    before = (digits / "config.pbtxt").read_text()
    run = modelfn("tune", str(digits), *QUICK, "--time-budget", "1s",
                  "--latency-budget-ms", "0.001", "--write")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "no candidate met the budgets" in run.stderr
    assert "config.pbtxt left unchanged" in run.stderr
    assert (digits / "config.pbtxt").read_text() == before
    # said up front, and again from the trial it measured
    assert run.stderr.startswith("note: --time-budget 1s holds only the current config at "
                                 "-c 1,4 --duration 500ms: give at least 20s to search\n")
    assert "--time-budget 1s held only the current config (a trial took " in run.stderr


@pytest.mark.slow
def test_a_short_time_budget_searches_with_shorter_windows(digits: Path) -> None:
    """The default 3 s window makes a trial too long for a 12 s budget to measure a
    candidate and confirm it; 1 s windows fit, and tune says it measures with them."""
    run = modelfn("tune", str(digits), "-c", "1", "--warmup", "0.2s", "--client", "aiohttp",
                  "--time-budget", "12s")
    assert run.returncode == 0, run.stdout + run.stderr
    assert ("note: --time-budget 12s holds a search only with shorter windows: measuring "
            "with --duration 1s (not 3s)") in run.stderr


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return cmdline.read()
    except OSError:
        return b""


def candidate_servers(tuner: Process, timeout: float = 60) -> set[int]:
    """The processes below a running tune once a candidate's server is among them (tune
    also runs the remover of its working directory)."""
    servers: set[int] = set()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        servers = descendants(tuner.pid)
        if any(b"\0serve\0" in _cmdline(pid) for pid in servers):
            return servers
        time.sleep(0.05)
    raise AssertionError(f"no candidate server below tune: {tuner.tail()}")


def workdirs(tmp: Path) -> list[str]:
    """tune's working directories in the temporary directory ``tmp``."""
    return [p.name for p in tmp.iterdir() if p.name.startswith("modelfn-tune-")]


@contextlib.contextmanager
def sigint_as_in_a_terminal() -> Iterator[None]:
    """Children started meanwhile get SIGINT's default action, as a terminal's foreground
    job does. A test run started in the background by a non-interactive shell (``cmd &``)
    has SIGINT ignored, and a child inherits that: tune, rightly, would then ignore it."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_prints_what_was_measured_and_leaves_nothing_behind(
        digits: Path, tmp_path: Path, signum: signal.Signals) -> None:
    """No server running, config.pbtxt as it was, and no candidate repository left in the
    temporary directory (tune's own, here, to look in)."""
    first = threading.Event()
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    tuner = Process([sys.executable, "-m", "modelfn.cli.main", "tune", str(digits),
                     "--duration", "2s", "--warmup", "0.2s", "-c", "1,4", "--write",
                     "--client", "aiohttp"],
                    name="modelfn tune", env={**os.environ, "TMPDIR": str(scratch)},
                    on_line=lambda line: first.set() if "current:" in line else None)
    with sigint_as_in_a_terminal(), tuner:
        assert first.wait(120), tuner.tail()
        servers = candidate_servers(tuner)  # the second candidate's
        time.sleep(1.0)  # into its load
        original = (digits / "config.pbtxt").read_text()
        os.killpg(tuner.pid, signum)  # as a terminal's Ctrl-C reaches its foreground
        code = tuner.wait(60)
        output = tuner.tail()
    assert code == INTERRUPTED, output
    assert "interrupted" in output and "current:" in output
    assert "modelfn tune digits" in output  # the table of what was measured
    assert not [pid for pid in servers if alive(pid)]
    assert (digits / "config.pbtxt").read_text() == original
    assert not workdirs(scratch)


class _Echo(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast("asyncio.Transport", transport)  # uvloop's is no subclass

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)


class _Terminated(asyncio.Protocol):
    """A client whose answer arrives with SIGTERM: the handler runs inside this transport
    callback, where an aiohttp load's response handler runs."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        cast("asyncio.Transport", transport).write(b"ping")

    def data_received(self, data: bytes) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        sum(range(1000))  # bytecode, on which the handler runs


def test_sigterm_inside_a_transport_callback_still_interrupts_the_load() -> None:
    """A KeyboardInterrupt raised inside a uvloop transport callback is logged as a fatal
    transport error and lost, and the load went on. tune's SIGTERM goes through the event
    loop runner's SIGINT handler instead, which cancels the load."""
    from modelfn.cli.tune import _interrupt
    from modelfn.client.loadgen import event_loop_runner

    async def load() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(_Echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client, _ = await loop.create_connection(_Terminated, "127.0.0.1", port)
        try:
            await asyncio.sleep(10)  # the load; the signal ends it
            raise AssertionError("SIGTERM did not interrupt the load")
        finally:
            client.close()
            server.close()

    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        with sigint_as_in_a_terminal(), event_loop_runner() as runner, pytest.raises(
                KeyboardInterrupt):
            runner.run(load())
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_an_input_every_server_refuses_fails_with_the_servers_reason(digits: Path,
                                                                     tmp_path: Path) -> None:
    """It used to measure 0 rows/s, blame budgets nobody gave, and exit 0."""
    np.save(tmp_path / "bad.npy", np.zeros((2, 3), np.float32))
    run = modelfn("tune", str(digits), *QUICK, "--time-budget", "1s", "--input",
                  str(tmp_path / "bad.npy"))
    assert run.returncode == 5, run.stdout + run.stderr
    assert ("Error: the current config could not be measured: HTTP 400: unexpected shape for "
            "input 'input' for model 'digits': expected [-1,64], got [2,3]") in run.stderr
    assert "budgets" not in run.stdout + run.stderr


@pytest.mark.slow
def test_a_sigkilled_tune_leaves_nothing_behind(digits: Path, tmp_path: Path) -> None:
    """No server running, and no working directory (that SIGKILL used to leave, with the
    current config's repository in it) in the temporary directory, tune's own here."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    tuner = Process([sys.executable, "-m", "modelfn.cli.main", "tune", str(digits),
                     "--duration", "5s", "--warmup", "0.2s", "-c", "1", "--client", "aiohttp"],
                    name="modelfn tune", env={**os.environ, "TMPDIR": str(scratch)})
    with tuner:
        servers = candidate_servers(tuner)  # the current config's, and the remover
        assert workdirs(scratch)
        os.kill(tuner.pid, signal.SIGKILL)  # no handler, no cleanup: only the kernel can help
        tuner.wait(10)
        deadline = time.monotonic() + 5
        while [pid for pid in servers if alive(pid)] and time.monotonic() < deadline:
            time.sleep(0.05)
        left = [pid for pid in servers if alive(pid)]
        for pid in left:  # a failure must not leave them behind either
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert not left, f"candidate servers outlived a SIGKILLed tune: {left}"
    assert not workdirs(scratch)


def test_denormal_weights_the_config_keeps_are_pointed_out(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from onnx_models import denormal_graph, save, simple_graph

    from modelfn.cli.tune import _denormal_advice

    model_dir = tmp_path / "dn"
    save(model_dir, denormal_graph(), version=1)
    save(model_dir, denormal_graph(), version=10)  # the latest version is read
    _denormal_advice(model_dir, None)
    err = capsys.readouterr().err
    assert "note: 3 of the model's weights are denormal" in err
    assert "\nnote: tune measures the weights as config.pbtxt has them.\n" in err
    for value in ("1", "0"):  # the user has decided either way: nothing to point out
        config = parse_config('name: "dn"\nparameters { key: "flush_denormal_weights" '
                              f'value: {{ string_value: "{value}" }} }}\n')
        _denormal_advice(model_dir, config)
        assert capsys.readouterr().err == ""
    # the model file the config names
    (model_dir / "10" / "model.onnx").rename(model_dir / "10" / "net.onnx")
    _denormal_advice(model_dir, None)
    assert capsys.readouterr().err == ""  # no model.onnx: nothing to read, nothing to say
    _denormal_advice(model_dir, parse_config('name: "dn"\ndefault_model_filename: "net.onnx"\n'))
    assert "note: 3 of the model's weights are denormal" in capsys.readouterr().err
    shutil.rmtree(model_dir / "10")
    (model_dir / "1" / "model.onnx").unlink()
    save(model_dir, simple_graph(), version=1)
    _denormal_advice(model_dir, None)
    assert capsys.readouterr().err == ""
