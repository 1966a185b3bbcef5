"""The process supervisor with real child processes: readiness, drain, group kill, errors."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from modelfn.process.supervisor import (
    Process,
    ProcessFailed,
    alive,
    free_port,
    http_probe,
)

PY = sys.executable


def script(body: str) -> list[str]:
    return [PY, "-c", textwrap.dedent(body)]


def test_free_port_is_bindable() -> None:
    port = free_port()
    with HTTPServer(("127.0.0.1", port), BaseHTTPRequestHandler):
        pass


def test_ready_when_the_http_probe_answers(tmp_path: Path) -> None:
    port = free_port()
    server = f"""
        import time
        from http.server import BaseHTTPRequestHandler, HTTPServer
        class H(BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200 if self.path == "/ready" else 404)
                self.end_headers()
            def log_message(self, *a): pass
        time.sleep(0.2)
        print("listening", flush=True)
        HTTPServer(("127.0.0.1", {port}), H).serve_forever()
    """
    log = tmp_path / "server.log"
    with Process(script(server), name="server", log_path=log) as proc:
        elapsed = proc.wait_ready(http_probe(f"http://127.0.0.1:{port}/ready"), timeout=20)
        assert elapsed >= 0.2
        assert proc.running
    assert not proc.running
    assert "listening" in proc.tail()
    assert "listening" in log.read_text()


def test_a_child_that_exits_fails_with_its_last_words() -> None:
    proc = Process(script("import sys; print('model digits:3 is not in the store'); sys.exit(3)"),
                   name="digits-v3").start()
    with pytest.raises(ProcessFailed) as err:
        proc.wait_ready(lambda: False, timeout=20)
    assert err.value.status_code == 503
    assert "digits-v3 exited with code 3" in err.value.message
    assert "model digits:3 is not in the store" in err.value.message
    proc.stop()


def test_never_ready_times_out_and_stop_reaps_it() -> None:
    proc = Process(script("import time; time.sleep(60)"), name="sleeper").start()
    with pytest.raises(ProcessFailed, match="sleeper was not ready after 0.3 s"):
        proc.wait_ready(lambda: False, timeout=0.3)
    assert proc.stop(grace=5) == -15
    assert not proc.running


def test_sigterm_drains_before_sigkill() -> None:
    drains = """
        import signal, sys, time
        def bye(*_):
            time.sleep(0.3)
            print("drained", flush=True)
            sys.exit(0)
        signal.signal(signal.SIGTERM, bye)
        print("up", flush=True)
        while True:
            time.sleep(1)
    """
    proc = Process(script(drains), name="drains").start()
    proc.wait_ready(lambda: "up" in proc.tail(), timeout=20)
    assert proc.stop(grace=10) == 0
    assert "drained" in proc.tail()


def test_a_stuck_child_is_killed_after_the_grace_period() -> None:
    stuck = """
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("up", flush=True)
        time.sleep(60)
    """
    proc = Process(script(stuck), name="stuck").start()
    proc.wait_ready(lambda: "up" in proc.tail(), timeout=20)
    started = time.monotonic()
    assert proc.stop(grace=0.3) == -9
    assert time.monotonic() - started < 30


def test_stop_takes_the_whole_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild"
    forks = f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open({str(pidfile)!r}, "w").write(str(child.pid))
        print("up", flush=True)
        time.sleep(60)
    """
    proc = Process(script(forks), name="forks").start()
    proc.wait_ready(lambda: "up" in proc.tail(), timeout=20)
    grandchild = int(pidfile.read_text())
    proc.stop(grace=5)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            return
        # a killed grandchild stays a zombie until init reaps it
        if Path(f"/proc/{grandchild}/stat").read_text().split()[2] == "Z":
            return
        time.sleep(0.05)
    raise AssertionError("the grandchild outlived stop()")


def test_cpu_affinity_is_applied() -> None:
    cpu = sorted(os.sched_getaffinity(0))[0]
    proc = Process(script("import os; print(sorted(os.sched_getaffinity(0)))"),
                   name="pinned", cpus=[cpu]).start()
    proc.wait(20)
    assert proc.tail().strip() == f"[{cpu}]"


def test_memory_limit_is_applied() -> None:
    limit = 256 * 2**20
    grab = ("import resource; print(resource.getrlimit(resource.RLIMIT_DATA)[0]); "
            "bytearray(512 * 2**20)")
    proc = Process(script(grab), name="capped", memory_bytes=limit).start()
    code = proc.wait(20)
    assert code != 0
    assert str(limit) in proc.tail()
    assert "MemoryError" in proc.tail()


def test_no_python_runs_in_the_child_before_its_exec() -> None:
    """A limited child runs no at-fork hook of this process (which is where children
    forked from a busy, threaded parent crashed); the limits are applied after the exec."""
    read, write = os.pipe()
    armed = [True]
    os.register_at_fork(after_in_child=lambda: armed[0] and os.write(write, b"forked"))
    try:
        proc = Process(script("import os; print(os.getpid(), sorted(os.sched_getaffinity(0)))"),
                       name="limited", cpus=[sorted(os.sched_getaffinity(0))[0]],
                       memory_bytes=2**30, die_with_parent=True).start()
        assert proc.wait(20) == 0
        os.set_blocking(read, False)
        with contextlib.suppress(BlockingIOError):
            assert os.read(read, 64) == b"", "Python ran in the child between fork and exec"
    finally:
        armed[0] = False
        os.close(read)
        os.close(write)
    pid, cpus = proc.tail().split(" ", 1)
    assert int(pid) == proc.pid  # the launcher became the program: no extra process
    assert cpus == f"[{sorted(os.sched_getaffinity(0))[0]}]"


def test_a_limited_program_that_cannot_be_found_or_run_says_so(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no-such-program"):
        Process(["no-such-program"], cpus=[sorted(os.sched_getaffinity(0))[0]]).start()
    plain = tmp_path / "not-executable"
    plain.write_text("#!/bin/sh\n")
    proc = Process([str(plain)], name="plain", memory_bytes=2**30).start()
    with pytest.raises(ProcessFailed, match="Permission denied"):
        proc.wait_ready(lambda: False, 20)
    assert proc.returncode == 127


def test_a_limit_the_os_refuses_fails_the_child_with_the_reason() -> None:
    beyond = max(os.sched_getaffinity(0)) + 4096
    proc = Process(script("print('ran')"), name="nowhere", cpus=[beyond]).start()
    assert proc.wait(20) != 0
    assert f"cannot apply --cpus {beyond}: [Errno 22] Invalid argument" in proc.tail()
    assert "ran" not in proc.tail()


def orphan(die_with_parent: bool) -> int:
    """A real parent that starts a sleeping child under ``Process`` and is then SIGKILLed
    (no cleanup runs); returns the child's pid."""
    parent = subprocess.Popen(script(f"""
        import sys, time
        from modelfn.process.supervisor import Process
        child = Process([sys.executable, "-c", "import time; time.sleep(60)"], name="sleeper",
                        die_with_parent={die_with_parent}).start()
        print(child.pid, flush=True)
        time.sleep(60)
    """), stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    try:
        child = int(parent.stdout.readline())
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()
    return child


def assert_goes(child: int) -> None:
    """``child`` ends within 5 s of its parent's SIGKILL (it is killed here if not)."""
    try:
        deadline = time.monotonic() + 5
        while alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(child), "the child outlived its SIGKILLed parent"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child, signal.SIGKILL)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_child_that_dies_with_its_parent_goes_when_the_parent_is_killed() -> None:
    child = orphan(die_with_parent=True)
    assert_goes(child)


def test_without_die_with_parent_the_child_outlives_its_parent() -> None:
    child = orphan(die_with_parent=False)
    try:
        time.sleep(0.5)
        assert alive(child)
    finally:
        os.killpg(child, signal.SIGKILL)  # in its own session: the parent's group kill missed it


async def test_async_readiness_and_stop() -> None:
    proc = Process(script("print('up', flush=True); import time; time.sleep(60)"), name="a").start()

    async def probe() -> bool:
        return "up" in proc.tail()

    await proc.wait_ready_async(probe, timeout=20)
    assert await proc.stop_async(grace=5) == -15
