"""wrk for ``bench/run.py``: found on PATH, or installed with Debian's ``apt-get install wrk``.

The driver itself (body files, the Lua script, runs, result parsing, client CPU) is
``modelfn.client.wrk``, shared with ``modelfn tune --client wrk``. Only the benchmark installs
wrk when it is missing: the package's CLI never installs system packages.
"""

from __future__ import annotations

import os
import shutil
import subprocess

from modelfn.client.wrk import find_wrk


class WrkUnavailable(RuntimeError):
    pass


def ensure_wrk() -> str:
    """The wrk executable: on PATH, or installed with Debian's ``apt-get install wrk``."""
    found = find_wrk()
    if found:
        return found
    if shutil.which("apt-get") is None:
        raise WrkUnavailable("wrk is not installed and this is no Debian/Ubuntu system (no "
                             "apt-get): install wrk (https://github.com/wg/wrk), or run with "
                             "--client aiohttp")
    prefix: list[str] = []
    if os.geteuid() != 0:
        if shutil.which("sudo") is None:
            raise WrkUnavailable("wrk is not installed and installing it needs root: run "
                                 "'apt-get install wrk' as root, or run with --client aiohttp")
        prefix = ["sudo", "-n"]
    print("installing wrk: apt-get install -y wrk", flush=True)
    install = [*prefix, "apt-get", "install", "-y", "wrk"]
    proc = _quiet(install)
    if proc.returncode != 0:  # a fresh machine may have no package lists yet
        _quiet([*prefix, "apt-get", "update"])
        proc = _quiet(install)
    found = find_wrk()
    if found is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise WrkUnavailable(f"could not install wrk with apt-get ({tail[0]}): install it by "
                             "hand, or run with --client aiohttp")
    return found


def _quiet(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
