"""Model store commands: ``init``, ``push``, ``versions``, ``pull``.

Standalone click commands (the main group adds them). Each parses its arguments
and calls the library; store errors exit with the code their status maps to
(``cli.errors``), transfers show a progress bar on stderr. Every one that needs a
store takes it as ``--store`` (``$MODELFN_STORE``), as every other command does.
"""

from __future__ import annotations

import contextlib
import posixpath
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import click

from modelfn.cli.errors import exit_on_error
from modelfn.cli.params import endpoint_url_option, require_store, store_option
from modelfn.model_store import names, open_store
from modelfn.model_store.base import CONFIG_NAME
from modelfn.model_store.checkout import copy_out
from modelfn.model_store.errors import NotInStore
from modelfn.model_store.push import local_version, local_versions
from modelfn.runtime.errors import InvalidInput, ModelNotFound
from modelfn.runtime.names import parse_model_ref

if TYPE_CHECKING:
    from collections.abc import Iterator

    from modelfn.model_store.transfer import Progress

#: Triton's Python backend, as a completed config names its platform
PYTHON = "python"
#: model file suffix -> (platform, file name in the version directory)
MODEL_FILES: dict[str, tuple[str, str]] = {".onnx": ("onnxruntime_onnx", "model.onnx")}


def complete_config(model_file: Path, name: str, filename: str | None = None) -> str:
    """The config.pbtxt of model ``name``, completed from ``model_file``'s signature as
    Triton's auto-complete would at load; ``filename``: the model file's name in its
    version folder, when it is not the platform's default."""
    from modelfn.runtime.autocomplete import autocomplete
    from modelfn.runtime.backends.onnxruntime import OnnxRuntimeBackend
    from modelfn.runtime.config import ModelConfig
    from modelfn.runtime.pbtxt_writer import config_to_pbtxt

    kind = MODEL_FILES.get(model_file.suffix.lower())
    if kind is None:
        raise InvalidInput(f"{model_file}: init takes an ONNX model (.onnx)")
    platform, default = kind
    given = ModelConfig(default_model_filename=filename) if filename not in (None, default) \
        else None
    signature = OnnxRuntimeBackend.read_signature(model_file)
    config = autocomplete(given, name=name, signature=signature, platform=platform)
    # The instance kind belongs to the machine that serves the model, not to the one that
    # scaffolds it: KIND_AUTO (left out of the file) lets serve pick the GPU where there is
    # one, as Triton's auto-complete does at load, instead of pinning every model to the CPU.
    for group in config.instance_group:
        group.kind = "KIND_AUTO"
    return config_to_pbtxt(config.to_json())


def version_model_file(model_dir: Path, version: int | None = None) -> Path:
    """The model file of one of ``model_dir``'s version folders (default: the highest),
    which a missing config.pbtxt is completed from: ``model.onnx``, or the one ``.onnx``
    file there."""
    numbers = local_versions(model_dir)
    if not numbers:
        raise InvalidInput(f"{model_dir} has no config.pbtxt and no version folder (1/, 2/, "
                           "...): make the model folder with modelfn init MODEL.onnx --name "
                           "NAME")
    folder = model_dir / str(version or numbers[-1])
    found = sorted(p for p in folder.iterdir() if p.suffix.lower() in MODEL_FILES)
    named = [p for p in found if p.name == MODEL_FILES[p.suffix.lower()][1]]
    if len(named) == 1 or len(found) == 1:
        return (named or found)[0]
    what = "several models" if found else "no ONNX model (.onnx)"
    raise InvalidInput(f"{model_dir} has no config.pbtxt, and {folder} holds {what} to "
                       "complete one from: write config.pbtxt (Triton's format) beside the "
                       "version folders")


def write_config(model_dir: Path, model_file: Path | None = None) -> Path:
    """Write ``model_dir/config.pbtxt``, completed from ``model_file`` (default: the model
    file of its highest version folder); returns the model file."""
    model_file = model_file or version_model_file(model_dir)
    text = complete_config(model_file, names.model_name(model_dir.name), model_file.name)
    try:
        (model_dir / CONFIG_NAME).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InvalidInput(f"cannot write {model_dir / CONFIG_NAME}: "
                           f"{exc.strerror or exc}") from None
    return model_file


def init_folder(model_dir: Path, name: str | None = None, *, force: bool = False) -> Path:
    """``init`` of a model folder that holds its versions: its config.pbtxt, completed from
    the highest version's model (over one that is there only with ``force``)."""
    if name is not None and name != model_dir.name:
        raise InvalidInput(f"{model_dir} is model '{model_dir.name}' (a model's name is its "
                           "folder's): leave --name out, or rename the folder")
    if (model_dir / CONFIG_NAME).exists() and not force:
        raise InvalidInput(f"{model_dir / CONFIG_NAME} already exists; pass --force to "
                           "complete a new one over it")
    return write_config(model_dir)


def scaffold_model(model_file: Path, name: str, repo: Path, *, force: bool = False) -> Path:
    """``<repo>/<name>/1/model.onnx`` plus a config.pbtxt auto-completed from its signature;
    returns the model file in the repository.

    A ``model_file`` already in a version folder of ``<repo>/<name>`` stays where it is:
    only the config is written (over one that is there only with ``force``)."""
    name = names.model_name(name)
    model_dir = repo / name
    kind = MODEL_FILES.get(model_file.suffix.lower())
    if kind is None:
        raise InvalidInput(f"{model_file}: init takes an ONNX model (.onnx)")
    if model_dir.is_dir() and model_file.resolve().is_relative_to(model_dir.resolve()):
        folders = {(model_dir / str(v)).resolve() for v in local_versions(model_dir)}
        if model_file.parent.resolve() not in folders:
            raise InvalidInput(f"{model_file} is not in a version folder of {model_dir}: move "
                               f"it to {model_dir / '1' / kind[1]} and run init again")
        if (model_dir / CONFIG_NAME).exists() and not force:
            raise InvalidInput(f"{model_dir / CONFIG_NAME} already exists; pass --force to "
                               "complete a new one over it")
        return write_config(model_dir, model_file)
    if model_dir.exists() and not force and (not model_dir.is_dir() or any(model_dir.iterdir())):
        holds_versions = model_dir.is_dir() and not (model_dir / CONFIG_NAME).exists() \
            and bool(local_versions(model_dir))
        hint = (f", or run modelfn init {model_dir} to complete its config from the model it "
                "holds") if holds_versions else ""
        raise InvalidInput(f"{model_dir} already exists; pass --force to replace it with "
                           f"{model_file}{hint}")
    text = complete_config(model_file, name)
    external = external_data_files(model_file)
    filename = kind[1]
    try:
        if model_dir.exists():  # --force: the model as init makes it, no version left over
            shutil.rmtree(model_dir) if model_dir.is_dir() else model_dir.unlink()
        (model_dir / "1").mkdir(parents=True)
        shutil.copyfile(model_file, model_dir / "1" / filename)
        for name in external:  # the weights kept beside the model, where it names them
            (model_dir / "1" / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(model_file.parent / name, model_dir / "1" / name)
        (model_dir / CONFIG_NAME).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InvalidInput(f"cannot write the model into {repo}: {exc.strerror or exc}"
                           + (f": {exc.filename}" if exc.filename else "")) from None
    return model_dir / "1" / filename


def external_data_files(model_file: Path) -> list[str]:
    """The files an ONNX model keeps its external data in, as the relative paths it names
    them by (they must lie beside it or below), anywhere in its graphs."""
    import onnx

    try:
        model = onnx.load(str(model_file), load_external_data=False)
    except Exception as exc:  # read_signature read it already; a file that changed since
        raise InvalidInput(f"{model_file}: cannot read the ONNX model: {exc}") from None

    def tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
        yield from graph.initializer
        for node in graph.node:
            for attribute in node.attribute:
                if attribute.HasField("t"):
                    yield attribute.t
                yield from attribute.tensors
                for sub in (*([attribute.g] if attribute.HasField("g") else []),
                            *attribute.graphs):
                    yield from tensors(sub)

    names: set[str] = set()
    for tensor in tensors(model.graph):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        location = next((e.value for e in tensor.external_data if e.key == "location"), "")
        # as onnxruntime takes it: a path below the model's folder (a link in it may lead
        # elsewhere, as in a Hugging Face cache; the copy follows it)
        name = posixpath.normpath(location.replace("\\", "/"))
        if (not location or name.startswith(("/", "../")) or name == ".."
                or not (model_file.parent / name).is_file()):
            raise InvalidInput(f"{model_file}: tensor '{tensor.name}' keeps its data in "
                               f"'{location}', which is not a file beside the model")
        names.add(name)
    return sorted(names)


def parse_ref(ref: str) -> tuple[str, int | str]:
    """``NAME``, ``NAME:VERSION`` or ``NAME:latest``, as the store takes them."""
    name, version = parse_model_ref(ref)
    return name, "latest" if version is None else version


@contextlib.contextmanager
def transfer_bar(description: str) -> Iterator[Progress]:
    """A progress bar on stderr, shown from the first byte on: a transfer that moves
    nothing (an identical push, a version the store lacks) leaves no trace before its
    one line."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TaskID,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
               TransferSpeedColumn(), TimeRemainingColumn())
    with contextlib.ExitStack() as stack:
        shown: list[tuple[Progress, TaskID]] = []

        def advance(n: int, total: int) -> None:  # called one call at a time (transfer.py)
            if not shown:
                bar = stack.enter_context(Progress(*columns, console=Console(stderr=True),
                                                   transient=True))
                shown.append((bar, bar.add_task(description, total=None)))
            bar, task = shown[0]
            bar.update(task, advance=n, total=total)

        yield advance


@click.command("init")
@click.argument("model", metavar="[MODEL]", required=False,
                type=click.Path(exists=True, path_type=Path))
@click.option("--name", help="Model name (the directory in the repository); a model folder's "
                             "is its own.")
@click.option("--python", metavar="NAME",
              help="Instead of MODEL: scaffold a new model for Triton's Python backend, "
                   "REPO/NAME/config.pbtxt and a working REPO/NAME/1/model.py.")
@click.option("--repo", type=click.Path(file_okay=False, path_type=Path), default=Path("models"),
              show_default=True, envvar="MODELFN_REPO", help="Model repository directory.")
@click.option("--force", is_flag=True,
              help="Overwrite an existing model directory (a model folder's config.pbtxt).")
def init(model: Path | None, name: str | None, python: str | None, repo: Path,
         force: bool) -> None:
    """Scaffold REPO/NAME/1/model.onnx and a config.pbtxt completed from the model's signature.

    MODEL is an ONNX file, or a model folder that holds its versions (DIR/1/model.onnx, ...):
    then DIR/config.pbtxt is written, completed from the highest version's model.

    With --python NAME (and no MODEL): REPO/NAME/config.pbtxt (backend "python", its tensors,
    max_batch_size, dynamic batching) and REPO/NAME/1/model.py, a TritonPythonModel that
    modelfn serve (or Triton) answers as written, for you to make your own."""
    if python is not None:
        init_python(model, name, python, repo, force)
        return
    if model is None:
        raise click.UsageError("Missing argument 'MODEL' (or --python NAME for a new Python "
                               "model).")
    with exit_on_error():
        if model.is_dir():
            model_path = init_folder(model, name, force=force)
        elif name is None:
            raise click.UsageError("Missing option '--name': the name of the model "
                                   f"{model} is to have.")
        else:
            model_path = scaffold_model(model, name, repo, force=force)
        from modelfn.runtime.config_file import load_config

        model_dir = model_path.parent.parent
        config = load_config(model_dir)
    if model.is_dir() or model_path.resolve() == model.resolve():
        click.echo(f"created {model_dir / CONFIG_NAME}, completed from {model_path}")
    else:
        click.echo(f"created {model_dir / CONFIG_NAME} and {model_path}")
    if config is not None and config.max_batch_size:
        click.echo(
            f"note: max_batch_size {config.max_batch_size} is Triton's auto-complete default "
            "for a model with a dynamic batch dimension. A function batches up to this many "
            "concurrent rows, so a cheap model gains from more (the example digits model uses "
            "64): edit max_batch_size in config.pbtxt, or set the default_max_batch_size "
            "parameter. Warmup runs every batch size up to it before the model is ready, so a "
            "large value costs cold-start time on a slow model (modelfn serve logs the phases).")
    elif config is not None:
        click.echo("note: max_batch_size 0: the model has no dynamic batch dimension, so "
                   "requests are not batched together")
    note = denormal_note(model_path)
    if note is not None:
        click.echo(note)


def init_python(model: Path | None, name: str | None, python_name: str, repo: Path,
                force: bool) -> None:
    """``init --python NAME``: a new Python model, from the package's templates."""
    from modelfn.cli.python_model import scaffold_python

    if model is not None:
        raise click.UsageError(f"--python {python_name} scaffolds a new model: give MODEL "
                               f"({model}) or --python, not both.")
    if name is not None and name != python_name:
        raise click.UsageError(f"--python {python_name} names the model: leave --name out.")
    with exit_on_error():
        model_file = scaffold_python(python_name, repo, force=force)
    model_dir = model_file.parent.parent
    click.echo(f"created {model_dir / CONFIG_NAME} and {model_file}: OUTPUT = INPUT * 2 until "
               f"you change execute(); modelfn serve {repo} answers it now")


def denormal_note(model_path: Path) -> str | None:
    """The advice ``init`` and ``tune`` give for a model with denormal weights (None when
    it has none, or its file cannot be read: the commands report that themselves)."""
    from modelfn.runtime.backends import denormals

    try:
        found = denormals.count(model_path, external=False)
    except (OSError, ValueError):
        return None
    if not found:
        return None
    return (f"note: {found} of the model's weights are denormal (nonzero, below 1.2e-38). "
            "x86 CPUs compute with such values many times slower: on one core the example "
            "digits model runs a batch of 16 5.7x slower for its 314. To zero them at load, "
            "which leaves a product with any sane input unchanged, add to config.pbtxt: "
            'parameters { key: "flush_denormal_weights" value: { string_value: "1" } }')


@click.command("push")
@click.argument("model_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@store_option
@click.option("--version", type=click.IntRange(min=1), default=None,
              help="Push this local version folder as this version; default: the highest "
                   "local version, as its own number when the store has none at or above it, "
                   "else as the next free one.")
@click.option("--name", default=None,
              help="Model name in the store (the config pushed names it); default: the "
                   "directory's.")
@click.option("--force-config", is_flag=True,
              help="Replace the model's config.pbtxt in the store when it differs.")
@endpoint_url_option
def push(model_dir: Path, store_uri: str | None, version: int | None, name: str | None,
         force_config: bool, endpoint_url: str | None) -> None:
    """Push MODEL_DIR (config.pbtxt + version folders) as an immutable version.

    A MODEL_DIR without config.pbtxt gets one first, completed from the model as
    `modelfn init` completes it."""
    with exit_on_error():
        from modelfn.runtime.backends.python.requirements import missing_requirements
        from modelfn.runtime.config_file import load_config
        from modelfn.runtime.repository import check_version

        store_uri = require_store(store_uri)
        number = local_version(model_dir, version)
        if not (model_dir / CONFIG_NAME).exists():
            model_file = write_config(model_dir, version_model_file(model_dir, number))
            click.echo(f"wrote {model_dir / CONFIG_NAME}, completed from {model_file} as "
                       "modelfn init does")
        # the version is immutable once pushed: it must load the way serve will load it (an
        # ensemble's steps are checked against their models in the store, by the push)
        given = load_config(model_dir)
        missing: list[str] = []
        if given is None or not given.is_ensemble:
            config = check_version(model_dir, number)
            if config.platform == PYTHON:
                missing = missing_requirements(model_dir)
        store = open_store(store_uri, endpoint_url=endpoint_url)
        with transfer_bar(f"push {name or model_dir.name}") as progress:
            result = store.push(model_dir, version=version, name=name,
                                force_config=force_config, progress=progress)
    click.echo(result.message)
    if missing:
        click.echo(f"note: requirements.txt asks for {', '.join(missing)}, not installed "
                   "here; modelfn build installs them into the function's image", err=True)


@click.command("versions")
@click.argument("name", required=False)
@store_option
@endpoint_url_option
def versions(name: str | None, store_uri: str | None, endpoint_url: str | None) -> None:
    """List the models of the store, or the versions of NAME, with sizes and dates."""
    from rich.console import Console
    from rich.filesize import decimal
    from rich.table import Table

    with exit_on_error():
        store = open_store(require_store(store_uri), endpoint_url=endpoint_url)
        if name:
            rows = store.list_versions(name)
            if not rows:  # a config.pbtxt, no version
                raise NotInStore(store.uri, name, models=store.list_models())
        else:
            rows = []
            for model in store.list_models():
                try:
                    rows += store.list_versions(model)
                except ModelNotFound:  # a directory beside the models: one is no reason to
                    click.echo(f"note: {model}/ in {store.uri} is not a model (no "  # list none
                               "config.pbtxt, no versions): skipped", err=True)
    table = Table("MODEL", "VERSION", "SIZE", "FILES", "CREATED", "DIGEST", box=None)
    for info in rows:
        if info.complete:
            table.add_row(info.model, str(info.version), decimal(info.size), str(info.files),
                          info.created, info.digest[:12])
        elif info.corrupt:
            table.add_row(info.model, str(info.version), "-", "-", "corrupt manifest", "")
        else:
            table.add_row(info.model, str(info.version), "-", "-", "incomplete (no manifest)", "")
    if not rows:
        click.echo(f"no models in {store.uri}")
        return
    Console(width=200).print(table)
    for info in rows:
        if info.corrupt:
            click.echo(f"warning: {info.model} version {info.version}: {info.corrupt}", err=True)


@click.command("pull")
@click.argument("ref", metavar="NAME[:VERSION]")
@click.argument("dest", metavar="DEST", type=click.Path(dir_okay=True, path_type=Path))
@store_option
@endpoint_url_option
def pull(ref: str, dest: Path, store_uri: str | None, endpoint_url: str | None) -> None:
    """Download NAME (latest, or VERSION) from the store into the repository DEST, verified."""
    if dest.is_file():
        raise click.UsageError(f"DEST {str(dest)!r} is a file, not a directory.")
    with exit_on_error():
        name, version = parse_ref(ref)
        store = open_store(require_store(store_uri), endpoint_url=endpoint_url)
        number = store.resolve(name, version)
        target = dest / name / str(number)
        if target.exists():
            raise InvalidInput(f"{target} already exists")
        with transfer_bar(f"pull {name}:{number}") as progress:
            fetched = store.fetch(name, number, progress=progress)
        copy_out(fetched / name, dest / name, number, f"{store.uri} ({name}:{number})")
    click.echo(f"pulled {name} version {number} into {dest / name}")
