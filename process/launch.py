"""Apply a child's limits inside the child, then become the program it runs.

``Process`` starts a limited child as ``python -I -S launch.py LIMITS -- PROGRAM ARGS``.
This script pins the CPUs, asks for the parent-death signal, caps the data segment,
and then ``exec``s the program, which keeps the pid, the session and the limits.

It is not a ``preexec_fn`` because a ``preexec_fn`` runs Python in the child between
``fork`` and ``exec``. There, CPython's and C libraries' at-fork handlers run in a copy
of a process whose other threads held locks at the fork. The local platform forks while
gRPC's threads, its readers and its loop are busy, and such children died before their
``exec`` (SIGSEGV and SIGABRT, now and then under load). Without a
``preexec_fn``, ``subprocess`` runs no Python and no at-fork handler in the child: its
C code (``vfork`` where it can) goes straight to ``exec``.

The script runs isolated and without ``site``, so it imports the standard library
only, never modelfn. It adds tens of milliseconds to a start (``bench/RESULTS.md``),
where a model server takes 0.3 s or more to be ready.

The limits, before ``--``:

- ``--cpus 0,2``: ``sched_setaffinity``; threads the program starts later inherit it;
- ``--die-with PID``: ``PR_SET_PDEATHSIG`` = SIGKILL (Linux). The signal is tied to the
  thread that forked this process, however late it is asked for. PID is that thread's
  process. Should it have exited already, this process was reparented, and it exits
  instead of running unwatched;
- ``--memory-bytes N``: ``RLIMIT_DATA``, set last, after this script's own allocations.
"""

from __future__ import annotations

import os
import resource
import sys

#: prctl(2)'s option asking the kernel for a signal when the parent thread exits (Linux)
PR_SET_PDEATHSIG = 1
#: SIGKILL's number on Linux, the only system with PR_SET_PDEATHSIG (importing
#: ``signal`` would be most of this script's own start)
SIGKILL = 9
#: the exit code of a program that could not be run, as a shell's
CANNOT_RUN = 127


def _die_with(parent: int) -> None:
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    if prctl(PR_SET_PDEATHSIG, SIGKILL) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    if os.getppid() != parent:  # the parent exited before prctl: nobody will signal us
        sys.exit("launch: the parent exited before the child started")


def _apply(limits: dict[str, str]) -> None:
    if "--die-with" in limits:
        _die_with(int(limits["--die-with"]))
    if "--cpus" in limits:
        os.sched_setaffinity(0, [int(cpu) for cpu in limits["--cpus"].split(",")])
    if "--memory-bytes" in limits:
        # RLIMIT_DATA covers the heap and private anonymous mappings (Linux >= 4.7),
        # which is what a model's tensors and arenas use; RLIMIT_AS would also count
        # the address space thread stacks and allocators reserve but never touch.
        cap = int(limits["--memory-bytes"])
        resource.setrlimit(resource.RLIMIT_DATA, (cap, cap))


def main(argv: list[str]) -> None:
    """Apply the limits in ``argv`` (as in the module's docstring) and exec the rest."""
    try:
        split = argv.index("--")
    except ValueError:
        sys.exit("launch: no program after --")
    options, program = argv[:split], argv[split + 1:]
    if not program or len(options) % 2:
        sys.exit(f"launch: cannot read {options + ['--'] + program}")
    limits = dict(zip(options[::2], options[1::2], strict=True))
    unknown = set(limits) - {"--cpus", "--die-with", "--memory-bytes"}
    if unknown:
        sys.exit(f"launch: unknown option {', '.join(sorted(unknown))}")
    try:
        _apply(limits)
    except (OSError, ValueError) as exc:
        sys.exit(f"launch: cannot apply {' '.join(options)}: {exc}")
    try:
        os.execvp(program[0], program)
    except OSError as exc:
        sys.stderr.write(f"launch: cannot run {program[0]}: {exc.strerror}\n")
        sys.exit(CANNOT_RUN)


if __name__ == "__main__":
    main(sys.argv[1:])
