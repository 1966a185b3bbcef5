"""A Triton-style model repository on local disk, loaded into serving model versions.

Layout: ``<repo>/<model>/config.pbtxt`` (optional) and
``<repo>/<model>/<version>/model.onnx|model.plan``. Version directories are
positive integers without leading zeros; anything else is ignored, as Triton
does. The config is auto-completed from what the first loaded (newest) version's
session reads, and every other version served must agree with it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from modelfn.runtime.autocomplete import autocomplete, default_max_batch_size, runtime_fields
from modelfn.runtime.backends import BACKENDS
from modelfn.runtime.config import (
    DEFAULT_MODEL_FILENAME,
    ENSEMBLE,
    PLATFORM_OF_BACKEND,
    ModelConfig,
)
from modelfn.runtime.config_file import load_config
from modelfn.runtime.ensemble import (
    EnsembleVersion,
    complete_ensemble,
    start_ensemble,
    with_composing_models,
)
from modelfn.runtime.errors import (
    BackendError,
    ConfigError,
    ModelfnError,
    ModelNotFound,
    NoModelServes,
)
from modelfn.runtime.hardware import gpu_available
from modelfn.runtime.limits import check_instances, check_warmup_memory
from modelfn.runtime.model import ModelVersion
from modelfn.runtime.names import MODEL_NAME, VERSION_DIR, parse_model_ref
from modelfn.runtime.warmup import inline_rows, warm_up

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from modelfn.runtime.backends.base import ModelLookup

log = logging.getLogger("modelfn.repository")


class EngineSource(Protocol):
    """Where a version's TensorRT engines come from and go back to (a model store's
    engine cache; ``modelfn.model_store.engine_cache``): ``prepare`` gives the config to
    make sessions with, and the step that publishes new engines after warmup, if any."""

    def prepare(self, config: ModelConfig, version: int
                ) -> tuple[ModelConfig, Callable[[], None] | None]: ...


CONFIG_FILE = "config.pbtxt"


def version_dirs(model_dir: Path) -> dict[int, Path]:
    return {
        int(p.name): p
        for p in model_dir.iterdir()
        if p.is_dir() and VERSION_DIR.fullmatch(p.name)
    }


def _looks_like_model(path: Path) -> bool:
    return (path / CONFIG_FILE).is_file() or bool(version_dirs(path))


def check_layout(path: Path) -> None:
    """Say what a directory that is not a model repository looks like, and what to do."""
    if _looks_like_model(path):
        found = "config.pbtxt" if (path / CONFIG_FILE).is_file() else \
            f"version folder {min(version_dirs(path))}/"
        raise ConfigError(f"{path} looks like a model directory (it has {found}), not a "
                          f"repository of models: serve its parent, {path.parent}")
    entries = sorted(p.name for p in path.iterdir() if not p.name.startswith("."))
    if not entries:
        raise ConfigError(f"model repository {path} is empty: put each model in "
                          "<repository>/<model>/<version>/model.onnx (modelfn init does it)")
    if not any(_looks_like_model(path / name) for name in entries if (path / name).is_dir()):
        shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
        raise ConfigError(f"{path} holds no model directories (<model>/config.pbtxt or "
                          f"<model>/1/...); it has: {shown}. Is it the model repository?")


def _detect_platform(config: ModelConfig | None, version_dir: Path) -> str:
    if config is not None and config.platform:
        return config.platform
    if config is not None and config.backend:
        platform = PLATFORM_OF_BACKEND.get(config.backend)
        if platform is None:
            raise ConfigError(f"backend '{config.backend}' is not supported "
                              f"(supported: {', '.join(PLATFORM_OF_BACKEND)})", path=config.source)
        return platform
    for platform, filename in DEFAULT_MODEL_FILENAME.items():
        if (version_dir / filename).exists():
            return platform
    raise ConfigError(f"no model file in {version_dir.parent.name}/{version_dir.name}: expected "
                      f"{' or '.join(DEFAULT_MODEL_FILENAME.values())}")


def contained(directory: Path, name: str, what: str, config: ModelConfig) -> Path:
    """``directory/name``, refused unless it is a plain file name that stays there (no
    path, no ``..``, no symlink out): a config must not make the server read elsewhere."""
    candidate = directory / name
    if (not name or "/" in name or "\\" in name or name in (".", "..")
            or not candidate.resolve().is_relative_to(directory.resolve())):
        raise ConfigError(f"{what} '{name}' must be a file name in "
                          f"{directory.parent.name}/{directory.name}", path=config.source or None)
    return candidate


def _model_file(config: ModelConfig, version_dir: Path) -> Path:
    name = config.default_model_filename or DEFAULT_MODEL_FILENAME[config.platform]
    path = contained(version_dir, name, "default_model_filename", config)
    if not path.exists():
        raise ConfigError(f"model file {version_dir.parent.name}/{version_dir.name}/{path.name} "
                          "does not exist")
    return path


@dataclass(frozen=True)
class ModelPlan:
    """What to load for one model: its config before completion and the versions to serve."""

    config: ModelConfig | None  # as the file says (None without config.pbtxt)
    base: ModelConfig  # plus the runtime fields sessions need (see runtime_fields)
    versions: dict[int, Path]  # newest first
    default_max_batch_size: int
    gpu: bool  # a GPU is there for KIND_AUTO and default instance groups


def plan_model(model_dir: Path, pinned: int | None = None) -> ModelPlan:
    """The versions a model serves, by its version_policy or ``pinned`` (exactly that one)."""
    name = model_dir.name
    versions = version_dirs(model_dir)
    if not versions:
        raise ConfigError(f"model '{name}' has no version directory (e.g. {name}/1/)")
    if pinned is not None and pinned not in versions:
        raise ModelNotFound(name, pinned)
    config = load_config(model_dir)
    platform = _detect_platform(config, versions[max(versions) if pinned is None else pinned])
    gpu = gpu_available()
    if platform == ENSEMBLE and config is not None:  # no model file: nothing to complete
        base = complete_ensemble(config, name)
    else:
        base = runtime_fields(config, name=name, platform=platform, gpu_available=gpu)
    policy = base.version_policy
    if pinned is not None:
        chosen = [pinned]
    elif policy.kind == "all":
        chosen = sorted(versions)
    elif policy.kind == "specific":
        missing = [v for v in policy.versions if v not in versions]
        if missing:
            raise ConfigError(f"version_policy names versions {missing} that do not exist",
                              path=base.source)
        chosen = sorted(policy.versions)
    else:
        chosen = sorted(versions)[-max(1, policy.num_versions):]
    return ModelPlan(config, base, {v: versions[v] for v in reversed(chosen)},
                     default_max_batch_size(base), gpu)


def check_version(model_dir: Path, version: int | None = None, name: str | None = None
                  ) -> ModelConfig:
    """The config ``serve`` would complete for one version (default: the highest), checked
    against its model file's signature, and its label files read, without creating a
    session: what ``push`` runs before a version becomes immutable, ``name`` being the name
    it is pushed as (default: the directory's). Errors name ``model_dir``'s own paths."""
    if not model_dir.is_dir():
        raise ConfigError(f"{model_dir} is not a model directory (<model>/config.pbtxt and "
                          "<model>/<version>/)")
    number = version if version is not None else max(version_dirs(model_dir), default=None)
    plan = plan_model(model_dir, pinned=number)
    assert number is not None  # plan_model refused a model without version directories
    base, version_dir = plan.base, plan.versions[number]
    given = plan.config
    if name is not None and given is not None and given.name and given.name != name:
        raise ConfigError(f"config name '{given.name}' does not match the name it is pushed "
                          f"as, '{name}': change `name:` in config.pbtxt or leave it out",
                          path=given.source or None)
    signature = BACKENDS[base.platform].read_signature(_model_file(base, version_dir))
    config = autocomplete(plan.config, name=base.name, signature=signature,
                          platform=base.platform,
                          default_max_batch_size=plan.default_max_batch_size,
                          gpu_available=plan.gpu)
    read_labels(config, model_dir)  # the label files go with the version: they must be there
    return config


def read_labels(config: ModelConfig, model_dir: Path) -> dict[str, list[str]]:
    """Each output's ``label_filename`` (in the model directory, as Triton has it): one
    label per line, line N naming class N. Lines end at ``\n`` only, as Triton reads them
    (``std::getline``): a label may hold U+2028, U+0085 or a form feed, which
    ``str.splitlines`` would take for line ends, shifting every later class's label. A
    ``\r`` before the ``\n`` (a file saved on Windows) is not part of the label."""
    labels: dict[str, list[str]] = {}
    for output in config.outputs:
        if not output.label_filename:
            continue
        path = contained(model_dir, output.label_filename,
                         f"output '{output.name}' label_filename", config)
        try:
            text = path.read_bytes().decode("utf-8")  # no newline translation
            lines = text.split("\n")
            if lines[-1] == "":  # the file's last line ends with a newline
                lines.pop()
            labels[output.name] = [line.removesuffix("\r") for line in lines]
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"output '{output.name}': cannot read label file "
                              f"{model_dir.name}/{output.label_filename}: {exc}",
                              path=config.source or None) from exc
    return labels


def load_version(model: ModelVersion, plan: ModelPlan, version_dir: Path,
                 reference: ModelConfig | None, engines: EngineSource | None = None, *,
                 queue_delay: bool = True, models: ModelLookup | None = None) -> ModelConfig:
    """Create the sessions, complete the config from what they read, warm up, serve.

    The first version loaded completes the model's config; every later one
    (``reference``) must agree with it. Returns the completed config. With
    ``engines``, TensorRT engines come from the model store and new ones go back.
    Without ``queue_delay`` the batcher never waits for more requests (``Repository``'s
    ``one_request_at_a_time``). ``models`` are the models the backend's model may call
    (Triton's BLS).
    """
    base, publish = plan.base, None
    if engines is not None:
        base, publish = engines.prepare(plan.base, model.version)
    started = time.perf_counter()
    check_instances(base)
    backend = BACKENDS[base.platform](base, _model_file(base, version_dir))
    if models is not None:
        backend.attach(models, model)
    try:
        backend.load()
        model.phases["session"] = time.perf_counter() - started
        config = autocomplete(
            reference or plan.config, name=base.name, signature=backend.signature(),
            platform=base.platform, default_max_batch_size=plan.default_max_batch_size,
            gpu_available=plan.gpu,
        )
        backend.config = model.config = config
        labels = read_labels(config, version_dir.parent)
        check_warmup_memory(config, max([config.max_batch_size,
                                         *(w.batch_size for w in config.model_warmup)]))
        mark = time.perf_counter()
        report = warm_up(backend, config, version_dir)
        model.phases["warmup"] = time.perf_counter() - mark
        if publish is not None:
            publish()
    except BaseException:
        backend.close()
        raise
    model.stats.load_duration_s = time.perf_counter() - started
    model.start(backend, inline_rows=inline_rows(config, backend, report),
                labels=labels, queue_delay=queue_delay)
    return config


@dataclass
class Repository:
    """The model versions this process serves, by name and version."""

    path: Path
    models: dict[str, dict[int, ModelVersion]] = field(default_factory=dict)
    #: cold-start phases in seconds (import, fetch, session, warmup)
    phases: dict[str, float] = field(default_factory=dict)
    #: TensorRT engine caches in the model store the versions came from
    engines: EngineSource | None = None
    #: the process takes one request at a time (a Lambda execution environment): a batch
    #: is never more than one request, so waiting ``max_queue_delay_microseconds`` for
    #: others is latency for nothing, and it is not waited
    one_request_at_a_time: bool = False
    _lookup: dict[tuple[str, str | None], ModelVersion] = field(default_factory=dict)

    #: every version that failed to load (``model 'm' version 1``) and why, in load order
    failures: list[tuple[str, ModelfnError]] = field(default_factory=list)

    def load(self, refs: list[str] | None = None, *, strict: bool = True) -> None:
        """Load the named models (default: every model directory) and warm them up.

        A ref is ``name`` or ``name:version`` to serve only that version.

        With ``strict`` a model that fails to load raises (Triton's ``--exit-on-error``:
        all or nothing); otherwise it is UNAVAILABLE with its reason, logged and kept in
        ``failures``, and the others serve (``require_serving`` then refuses a start where
        none does). A failure that is not modelfn's own (a backend's exception) is a
        ``BackendError`` naming it, never a traceback. Refs that name nothing, and a
        directory that is no repository, raise either way.
        """
        if not self.path.is_dir():
            raise ConfigError(f"model repository {self.path} is not a directory")
        check_layout(self.path)
        if refs:
            wanted = [parse_model_ref(ref) for ref in refs]
            for name, _ in wanted:
                if not (self.path / name).is_dir():
                    raise ModelNotFound(name)
        else:
            wanted = [(p.name, None) for p in sorted(self.path.iterdir())
                      if p.is_dir() and MODEL_NAME.fullmatch(p.name)]
        asked = {name for name, _ in wanted}
        for name, pinned in with_composing_models(self.path, wanted):  # ensembles last
            if name in self.models and name not in asked:
                continue  # a step's model an earlier load loaded (a function's, one by one)
            self._load_model(self.path / name, pinned, strict)
        self._index()

    def _load_model(self, model_dir: Path, pinned: int | None, strict: bool) -> None:
        name = model_dir.name
        try:
            plan = plan_model(model_dir, pinned)
        except ModelNotFound:
            raise  # a ref naming a version the model lacks: the start's own mistake
        except Exception as exc:
            placeholder = ModelVersion(name, 0, ModelConfig(name=name))
            self.models[name] = {0: placeholder}
            self._failed(placeholder, f"model '{name}'", exc, strict)
            return
        self.models[name] = {}
        reference: ModelConfig | None = None
        for version, version_dir in plan.versions.items():  # newest first
            kind = EnsembleVersion if plan.base.is_ensemble else ModelVersion
            model = kind(name, version, reference or plan.base)
            self.models[name][version] = model
            try:
                reference = start_ensemble(model, self.models, read_labels(
                    plan.base, model_dir)) if plan.base.is_ensemble else load_version(
                    model, plan, version_dir, reference, self.engines,
                    queue_delay=not self.one_request_at_a_time, models=self)
            except Exception as exc:
                self._failed(model, f"model '{name}' version {version}", exc, strict)
            for phase, seconds in model.phases.items():
                self.phases[phase] = self.phases.get(phase, 0.0) + seconds
        self.models[name] = dict(sorted(self.models[name].items()))

    def _failed(self, model: ModelVersion, what: str, exc: Exception, strict: bool) -> None:
        """``model`` is UNAVAILABLE for ``exc``: logged, kept in ``failures``, and raised
        under ``strict``. A foreign exception becomes a ``BackendError`` naming its type
        (its traceback goes to the debug log)."""
        error = exc if isinstance(exc, ModelfnError) else BackendError(
            f"{type(exc).__name__}: {exc}")
        if error is not exc:
            log.debug("%s failed to load", what, exc_info=exc)
        model.state, model.reason = "UNAVAILABLE", error.message
        self.failures.append((what, error))
        log.error("%s failed to load: %s", what, error.message)
        if strict:
            if error is exc:
                raise
            raise error from exc

    def require_serving(self) -> None:
        """Refuse a start where no model serves, with every model's error
        (``NoModelServes``): a function serving nothing must not look healthy."""
        if not any(m.ready for m in self.all_versions()) and self.failures:
            raise NoModelServes(self.failures)

    def _index(self) -> None:
        self._lookup.clear()
        for name, versions in self.models.items():
            ready = [v for v in versions.values() if v.ready]
            for model in versions.values():
                self._lookup[(name, model.version_str)] = model
            if ready:
                self._lookup[(name, None)] = max(ready, key=lambda m: m.version)
            elif versions:
                self._lookup[(name, None)] = max(versions.values(), key=lambda m: m.version)

    def get(self, name: str, version: str | None = None) -> ModelVersion:
        """The model version a request names; no version means the newest ready one."""
        model = self._lookup.get((name, version or None))
        if model is None:
            raise ModelNotFound(name, version)
        return model

    def metadata(self, name: str, version: str | None = None) -> dict[str, Any]:
        """A model's V2 metadata; without a version, ``versions`` lists the ready ones."""
        model = self.get(name, version)
        body = model.metadata()
        if not version:
            body["versions"] = [m.version_str for m in self.versions_of(model.name) if m.ready]
        return body

    def select(self, name: str | None = None, version: str | None = None
               ) -> list[ModelVersion]:
        """The versions a statistics request names: all, one model's, or one version."""
        if not name:
            return self.all_versions()
        if version:
            return [self.get(name, version)]
        return self.versions_of(name)

    def index(self, *, ready: bool = False) -> list[dict[str, str]]:
        """The repository index extension: every version (only the ready ones) and its state."""
        return [
            {"name": m.name, "version": m.version_str, "state": m.state, "reason": m.reason}
            for m in self.all_versions()
            if m.ready or not ready
        ]

    def versions_of(self, name: str) -> list[ModelVersion]:
        if name not in self.models:
            raise ModelNotFound(name)
        return list(self.models[name].values())

    def all_versions(self) -> list[ModelVersion]:
        return [m for versions in self.models.values() for m in versions.values()]

    @property
    def ready(self) -> bool:
        """The server is ready (``/v2/health/ready``): its start is over and some model
        serves. A model that failed to load does not make it unready, unlike Triton's
        default ``--strict-readiness``: a platform's readiness probe must let the models
        that load serve (a start where none does fails instead: ``require_serving``).
        Which failed, and why: the repository index and each model's own ready."""
        versions = self.all_versions()
        return (any(m.ready for m in versions)
                and not any(m.state == "LOADING" for m in versions))

    async def stop(self) -> None:
        for model in reversed(self.all_versions()):  # an ensemble before its steps' models
            await model.stop()


def open_repository(path: Path, refs: list[str] | None = None, *, strict: bool = False,
                    one_request_at_a_time: bool = False) -> Repository:
    """Load the repository at ``path`` (a local directory) and log the cold-start phases
    as one line when it is ready. A model that fails to load is UNAVAILABLE and the others
    serve, unless ``strict`` (then it fails the start); a start where none serves fails
    either way. A function's repository checked out of a model store is opened by
    ``modelfn.handlers.boot``, which knows stores."""
    repository = Repository(path, phases=start_phases(),
                            one_request_at_a_time=one_request_at_a_time)
    repository.load(refs, strict=strict)
    repository.require_serving()
    log_ready(repository)
    return repository


def start_phases() -> dict[str, float]:
    """The cold-start phases so far: ``import`` (process start to now), when known."""
    from modelfn.runtime.hardware import process_age_s

    imported = process_age_s()
    return {} if imported is None else {"import": imported}


def log_ready(repository: Repository) -> None:
    """The ``ready:`` line: what is served, and the cold start's phases."""
    summary = " ".join(f"{k}={v:.3f}s" for k, v in repository.phases.items())
    names = ", ".join(f"{m.name}:{m.version}" for m in repository.all_versions() if m.ready)
    failed = ", ".join(f"{m.name}:{m.version}" for m in repository.all_versions()
                       if m.state == "UNAVAILABLE")
    log.info("ready: %s (cold start %s)%s", names or "no models", summary,
             f"; UNAVAILABLE: {failed}" if failed else "")
