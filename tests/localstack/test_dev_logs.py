"""`modelfn dev` as a process: where functions' output goes (the state directory's logs
folder, not dev's terminal), `modelfn dev status --wait` for a platform that is starting,
and its tables aligned whatever the names' lengths. Functions are created with plain boto3
and run by real ``awslambdaric`` processes."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import uuid
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
import orjson
import pytest

from modelfn.localstack.state import StateDir
from modelfn.process.supervisor import Process

if TYPE_CHECKING:
    from collections.abc import Iterator

HANDLERS = Path(__file__).parent / "handlers"
NOT_RUNNING = 5


def dev_status(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "modelfn.cli.main", "dev", "status",
                           "--state-dir", str(state), *args],
                          capture_output=True, text=True, timeout=180)


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[StateDir, Process, Path]]:
    """`modelfn dev`, its terminal (stdout and stderr) kept in a file; `modelfn dev status
    --wait` started at the same moment answers once the platform is up."""
    root = tmp_path_factory.mktemp("dev")
    state = StateDir(root / "state")
    terminal = root / "terminal.txt"
    process = Process([sys.executable, "-m", "modelfn.cli.main", "dev", "--state-dir",
                       str(state.path)], name="modelfn dev", log_path=terminal).start()
    try:
        waited = dev_status(state.path, "--wait", "150s", "--output", "json")
        assert waited.returncode == 0, waited.stderr + process.tail()
        assert orjson.loads(waited.stdout)["endpoints"]["aws"].startswith("http://127.0.0.1:")
        yield state, process, terminal
    finally:
        assert process.stop(60) == 0, process.tail()


def client(state: StateDir, service: str) -> Any:
    env = state.read_env()
    return boto3.client(service, endpoint_url=env["AWS_ENDPOINT_URL"],  # type: ignore[call-overload]
                        region_name=env["AWS_DEFAULT_REGION"],
                        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"])


def lambda_client(state: StateDir) -> Any:
    return client(state, "lambda")


def create_chatty(state: StateDir, lam: Any, function: str) -> None:
    """tests/localstack/handlers/chatty.py: it prints a line (and one on stderr) per call."""
    role = client(state, "iam").create_role(RoleName=f"role-{function}",
                                            AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.write(HANDLERS / "chatty.py", "chatty.py")
    lam.create_function(FunctionName=function, Role=role,
                        Runtime="python3.12", Handler="chatty.handler",
                        Code={"ZipFile": buffer.getvalue()}, Timeout=30)
    lam.get_waiter("function_active_v2").wait(FunctionName=function)


def test_a_lambda_functions_output_goes_to_the_logs_folder_not_devs_terminal(
        dev: tuple[StateDir, Process, Path]) -> None:
    state, _, terminal = dev
    assert f"tail -F {state.path / 'logs'}/*.log" in terminal.read_text()
    lam = lambda_client(state)
    function = f"chatty-{uuid.uuid4().hex[:8]}"
    create_chatty(state, lam, function)
    marks = [uuid.uuid4().hex for _ in range(2)]
    for mark in marks:
        answer = lam.invoke(FunctionName=function, Payload=orjson.dumps({"mark": mark}))
        assert "FunctionError" not in answer, answer["Payload"].read()
        assert orjson.loads(answer["Payload"].read()) == {"mark": mark}
    log = state.path / "logs" / f"lambda-{function}-latest.log"
    written = log.read_text()
    for mark in marks:
        assert f"out {mark}" in written and f"err {mark}" in written
    seen = terminal.read_text()
    assert not [mark for mark in marks if mark in seen], seen


def test_dev_status_columns_fit_the_longest_name(dev: tuple[StateDir, Process, Path]) -> None:
    state, _, _ = dev
    lam = lambda_client(state)
    function = f"a-function-with-a-name-longer-than-its-column-{uuid.uuid4().hex[:8]}"
    create_chatty(state, lam, function)
    lam.invoke(FunctionName=function, Payload=b"{}")
    done = dev_status(state.path)
    assert done.returncode == 0, done.stderr
    table = done.stdout.split("Lambda functions\n", 1)[1].splitlines()
    assert any(line.strip().startswith(f"{function}:$LATEST") for line in table), table
    # every column right-aligned after the name: a row as wide as its header, ends aligned
    assert len({len(line) for line in table}) == 1, "\n" + "\n".join(table)
    header = table[0].split()
    assert header[0] == "function:version"
    # the endpoints above the tables: every address starts in one column (gateway_grpc's
    # name is longer than the others')
    endpoints = done.stdout.split("\n\n", 1)[0].splitlines()
    assert any(line.startswith("gateway_grpc ") for line in endpoints), endpoints
    assert len({len(line) - len(line.split(maxsplit=1)[1]) for line in endpoints}) == 1, \
        "\n" + "\n".join(endpoints)


def test_dev_status_wait_gives_up_with_the_not_running_message(tmp_path: Path) -> None:
    done = dev_status(tmp_path / "nothing", "--wait", "1s")
    assert done.returncode == NOT_RUNNING, done.stdout + done.stderr
    assert done.stderr.startswith(f"Error: no local platform is running for {tmp_path}")


def test_dev_status_wait_takes_a_duration(tmp_path: Path) -> None:
    done = dev_status(tmp_path, "--wait", "soon")
    assert done.returncode == 2 and "--wait" in done.stderr
    assert os.path.exists(tmp_path)
