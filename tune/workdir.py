"""tune's working directory, where each candidate's repository is written: removed however
tune ends.

Unwinding removes it after Ctrl-C or SIGTERM; a SIGKILL (an out-of-memory kill, a CI job's
hard timeout) runs no cleanup and left ``modelfn-tune-*`` behind in the temporary
directory, as does a signal that ends tune while it removes it. So a small process in a
session of its own (no Ctrl-C reaches it) reads a pipe whose other end tune alone holds: when
tune exits, whatever the way, the kernel closes that end and the process removes the
directory, as ``die_with_parent`` stops tune's servers.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

PREFIX = "modelfn-tune-"
#: waits for the end of its input (tune's exit), then removes the directory
_REMOVER = ("import shutil, signal, sys\n"
            "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
            "sys.stdin.buffer.read()\n"
            "shutil.rmtree(sys.argv[1], ignore_errors=True)\n")


@contextlib.contextmanager
def workdir() -> Iterator[Path]:
    """A new directory in the temporary directory (``TMPDIR``), removed on exit, and by
    the remover process if tune exits without unwinding."""
    path = Path(tempfile.mkdtemp(prefix=PREFIX))
    try:
        remover = subprocess.Popen([sys.executable, "-I", "-S", "-c", _REMOVER, str(path)],
                                   stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, start_new_session=True)
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        assert remover.stdin is not None
        remover.stdin.close()
        remover.wait()
