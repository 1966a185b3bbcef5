"""One table of exit codes (README's "Exit codes"), followed by every command: the same
failure exits with the same code whichever command meets it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from click.testing import CliRunner

from modelfn.cli.main import cli

if TYPE_CHECKING:
    from pathlib import Path

NO_PLATFORM = 5  # unavailable: what a 503 exits with
REQUEST = '{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}]}'


@pytest.mark.parametrize("args", [
    ["dev", "status"],
    ["status", "digits", "--target", "local"],
    ["deploy", "digits:1", "--target", "local", "--dry-run"],
])
def test_no_local_platform_exits_unavailable_and_says_how_to_start_one(
        tmp_path: Path, args: list[str]) -> None:
    result = CliRunner().invoke(cli, [*args, "--state-dir", str(tmp_path / "dev")],
                                env={"MODELFN_STORE": None, "MODELFN_TARGET": None})
    assert result.exit_code == NO_PLATFORM, result.output
    assert f"no local platform is running for {tmp_path / 'dev'}" in result.output
    assert "modelfn dev" in result.output and "MODELFN_DEV_DIR" in result.output


@pytest.mark.parametrize("args", [
    ["serve", "{missing}"],
    ["tune", "{missing}"],
    ["push", "{missing}", "--store", "file:///nowhere"],
])
def test_a_missing_directory_is_a_usage_error(tmp_path: Path, args: list[str]) -> None:
    missing = str(tmp_path / "no-such-dir")
    result = CliRunner().invoke(cli, [a.format(missing=missing) for a in args])
    assert result.exit_code == 2, result.output
    assert "no-such-dir" in result.output


def test_readme_table_is_the_one_the_commands_use() -> None:
    """README's "Exit codes" table and ``EXIT_CODES`` say the same: each status's code."""
    import re
    from pathlib import Path

    from modelfn.cli.errors import EXIT_CODES

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme[readme.index("## Exit codes"):]
    section = section[:section.index("\n## ", 1)]
    documented = {}
    for code, statuses in re.findall(r"^\| (\d+) \| [^|]+\| ([\d, ]*) \|", section, re.MULTILINE):
        for status in filter(None, (s.strip() for s in statuses.split(","))):
            documented[int(status)] = int(code)
    assert {s: c for s, c in documented.items() if s != 500} == EXIT_CODES


def test_ctrl_c_exits_130_from_any_command() -> None:
    """Ctrl-C in a command without a handler of its own (here ``invoke``, waiting on a server
    that never answers) exited 1 with click's "Aborted!"."""
    import signal
    import socket
    import subprocess
    import sys
    import time

    with socket.socket() as silent:
        silent.settimeout(60)
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        # the child starts with Ctrl-C as a shell gives it: a handler of this process is
        # reset by exec, but an ignored or blocked SIGINT (left by anything earlier in this
        # process) would be inherited, and the child would never see the signal
        handler = signal.signal(signal.SIGINT, signal.default_int_handler)
        blocked = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", "modelfn.cli.main", "invoke", url, "--model", "m",
                 "--data", REQUEST], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        finally:
            signal.signal(signal.SIGINT, handler)
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        connections = []
        while True:  # invoke's request, whole: invoke now waits for its answer
            # (a connection from elsewhere to a recycled port says nothing; skip it)
            connection, _ = silent.accept()
            connections.append(connection)
            connection.settimeout(5)
            received = b""
            try:
                while b"\r\n\r\n" not in received and (chunk := connection.recv(65536)):
                    received += chunk
            except TimeoutError:
                pass
            if received.startswith((b"GET /v2/models/m", b"POST /v2/models/m")):
                break
        time.sleep(0.2)
        process.send_signal(signal.SIGINT)
        try:
            _, err = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:  # no cascade into the next test: it goes now
            process.kill()
            _, err = process.communicate()
            err = f"still running 30 s after SIGINT (this process's SIGINT handler " \
                  f"{handler!r}, blocked {sorted(blocked)}): {err}"
        for connection in connections:
            connection.close()
    assert process.returncode == 130, (err, handler, blocked)
    assert err.strip().endswith("interrupted"), err
    assert "Traceback" not in err and "Aborted!" not in err
