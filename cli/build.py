"""``modelfn build``: an OCI image serving one model version, optionally pushed to a registry."""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import click

from modelfn.cli.errors import exit_on_error
from modelfn.cli.params import require_store

if TYPE_CHECKING:
    from modelfn.deploy.build import BuildResult

#: what an image runs: the HTTP server or the Lambda runtime
ENTRYPOINTS = ("http", "lambda")


def _context_dir(keep: Path | None, stack: contextlib.ExitStack) -> Path:
    if keep is not None:
        return keep
    return Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="modelfn-build-")))


@click.command("build")
@click.argument("model", metavar="NAME[:VERSION]")
@click.option("--repo", "repository", type=click.Path(file_okay=False, path_type=Path),
              envvar="MODELFN_REPOSITORY", show_envvar=True,
              help="Local model repository to take the model from.")
@click.option("--store", "store_uri", envvar="MODELFN_STORE", show_envvar=True, metavar="URI",
              help="Model store (s3://bucket/prefix, file:///path) to take the model from.")
@click.option("--entrypoint", type=click.Choice(ENTRYPOINTS), default=None,
              envvar="MODELFN_ENTRYPOINT", show_envvar=True,
              help="What the image runs: http, the HTTP server (Knative, Cloud Run, any "
                   "container); lambda, the Lambda runtime (AWS Lambda).  [default: http]")
@click.option("--target", "old_target", type=click.Choice(ENTRYPOINTS), default=None,
              hidden=True, help="Deprecated: --entrypoint.")
@click.option("--gpu/--cpu", default=False, help="CUDA base with onnxruntime-gpu and TensorRT.")
@click.option("--bake/--no-bake", default=False,
              help="Copy the model version into the image instead of fetching it at cold start "
                   "(implied by --repo without --store).")
@click.option("--base", metavar="IMAGE",
              help="Base image (default depends on the entrypoint).")
@click.option("--install-python/--base-has-python", "install_python", default=None,
              help="Force installing python3 with apt, or trust the base (default: detect).")
@click.option("--tag", help="Image name (default modelfn/NAME:VERSION-ENTRYPOINT[-gpu]).")
@click.option("--push", "registry", metavar="REGISTRY", envvar="MODELFN_REGISTRY",
              show_envvar=True, help="Registry (host[:port][/namespace]) to push to.")
@click.option("--builder", type=click.Choice(["docker", "podman", "buildah"]),
              envvar="MODELFN_BUILDER", show_envvar=True,
              help="Image builder (default: docker if its daemon answers, podman, buildah).")
@click.option("--storage-root", type=click.Path(file_okay=False, path_type=Path),
              envvar="MODELFN_STORAGE_ROOT", show_envvar=True,
              help="containers/storage root for podman and buildah.")
@click.option("--storage-driver", envvar="MODELFN_STORAGE_DRIVER", show_envvar=True,
              help="containers/storage driver, e.g. vfs.")
@click.option("--isolation", envvar="MODELFN_BUILD_ISOLATION", show_envvar=True,
              type=click.Choice(["chroot", "oci", "rootless"]), help="RUN step isolation.")
@click.option("--tls-verify/--no-tls-verify", default=True, show_default=True,
              help="Verify TLS when pulling the base and pushing.")
@click.option("--wheel", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              envvar="MODELFN_WHEEL", show_envvar=True,
              help="A built modelfn wheel (default: built from the source tree).")
@click.option("--pip-cert", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              envvar=["MODELFN_PIP_CERT", "PIP_CERT"], show_envvar=True,
              help="CA bundle pip trusts during the build (TLS-intercepting proxies); pip's "
                   "own PIP_CERT is honoured too.")
@click.option("--keep-context", type=click.Path(file_okay=False, path_type=Path),
              help="Write the build context here and keep it.")
@click.option("-q", "--quiet", is_flag=True, help="Only print the image reference.")
def build(model: str, repository: Path | None, store_uri: str | None,
          entrypoint: str | None, old_target: str | None, gpu: bool,
          bake: bool, base: str | None, install_python: bool | None, tag: str | None,
          registry: str | None, builder: str | None, storage_root: Path | None,
          storage_driver: str | None, isolation: str | None, tls_verify: bool,
          wheel: Path | None, pip_cert: Path | None, keep_context: Path | None,
          quiet: bool) -> None:
    """Build an OCI image serving model NAME (latest version unless :VERSION is given).

    The image runs the HTTP server (--entrypoint http) or the Lambda runtime (--entrypoint
    lambda); `modelfn deploy --target` then puts it on a platform. With --bake the model
    version is copied in; otherwise the image fetches it from --store at cold start. With
    --push the image is pushed and its reference printed by digest.
    """
    from modelfn.cli.store import parse_ref
    from modelfn.deploy.build import build_image
    from modelfn.platforms.podman import Storage

    entrypoint = _entrypoint(entrypoint, old_target)
    if repository is None:
        with exit_on_error():
            store_uri = require_store(store_uri, "a local repository with --repo DIR")
    if repository is not None and store_uri is not None and not bake:
        raise click.UsageError("--repo and --store together only make sense with --bake")
    bake = bake or store_uri is None  # a local repository can only be baked in
    say = None if quiet else _echo_dim
    storage = Storage(storage_root, storage_driver, isolation)
    with exit_on_error(), contextlib.ExitStack() as stack:
        name, version = parse_ref(model)
        result = build_image(
            name, version, repository=repository, store_uri=store_uri,
            target="lambda" if entrypoint == "lambda" else "http", gpu=gpu, bake=bake, base=base,
            tag=tag, push=registry, builder=builder, tls_verify=tls_verify, progress=say,
            storage=storage, install_python=install_python, wheel=wheel, pip_cert=pip_cert,
            context_dir=_context_dir(keep_context, stack),
        )
    _report(result, quiet)


def _entrypoint(entrypoint: str | None, old_target: str | None) -> str:
    """``--entrypoint``, or the deprecated ``--target`` (one warning line; the word now
    names where ``deploy`` puts a function)."""
    if old_target is None:
        return entrypoint or "http"
    if entrypoint is not None and entrypoint != old_target:
        raise click.UsageError(f"--target {old_target} (deprecated) and --entrypoint "
                               f"{entrypoint} disagree: give --entrypoint only")
    click.echo(f"warning: modelfn build --target is deprecated, use --entrypoint "
               f"{old_target} (--target names where `modelfn deploy` puts a function)",
               err=True)
    return old_target


def _echo_dim(line: str) -> None:
    click.secho(line, err=True, dim=True)


def _report(result: BuildResult, quiet: bool) -> None:
    if not quiet:
        click.secho(f"built {result.image} with {result.builder}", err=True, fg="green")
        if result.image_id:
            click.echo(f"image id: {result.image_id}", err=True)
    click.echo(result.reference)
