"""Image builders: one table of builder name -> how to probe it, build, push and read a digest.

The first available builder in ``ORDER`` wins: ``docker buildx`` only when a daemon answers
``docker info``, then ``podman``, then ``buildah``. Podman and buildah share
containers/storage, whose location, driver and build isolation come from ``Storage``
(``platforms.podman``: ``MODELFN_STORAGE_ROOT``, ``MODELFN_STORAGE_DRIVER``,
``MODELFN_BUILD_ISOLATION``), so tests and CI can keep every byte under a temporary
directory.
"""

from __future__ import annotations

import collections
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from modelfn.deploy.errors import BuildError
from modelfn.runtime.errors import InvalidInput

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from pathlib import Path

    from modelfn.platforms.podman import Storage

    #: receives each line of builder output
    Progress = Callable[[str], None]

#: lines of builder output a BuildError keeps
TAIL_LINES = 40


@dataclass(frozen=True)
class BuildRequest:
    """One image build: a rendered context, its Containerfile and the tag to give the image."""

    context: Path
    containerfile: Path
    tag: str
    build_args: Mapping[str, str] = field(default_factory=dict)
    tls_verify: bool = True
    iidfile: Path | None = None
    #: seconds since the epoch given to every file in the new layers and to the image's
    #: created time, so the same inputs give the same layer bytes (None: the build's time)
    timestamp: int | None = None

    def arg_flags(self) -> list[str]:
        flags = ["--file", str(self.containerfile), "--tag", self.tag]
        for key, value in self.build_args.items():
            flags += ["--build-arg", f"{key}={value}"]
        if self.iidfile is not None:
            flags += ["--iidfile", str(self.iidfile)]
        return flags


def _tls(verify: bool) -> list[str]:
    return [] if verify else ["--tls-verify=false"]


def _docker_build(request: BuildRequest, storage: Storage) -> list[str]:
    # --provenance=false: an attestation turns the image into an index, which Lambda rejects
    epoch = ([] if request.timestamp is None
             else ["--build-arg", f"SOURCE_DATE_EPOCH={request.timestamp}"])  # BuildKit's
    return ["docker", "buildx", "build", "--provenance=false", "--load",
            *epoch, *request.arg_flags(), str(request.context)]


def _timestamp(request: BuildRequest) -> list[str]:
    return [] if request.timestamp is None else ["--timestamp", str(request.timestamp)]


def _podman_build(request: BuildRequest, storage: Storage) -> list[str]:
    return ["podman", *storage.global_args(), "build", "--format", "oci",
            *storage.isolation_args(), *_tls(request.tls_verify), *_timestamp(request),
            *request.arg_flags(), str(request.context)]


def _buildah_build(request: BuildRequest, storage: Storage) -> list[str]:
    return ["buildah", *storage.global_args(), "bud", "--format", "oci", "--layers",
            *storage.isolation_args(), *_tls(request.tls_verify), *_timestamp(request),
            *request.arg_flags(), str(request.context)]


def _docker_push(ref: str, storage: Storage, tls_verify: bool, digestfile: Path,
                 auth_file: Path | None = None) -> list[str]:
    # insecure registries are the daemon's configuration; docker push has no TLS flag.
    # docker reads credentials from DIR/config.json: the auth file must be named so
    config = ["--config", str(auth_file.parent)] if auth_file is not None else []
    return ["docker", *config, "push", ref]


def _auth(auth_file: Path | None) -> list[str]:
    return ["--authfile", str(auth_file)] if auth_file is not None else []


def _podman_push(ref: str, storage: Storage, tls_verify: bool, digestfile: Path,
                 auth_file: Path | None = None) -> list[str]:
    return ["podman", *storage.global_args(), "push", *_tls(tls_verify), *_auth(auth_file),
            "--digestfile", str(digestfile), ref, f"docker://{ref}"]


def _buildah_push(ref: str, storage: Storage, tls_verify: bool, digestfile: Path,
                  auth_file: Path | None = None) -> list[str]:
    return ["buildah", *storage.global_args(), "push", *_tls(tls_verify), *_auth(auth_file),
            "--digestfile", str(digestfile), ref, f"docker://{ref}"]


def _docker_digest(ref: str, storage: Storage) -> list[str]:
    return ["docker", "image", "inspect", "--format", "{{range .RepoDigests}}{{println .}}{{end}}",
            ref]


def _docker_up() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        done = subprocess.run(["docker", "info"], capture_output=True, timeout=15, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _on_path(program: str) -> Callable[[], bool]:
    return lambda: shutil.which(program) is not None


@dataclass(frozen=True)
class Builder:
    """How one tool builds and pushes. ``digest`` is None when push writes a digest file."""

    name: str
    available: Callable[[], bool]
    build: Callable[[BuildRequest, Storage], list[str]]
    push: Callable[[str, Storage, bool, Path, Path | None], list[str]]
    digest: Callable[[str, Storage], list[str]] | None = None
    install_hint: str = ""


BUILDERS: dict[str, Builder] = {
    "docker": Builder("docker", _docker_up, _docker_build, _docker_push, _docker_digest,
                      "a running Docker daemon with buildx"),
    "podman": Builder("podman", _on_path("podman"), _podman_build, _podman_push,
                      install_hint="apt-get install podman"),
    "buildah": Builder("buildah", _on_path("buildah"), _buildah_build, _buildah_push,
                       install_hint="apt-get install buildah"),
}

#: the order builders are tried in when none is named
ORDER = ("docker", "podman", "buildah")


def select_builder(name: str | None = None, builders: Mapping[str, Builder] = BUILDERS) -> Builder:
    """The named builder (which must be available), else the first available in ``ORDER``."""
    if name is not None:
        if name not in builders:
            raise InvalidInput(f"unknown builder '{name}'; expected one of {', '.join(ORDER)}")
        builder = builders[name]
        if not builder.available():
            raise BuildError(
                f"builder '{name}' is not available here; needs {builder.install_hint}")
        return builder
    for candidate in ORDER:
        if builders[candidate].available():
            return builders[candidate]
    hints = "; ".join(f"{n}: {builders[n].install_hint}" for n in ORDER)
    raise BuildError(f"no image builder found (tried {', '.join(ORDER)}); install one ({hints})")


def run_streaming(command: Sequence[str], what: str, progress: Progress | None = None) -> list[str]:
    """Run ``command``, passing each output line to ``progress``; its output lines on success.

    A failure (non-zero exit, or a program that cannot start) raises ``BuildError`` with the
    last ``TAIL_LINES`` lines of output, unless ``progress`` has shown them already.
    """
    lines: list[str] = []
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    try:
        process = subprocess.Popen(
            list(command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, text=True, errors="replace",
        )
    except OSError as exc:
        raise BuildError(f"{what} failed: cannot run {command[0]}: {exc}",
                         command=command) from exc
    with process:
        assert process.stdout is not None
        for raw in process.stdout:
            line = raw.rstrip("\n")
            lines.append(line)
            tail.append(line)
            if progress is not None:
                progress(line)
    if process.returncode != 0:
        # the output already went to ``progress`` line by line: the error does not repeat it
        raise BuildError(f"{what} failed: {' '.join(command)}", command=command,
                         returncode=process.returncode,
                         output_tail=list(tail) if progress is None else ())
    return lines


def unmount_under(root: Path) -> None:
    """Lazily unmount whatever a crashed build or container left mounted below ``root``
    (vfs and overlay storage under a temporary directory), so it can be removed."""
    prefix = str(root.resolve()) + "/"
    with open("/proc/self/mounts", encoding="utf-8") as mounts:
        points = [line.split()[1] for line in mounts if line.split()[1].startswith(prefix)]
    for point in sorted(points, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)
