"""What a function image holds besides modelfn: the model versions its function serves and
the requirements of the Python models among them.

A function serving an ensemble serves its composing models too, each loaded before the
ensembles that run it: from a store, at the versions the ensemble's push recorded
(``model_store.composing.function_models``); from a local repository, at each step's
``model_version``, ``-1`` being the newest version folder there. A Python model's
requirements are its ``requirements.txt`` files, in its model directory and in its
version's; the image installs their union (``templates/_build.j2``), each line as its file
writes it, once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from modelfn.model_store import names
from modelfn.model_store.composing import one_version_each
from modelfn.model_store.manifest import ModelRef
from modelfn.runtime.errors import ConfigError, ModelNotFound

if TYPE_CHECKING:
    from pathlib import Path

    from modelfn.model_store.base import ModelStore

PYTHON = "python"  # Triton's Python backend, as a config names it
REQUIREMENTS = "requirements.txt"


def local_models(repository: Path, name: str, version: int) -> list[ModelRef]:
    """The model versions a function serving ``name:version`` from a local repository
    loads: an ensemble's composing models (and theirs) first, at its steps' versions."""
    from modelfn.runtime.config_file import load_config

    order: list[ModelRef] = []

    def visit(ref: ModelRef, trail: tuple[str, ...]) -> None:
        if ref in order:
            return
        if ref.model in trail:
            raise ConfigError(f"ensemble '{trail[0]}' runs itself: "
                              f"{' -> '.join((*trail, ref.model))}")
        model_dir = repository / ref.model
        if not (model_dir / str(ref.version)).is_dir():
            raise ModelNotFound(ref.model, ref.version)
        config = load_config(model_dir)
        if config is not None and config.is_ensemble:
            for step in config.ensemble_steps:
                step_version = (latest_version(repository, step.model_name)
                                if step.model_version == -1 else step.model_version)
                visit(ModelRef(step.model_name, step_version), (*trail, ref.model))
        order.append(ref)

    root = ModelRef(names.model_name(name), version)
    visit(root, ())
    one_version_each(root, order, "pin its steps to one version")
    return order


def latest_version(repository: Path, name: str) -> int:
    """The newest version folder of ``repository/name``."""
    model_dir = repository / names.model_name(name)
    numbers = [n for p in model_dir.glob("*") if p.is_dir()
               if (n := names.parse_version_dir(p.name)) is not None]
    if not numbers:
        raise ModelNotFound(name)
    return max(numbers)


def python_requirements(repository: Path, models: list[ModelRef]) -> list[str]:
    """The union of the requirements of the Python models among ``models`` (each laid out
    in ``repository``: ``<model>/config.pbtxt``, ``<model>/<version>/``), in order, once."""
    from modelfn.runtime.backends.python.requirements import read_requirements
    from modelfn.runtime.config_file import load_config

    wanted: dict[str, None] = {}
    for ref in models:
        model_dir = repository / ref.model
        config = load_config(model_dir)
        if config is None or PYTHON not in (config.backend, config.platform):
            continue
        for path in (model_dir / REQUIREMENTS, model_dir / str(ref.version) / REQUIREMENTS):
            if path.is_file():
                wanted.update((str(r), None) for r in read_requirements(path))
    return list(wanted)


def store_requirements(store: ModelStore, models: list[ModelRef]) -> list[str]:
    """``python_requirements`` of model versions in ``store``: the Python models among them
    (their pushed configs say which) are fetched through the store's cache to read them."""
    from modelfn.runtime.config_file import parse_config

    found: dict[str, None] = {}
    for ref in models:
        config = parse_config(store.manifest(ref.model, ref.version).config,
                              f"{ref.model}/config.pbtxt")
        if PYTHON in (config.backend, config.platform):
            fetched = store.fetch(ref.model, ref.version)
            found.update(dict.fromkeys(python_requirements(fetched, [ref])))
    return list(found)
