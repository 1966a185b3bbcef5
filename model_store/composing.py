"""An ensemble's composing models in the store: what its push records, and which model
versions a function serving it loads.

A push records the model each step runs at one version: a pinned ``model_version`` as it
is, ``-1`` resolved to the store's latest committed version at the time of the push. An
ensemble version therefore names exactly the versions it was pushed against, as every
other version is exactly the bytes it was pushed with: deploying it deploys those, whatever
is pushed later. To run newer versions of its models, push the ensemble again: its recorded
versions differ, so it is new content and gets a new version.

A push refuses an ensemble whose steps name models or versions the store does not hold
(naming every one), one that would run itself through other ensembles, and one whose steps
do not fit their models' configs (``ensemble_graph.bind``, the check ``serve`` makes at
load), each model's config completed as the function will complete it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from modelfn.model_store import names
from modelfn.model_store.errors import MissingComposingModels, NotInStore
from modelfn.model_store.manifest import ModelRef
from modelfn.runtime.errors import ConfigError, InvalidInput, ModelNotFound

if TYPE_CHECKING:
    from collections.abc import Iterator

    from modelfn.model_store.base import ModelStore
    from modelfn.runtime.config import ModelConfig

#: the Python backend's platform: its config is always completed by its model's own
#: ``auto_complete_config``, which only runs the model can tell
_COMPLETED_BY_MODEL = frozenset({"python"})


def resolve(store: ModelStore, name: str, config: ModelConfig) -> tuple[ModelRef, ...]:
    """The models ensemble ``name``'s steps run, at the versions its push records (sorted,
    each once), checked against the store: see the module doc."""
    per_step: list[ModelRef] = []
    missing: list[str] = []
    for step in config.ensemble_steps:
        model = names.model_name(step.model_name)  # not ``name``: its config parser saw to it
        pinned = step.model_version != -1
        try:
            version = store.resolve(model, step.model_version if pinned else "latest")
            store.manifest(model, version)  # a pinned version must be committed too
        except ModelNotFound as exc:
            missing.append(_why_missing(model, step.model_version, exc))
            continue
        per_step.append(ModelRef(model, version))
    if missing:
        raise MissingComposingModels(store.uri, name, missing)
    composing = tuple(sorted(set(per_step)))
    for ref in _closure(store, composing, [name]):
        if ref.model == name:
            raise ConfigError(f"ensemble '{name}' runs itself through the ensembles of its "
                              f"steps ({ref.model}:{ref.version} among their models)")
    _bind(store, name, config, per_step)
    return composing


def function_models(store: ModelStore, name: str, version: int) -> list[ModelRef]:
    """What a function serving ``name:version`` loads: an ensemble's composing models at
    their recorded versions (and theirs, for an ensemble among them), each before the
    ensembles that run it, the model itself last. A function serves one version of each
    model: two versions of one model among them are refused."""
    root = ModelRef(names.model_name(name), version)
    refs = [*_closure(store, store.manifest(name, version).composing, [root.model]), root]
    if any(ref.model == root.model for ref in refs[:-1]):
        raise ConfigError(f"{root} runs itself through the ensembles of its steps")
    one_version_each(root, refs, "pin its steps to one version and push the ensembles again")
    return refs


def one_version_each(root: ModelRef, refs: list[ModelRef], remedy: str) -> None:
    """Refuse ``refs`` (what a function serving ``root`` loads) where they hold two
    versions of one model: a function serves one version of each model."""
    versions: dict[str, set[int]] = {}
    for ref in refs:
        versions.setdefault(ref.model, set()).add(ref.version)
    for model, numbers in versions.items():
        if len(numbers) > 1:
            shown = " and ".join(map(str, sorted(numbers)))
            raise InvalidInput(f"{root} runs model '{model}' at versions {shown}, and a "
                               f"function serves one version of each model: {remedy}")


def served_config(store: ModelStore, name: str, version: int) -> ModelConfig:
    """The config a function completes for ``name:version`` at load: the one it was pushed
    with where that leaves nothing to complete (an ensemble's always), else completed from
    the version's files (fetched through the store's cache), as ``serve`` completes it."""
    from modelfn.runtime.config_file import parse_config

    manifest = store.manifest(name, version)
    config = parse_config(manifest.config, f"{name}/config.pbtxt")
    config.name = name
    platform = config.platform or config.backend
    explicit = (config.inputs and config.outputs and "max_batch_size" in config.explicit
                and platform not in _COMPLETED_BY_MODEL)
    if config.is_ensemble or explicit:
        return config
    from modelfn.runtime.repository import check_version

    repository = store.fetch(name, version)
    return check_version(repository / name, version, name)


def _closure(store: ModelStore, refs: tuple[ModelRef, ...], path: list[str]
             ) -> Iterator[ModelRef]:
    """``refs`` and, for the ensembles among them, the models they record, each after the
    models it runs; ``path``: the ensembles that led here (a cycle through them stops the
    walk at the model that closes it, which the caller sees)."""
    done: set[ModelRef] = set()

    def visit(ref: ModelRef, trail: list[str]) -> Iterator[ModelRef]:
        if ref in done:
            return
        done.add(ref)
        if ref.model not in trail:
            for inner in store.manifest(ref.model, ref.version).composing:
                yield from visit(inner, [*trail, ref.model])
        yield ref

    for ref in refs:
        yield from visit(ref, path)


def _bind(store: ModelStore, name: str, config: ModelConfig, per_step: list[ModelRef]) -> None:
    from modelfn.runtime.ensemble_graph import bind

    configs: dict[ModelRef, ModelConfig] = {}
    for ref in per_step:
        if ref not in configs:
            configs[ref] = served_config(store, ref.model, ref.version)
    try:
        bind(config, name, [configs[ref] for ref in per_step])
    except ConfigError as exc:
        against = ", ".join(map(str, dict.fromkeys(per_step)))
        raise ConfigError(f"{exc.message} (checked against {against} in {store.uri})"
                          ) from exc


def _why_missing(model: str, version: int, exc: ModelNotFound) -> str:
    if isinstance(exc, NotInStore) and exc.version is None:
        return f"'{model}' (not in the store)"
    if version == -1:
        return f"'{model}' (no complete version)"
    held = exc.versions if isinstance(exc, NotInStore) else ()
    there = f"versions there: {', '.join(map(str, held))}" if held else "not complete"
    return f"'{model}' version {version} ({there})"
