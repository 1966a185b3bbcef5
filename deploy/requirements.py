"""What a function image installs: the distributions its entrypoint imports, and no more.

``pip install modelfn`` brings the CLI's and the build's tools too (onnx for config
checks, jinja2, rich, boto3, ...). A function never runs them, so an image installs only
the groups below that its entrypoint needs. The names are stated here; the version pins
come from the modelfn wheel's own metadata (``pyproject.toml``), so the two cannot drift
apart. ``tests/deploy/test_requirements.py`` installs exactly these into an empty
environment and starts each entrypoint from it.
"""

from __future__ import annotations

import re
import zipfile
from dataclasses import dataclass
from typing import TYPE_CHECKING

from modelfn.deploy.errors import BuildError

if TYPE_CHECKING:
    from collections.abc import Iterable
    from pathlib import Path


@dataclass(frozen=True)
class Group:
    """Distributions one part of an entrypoint imports, pinned as ``extra`` (or the base
    dependencies, ``None``) of the modelfn distribution declares them."""

    extra: str | None
    names: tuple[str, ...]


#: every function: config, batching, the V2 app and ONNX Runtime
RUNTIME = Group(None, ("numpy", "onnxruntime", "orjson", "starlette", "anyio"))
#: ``python -m modelfn.handlers.http``: uvicorn with its event loop and HTTP parser
HTTP = Group(None, ("uvicorn", "uvloop", "httptools"))
#: ``MODELFN_PROTOCOL=grpc`` on the HTTP entrypoint (imported only then); a deploy picks the
#: protocol at run time (``modelfn deploy --protocol grpc --image ...``), so every HTTP
#: image carries it
GRPC = Group("grpc", ("grpcio", "protobuf"))
#: ``modelfn.handlers.aws_lambda.handler``
LAMBDA = Group("lambda", ("mangum", "aws-lambda-powertools", "awslambdaric"))
#: GPU sessions: onnxruntime-gpu (in place of onnxruntime), TensorRT and the CUDA runtime
GPU = Group("gpu", ("onnxruntime-gpu", "tensorrt-cu12", "cuda-python"))
#: a function that fetches its model version from S3 at cold start (not baked)
S3 = Group(None, ("boto3",))

#: installed but never imported by a function, removed from every image (paths in the
#: dependencies' folder): onnxruntime's offline tools (they need the onnx package, which no
#: image installs) and numpy's build-time parts (f2py, distutils, C headers, the PyInstaller
#: hook). Test suites (every ``tests`` folder), type stubs and C/Cython sources go too.
PRUNE = ("onnxruntime/transformers", "onnxruntime/quantization", "onnxruntime/tools",
         "onnxruntime/datasets", "numpy/f2py", "numpy/distutils", "numpy/_core/include",
         "numpy/_pyinstaller")
#: CPU images also drop onnxruntime's C API library: the Python binding neither links nor
#: loads it (checked with the CPU image, which serves inference without it)
PRUNE_CPU = ("onnxruntime/capi/libonnxruntime.so.*",)

_EXTRA = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?")


def normalise(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def declared(metadata: str) -> dict[tuple[str | None, str], str]:
    """(extra or None, normalised name) -> requirement, from a METADATA file's
    ``Requires-Dist`` lines; the requirement keeps its version and environment markers but
    loses its extras (``uvicorn[standard]>=0.29`` -> ``uvicorn>=0.29``) and extra marker."""
    found: dict[tuple[str | None, str], str] = {}
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        spec, _, marker = line.removeprefix("Requires-Dist:").strip().partition(";")
        name = _NAME.match(spec)
        if name is None:
            continue
        extra = _EXTRA.search(marker)
        rest = " and ".join(c.strip() for c in marker.split(" and ")
                            if c.strip() and not _EXTRA.fullmatch(c.strip()))
        requirement = name.group(1) + spec[name.end():].strip()
        found[(extra.group(1) if extra else None, normalise(name.group(1)))] = (
            f"{requirement}; {rest}" if rest else requirement)
    return found


def wheel_metadata(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return archive.read(name).decode("utf-8")


def pinned(metadata: str, groups: Iterable[Group], exclude: Iterable[str] = ()) -> list[str]:
    """The requirements for ``groups`` (minus ``exclude`` names), pinned as ``metadata``
    declares them; a name the metadata does not declare is a ``BuildError``."""
    table = declared(metadata)
    left_out = {normalise(name) for name in exclude}
    wanted: list[str] = []
    for group in groups:
        for name in group.names:
            key = (group.extra, normalise(name))
            if key[1] in left_out:
                continue
            if key not in table:
                where = f"the '{group.extra}' extra" if group.extra else "the dependencies"
                raise BuildError(f"modelfn's metadata declares no '{name}' in {where}: "
                                 "deploy/requirements.py and pyproject.toml disagree")
            if table[key] not in wanted:
                wanted.append(table[key])
    return wanted
