"""Model store commands: ``init``, ``push``, ``versions``, ``pull``.

Standalone click commands (the main group adds them). Each parses its arguments
and calls the library; store errors exit with the code their status maps to
(``cli.errors``), transfers show a progress bar on stderr.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import click

from modelfn.cli.errors import exit_on_error
from modelfn.model_store import names, open_store
from modelfn.model_store.checkout import copy_out
from modelfn.runtime.errors import InvalidInput, ModelNotFound
from modelfn.runtime.names import parse_model_ref

if TYPE_CHECKING:
    from collections.abc import Iterator

    from modelfn.model_store.transfer import Progress

#: model file suffix -> (platform, file name in the version directory)
MODEL_FILES: dict[str, tuple[str, str]] = {".onnx": ("onnxruntime_onnx", "model.onnx")}

STORE_ENV = "MODELFN_STORE"
#: STORE is the first argument, left out when $MODELFN_STORE is set (see ``store_first``)
store_argument = click.argument("store_uri", metavar="[STORE]", required=False)
endpoint_option = click.option(
    "--endpoint-url", envvar="MODELFN_S3_ENDPOINT", show_envvar=True, default=None, metavar="URL",
    help="S3-compatible endpoint (LocalStack, MinIO...); also AWS_ENDPOINT_URL.",
)


def scaffold_model(model_file: Path, name: str, repo: Path, *, force: bool = False) -> Path:
    """``<repo>/<name>/1/model.onnx`` plus a config.pbtxt auto-completed from its signature."""
    from modelfn.runtime.autocomplete import autocomplete
    from modelfn.runtime.backends.onnxruntime import OnnxRuntimeBackend
    from modelfn.runtime.pbtxt_writer import config_to_pbtxt

    name = names.model_name(name)
    kind = MODEL_FILES.get(model_file.suffix.lower())
    if kind is None:
        raise InvalidInput(f"{model_file}: init takes an ONNX model (.onnx)")
    platform, filename = kind
    signature = OnnxRuntimeBackend.read_signature(model_file)
    external = external_data_files(model_file)
    config = autocomplete(None, name=name, signature=signature, platform=platform)
    # The instance kind belongs to the machine that serves the model, not to the one that
    # scaffolds it: KIND_AUTO (left out of the file) lets serve pick the GPU where there is
    # one, as Triton's auto-complete does at load, instead of pinning every model to the CPU.
    for group in config.instance_group:
        group.kind = "KIND_AUTO"
    model_dir = repo / name
    if model_dir.exists() and not force:
        raise InvalidInput(f"{model_dir} already exists; pass --force to overwrite it")
    if model_dir.exists() and model_file.resolve().is_relative_to(model_dir.resolve()):
        raise InvalidInput(f"{model_file} is inside {model_dir}, which --force would replace: "
                           "copy the model file elsewhere first")
    try:
        if model_dir.exists():  # --force: the model as init makes it, no version left over
            shutil.rmtree(model_dir) if model_dir.is_dir() else model_dir.unlink()
        (model_dir / "1").mkdir(parents=True)
        shutil.copyfile(model_file, model_dir / "1" / filename)
        for name in external:  # the weights kept beside the model, where it names them
            (model_dir / "1" / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(model_file.parent / name, model_dir / "1" / name)
        (model_dir / "config.pbtxt").write_text(config_to_pbtxt(config.to_json()),
                                                encoding="utf-8")
    except OSError as exc:
        raise InvalidInput(f"cannot write the model into {repo}: {exc.strerror or exc}"
                           + (f": {exc.filename}" if exc.filename else "")) from None
    return model_dir


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


def is_store(text: str) -> bool:
    """Whether an argument names a store: a URI (``s3://``, ``file://``) or an existing path."""
    return "://" in text or Path(text).expanduser().exists()


def store_first(given: tuple[str | None, ...]) -> list[str | None]:
    """The positional arguments ``[STORE] ARG...`` as ``[store, *args]``, as long as
    ``given`` (missing trailing ones None). Without $MODELFN_STORE the first argument is
    STORE. With it, STORE comes from the environment when fewer arguments were given than
    the command takes, unless only the last is missing and the first is a store (a URI or
    an existing path): ``versions digits`` lists the model ``digits``, ``versions ./store``
    the store ``./store``."""
    present = [g for g in given if g is not None]
    env = os.environ.get(STORE_ENV) or None
    if env is not None and len(present) < len(given) and not (
            len(present) == len(given) - 1 and is_store(str(present[0]))):
        present.insert(0, env)
    if not present:
        raise click.UsageError(f"Missing argument 'STORE' (or set ${STORE_ENV}).")
    return present + [None] * (len(given) - len(present))


def parse_ref(ref: str) -> tuple[str, int | str]:
    """``NAME``, ``NAME:VERSION`` or ``NAME:latest``, as the store takes them."""
    name, version = parse_model_ref(ref)
    return name, "latest" if version is None else version


@contextlib.contextmanager
def transfer_bar(description: str) -> Iterator[Progress]:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
               TransferSpeedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=None)

        def advance(n: int, total: int) -> None:
            bar.update(task, advance=n, total=total)

        yield advance


@click.command("init")
@click.argument("model_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--name", required=True, help="Model name (the directory in the repository).")
@click.option("--repo", type=click.Path(file_okay=False, path_type=Path), default=Path("models"),
              show_default=True, envvar="MODELFN_REPO", help="Model repository directory.")
@click.option("--force", is_flag=True, help="Overwrite an existing model directory.")
def init(model_file: Path, name: str, repo: Path, force: bool) -> None:
    """Scaffold REPO/NAME/1/model.onnx and a config.pbtxt completed from the model's signature."""
    with exit_on_error():
        model_dir = scaffold_model(model_file, name, repo, force=force)
        from modelfn.runtime.config import load_config

        config = load_config(model_dir)
    model_path = next(p for p in (model_dir / "1").iterdir() if p.is_file())
    click.echo(f"created {model_dir / 'config.pbtxt'} and {model_path}")
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
@click.option("--store", "store_uri", envvar="MODELFN_STORE", show_envvar=True, required=True,
              metavar="URI",
              help="s3://bucket/prefix, file:///path or a directory ($MODELFN_STORE).")
@click.option("--version", type=click.IntRange(min=1), default=None,
              help="Push this local version directory as this version; default: the highest "
                   "local version as the next free version in the store.")
@click.option("--name", default=None, help="Model name in the store; default: the directory's.")
@click.option("--force-config", is_flag=True,
              help="Replace the model's config.pbtxt in the store when it differs.")
@endpoint_option
def push(model_dir: Path, store_uri: str, version: int | None, name: str | None,
         force_config: bool, endpoint_url: str | None) -> None:
    """Push MODEL_DIR (config.pbtxt + version directories) as an immutable version."""
    with exit_on_error():
        from modelfn.runtime.repository import check_version

        # the version is immutable once pushed: it must load the way serve will load it
        check_version(model_dir, version, name)
        store = open_store(store_uri, endpoint_url=endpoint_url)
        with transfer_bar(f"push {name or model_dir.name}") as progress:
            result = store.push(model_dir, version=version, name=name,
                                force_config=force_config, progress=progress)
    click.echo(f"{result.message} to {store.uri}")


@click.command("versions")
@store_argument
@click.argument("name", required=False)
@endpoint_option
def versions(store_uri: str | None, name: str | None, endpoint_url: str | None) -> None:
    """List the models of STORE, or the versions of NAME, with sizes and dates.

    STORE (s3://bucket/prefix, file:///path or a directory) may be left out when
    $MODELFN_STORE is set: then one argument that is not a store URI or an existing path
    is NAME (`modelfn versions digits`), and one that is, is STORE."""
    from rich.console import Console
    from rich.filesize import decimal
    from rich.table import Table

    store_uri, name = store_first((store_uri, name))
    assert store_uri is not None
    with exit_on_error():
        store = open_store(store_uri, endpoint_url=endpoint_url)
        if name:
            rows = store.list_versions(name)
            if not rows:
                raise ModelNotFound(name)
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
@store_argument
@click.argument("ref", metavar="NAME[:VERSION]")
@click.argument("dest_arg", metavar="DEST", required=False)
@endpoint_option
def pull(store_uri: str | None, ref: str, dest_arg: str | None, endpoint_url: str | None
         ) -> None:
    """Download NAME (latest, or VERSION) from STORE into the repository DEST, verified.

    STORE (s3://bucket/prefix, file:///path or a directory) may be left out when
    $MODELFN_STORE is set (`modelfn pull digits:2 models`); with one argument fewer, the
    first is still STORE when it is a store URI or an existing path."""
    store_uri, name_ref, dest_text = store_first((store_uri, ref, dest_arg))
    if store_uri is None or name_ref is None or dest_text is None:
        raise click.UsageError("Missing argument 'DEST'.")
    ref, dest = name_ref, Path(dest_text)
    if dest.is_file():
        raise click.UsageError(f"DEST {dest_text!r} is a file, not a directory.")
    with exit_on_error():
        name, version = parse_ref(ref)
        store = open_store(store_uri, endpoint_url=endpoint_url)
        number = store.resolve(name, version)
        target = dest / name / str(number)
        if target.exists():
            raise InvalidInput(f"{target} already exists")
        with transfer_bar(f"pull {name}:{number}") as progress:
            fetched = store.fetch(name, number, progress=progress)
        copy_out(fetched / name, dest / name, number, f"{store.uri} ({name}:{number})")
    click.echo(f"pulled {name} version {number} into {dest / name}")
