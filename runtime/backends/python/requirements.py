"""A Python model's ``requirements.txt`` (beside ``model.py``, in a version directory, or in
the model directory): which of its requirements this interpreter lacks.

``serve`` warns about them when it loads the model, ``push`` and ``build`` call
``missing_requirements`` themselves. Lines that are pip options (``-r``, ``--index-url``)
are not requirements and are skipped; a requirement whose environment marker does not hold
here is not needed here.
"""

from __future__ import annotations

import importlib.metadata
from typing import TYPE_CHECKING

from packaging.requirements import InvalidRequirement, Requirement

from modelfn.runtime.errors import ConfigError

if TYPE_CHECKING:
    from pathlib import Path

FILE_NAME = "requirements.txt"


def requirement_files(model_dir: Path) -> list[Path]:
    """The model directory's ``requirements.txt`` and its version directories' ones."""
    candidates = [model_dir / FILE_NAME,
                  *sorted(p / FILE_NAME for p in model_dir.iterdir()
                          if p.is_dir() and p.name.isdigit())]
    return [p for p in candidates if p.is_file()]


def read_requirements(path: Path) -> list[Requirement]:
    requirements = []
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith(("#", "-")):
            continue
        try:
            requirements.append(Requirement(line))
        except InvalidRequirement as exc:
            raise ConfigError(f"not a requirement: {exc}", path=str(path), line=number) from None
    return requirements


def missing_requirements(model_dir: Path) -> list[str]:
    """The requirements of the model in ``model_dir`` that are not installed here (or not
    in a version they allow), each as its file writes it, plus what is installed."""
    missing: list[str] = []
    for path in requirement_files(model_dir):
        for requirement in read_requirements(path):
            if requirement.marker is not None and not requirement.marker.evaluate():
                continue
            try:
                installed = importlib.metadata.version(requirement.name)
            except importlib.metadata.PackageNotFoundError:
                missing.append(str(requirement))
                continue
            if requirement.specifier and not requirement.specifier.contains(
                    installed, prereleases=True):
                missing.append(f"{requirement} ({installed} is installed)")
    return missing
