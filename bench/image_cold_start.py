"""The CPU HTTP function image: its size, and ``podman run`` to the first answer, split up.

    python bench/image_cold_start.py [--runs 3] [--source LABEL=DIR ...]

For each source (a modelfn checkout; default: this one, as ``this``), renders the build
context of ``examples/models/digits`` (baked) with that checkout's own ``render_context``
and wheel, builds it with podman on the trimmed Debian bookworm minbase the image tests
cache (``tests/deploy/test_image.py``; build it first by running them once;
``MODELFN_BENCH_BASE`` names another archive in that cache), and pushes it to a
loopback registry. Then, alternating the sources, each run takes a fresh containers/storage
(as a new node would) and times:

- pull: ``podman pull`` from the loopback registry (no network: this is unpacking layers);
- start: ``podman run --detach`` until it returns (vfs copies the layers into the rootfs);
- ready: from ``podman run`` to the first 200 from ``/v2/health/ready``;
- first answer: from ``podman run`` to the first V2 infer answer (the digits request).

It also prints the runtime's own ``ready:`` line (import, session, warmup) of the last run
and the image's unpacked and compressed size. Needs root and the tools
``scripts/ci-containers.sh`` installs. The machine may be shared: compare sources within
one run only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import httpx

from modelfn.deploy.builders import unmount_under
from modelfn.platforms.podman import Storage
from modelfn.process.supervisor import free_port

ROOT = Path(__file__).resolve().parents[1]
BASE_ARCHIVE = Path(os.environ.get("MODELFN_TEST_CACHE")
                    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                    / "modelfn-test") / os.environ.get(
                        "MODELFN_BENCH_BASE", "debian-bookworm-minbase-slim.oci.tar")
BASE_IMAGE = "localhost/modelfn-test/debian-minbase:bookworm"
RUN_FLAGS = ["--network", "host", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]

RENDER = """
import sys
from pathlib import Path
from modelfn.deploy.build import BuildPlan, render_context
from modelfn.deploy.wheel import modelfn_wheel
context, repo, base, cert = sys.argv[1:5]
plan = BuildPlan("digits", 1, base=base, bake=True, pip_cert=bool(cert))
render_context(plan, Path(context), modelfn_wheel(), repository=Path(repo),
               pip_cert=Path(cert) if cert else None)
"""


def podman(storage: Storage, *args: str) -> list[str]:
    return ["podman", *storage.global_args(), "--cgroup-manager", "cgroupfs",
            "--events-backend", "file", "--runtime", "runc", *args]


def run(command: list[str]) -> str:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command[:6])} ... failed:\n{done.stdout}{done.stderr}"[-4000:])
    return done.stdout


def package_tree(source: Path, into: Path) -> Path:
    """``into/modelfn/<pkg>`` links to ``source``'s package folders (its package-dir table)."""
    config = tomllib.loads((source / "pyproject.toml").read_text(encoding="utf-8"))
    for package, folder in config["tool"]["setuptools"]["package-dir"].items():
        if package.count(".") == 1:
            link = into / "modelfn" / package.split(".")[1]
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(source.resolve() / folder)
    return into


def pip_cert() -> str:
    found = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.cert"],
                           capture_output=True, text=True, check=False)
    return os.environ.get("PIP_CERT") or found.stdout.strip()


def build(label: str, source: Path, work: Path, storage: Storage, registry: str) -> str:
    context = work / f"context-{label}"
    env = {**os.environ, "PYTHONPATH": str(package_tree(source, work / f"pkg-{label}")),
           "MODELFN_CACHE_DIR": str(work / f"cache-{label}")}
    subprocess.run([sys.executable, "-c", RENDER, str(context), str(ROOT / "examples/models"),
                    BASE_IMAGE, pip_cert()], env=env, check=True)
    image = f"{registry}/modelfn/digits:{label}"
    started = time.monotonic()
    run(["podman", *storage.global_args(), "build", "--format", "oci", "--isolation", "chroot",
         "--layers", "--file", str(context / "Containerfile"), "--tag", image,
         str(context)])
    print(f"{label}: built in {time.monotonic() - started:.0f} s", file=sys.stderr)
    run(podman(storage, "push", "--tls-verify=false", image, f"docker://{image}"))
    return image


def sizes(storage: Storage, image: str) -> tuple[float, float, int]:
    unpacked = int(run(podman(storage, "image", "inspect", "--format", "{{.Size}}", image)))
    manifest = json.loads(run(["skopeo", "inspect", "--raw", "--tls-verify=false",
                               f"docker://{image}"]))
    compressed = sum(layer["size"] for layer in manifest["layers"])
    return unpacked / 1e6, compressed / 1e6, len(manifest["layers"])


def cold_start(image: str, body: dict[str, object]) -> dict[str, float | str]:
    root = Path(tempfile.mkdtemp(prefix="mfn-"))
    storage = Storage(root=root, driver="vfs")
    try:
        started = time.monotonic()
        run(podman(storage, "pull", "--quiet", "--tls-verify=false", image))
        pulled = time.monotonic()
        port = free_port()
        run(podman(storage, "run", "--detach", "--name", "bench", *RUN_FLAGS,
                   "--env", f"PORT={port}", image))
        launched = time.monotonic()
        url = f"http://127.0.0.1:{port}"
        ready = answered = None
        with httpx.Client(timeout=10) as client:
            while ready is None and time.monotonic() - launched < 120:
                try:
                    if client.get(f"{url}/v2/health/ready").status_code == 200:
                        ready = time.monotonic()
                except httpx.TransportError:
                    time.sleep(0.02)
            response = client.post(f"{url}/v2/models/digits/infer", json=body)
            assert response.status_code == 200, response.text
            answered = time.monotonic()
        logs = subprocess.run(podman(storage, "logs", "bench"), capture_output=True,
                              text=True, check=False)
        line = next((ln for ln in (logs.stdout + logs.stderr).splitlines() if "ready:" in ln),
                    "")
        assert ready is not None
        return {"pull": pulled - started, "start": launched - pulled,
                "ready": ready - pulled, "first answer": answered - pulled,
                "ready line": line[line.find("ready:"):]}
    finally:
        subprocess.run(podman(storage, "rm", "--all", "--force", "--time", "0"),
                       capture_output=True, check=False)
        unmount_under(root)
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--source", action="append", default=[], metavar="LABEL=DIR")
    args = parser.parse_args()
    sources = dict(s.split("=", 1) for s in args.source) or {"this": str(ROOT)}
    body = json.loads((ROOT / "examples/requests/digits.json").read_text(encoding="utf-8"))
    work = Path(tempfile.mkdtemp(prefix="mfn-bench-"))
    storage = Storage(root=work / "build", driver="vfs")
    address = f"127.0.0.1:{free_port()}"
    (work / "registry.yml").write_text(
        f"version: 0.1\nlog: {{level: warn}}\nstorage: {{filesystem: {{rootdirectory: "
        f"{work / 'registry'}}}}}\nhttp: {{addr: {address}}}\n", encoding="utf-8")
    registry = subprocess.Popen(["docker-registry", "serve", str(work / "registry.yml")],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = run(podman(storage, "pull", "--quiet", f"oci-archive:{BASE_ARCHIVE}")).strip()
        run(podman(storage, "tag", base.splitlines()[-1], BASE_IMAGE))
        images = {label: build(label, Path(source), work, storage, address)
                  for label, source in sources.items()}
        results: dict[str, list[dict[str, float | str]]] = {label: [] for label in images}
        for _ in range(args.runs):
            for label, image in images.items():
                results[label].append(cold_start(image, body))
        for label, image in images.items():
            unpacked, compressed, layers = sizes(storage, image)
            runs = results[label]
            print(f"{label}: {unpacked:.0f} MB unpacked, {compressed:.0f} MB compressed, "
                  f"{layers} layers")
            for phase in ("pull", "start", "ready", "first answer"):
                values = [float(r[phase]) for r in runs]
                print(f"  {phase:>12}: median {statistics.median(values):.2f} s "
                      f"({', '.join(f'{v:.2f}' for v in values)})")
            print(f"  runtime: {runs[-1]['ready line']}")
    finally:
        registry.terminate()
        registry.wait()
        subprocess.run(podman(storage, "rm", "--all", "--force", "--time", "0"),
                       capture_output=True, check=False)
        unmount_under(work)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
