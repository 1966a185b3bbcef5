"""One deploy, on any target: plan → build → render → validate → apply → routes.

``deploy`` takes the model version from the store with the user's options (``plan``),
builds its image first when asked (``build``), has the target render and check its
objects, applies them (a dry run prints them instead; a target that only renders prints
them and how to apply them), and writes the routing table the gateway reads once the
platform serves the deployment. Progress goes to ``progress``, what a dry run prints to
``output``; the command that calls it only parses options and prints.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from modelfn.deploy.plan import plan, resolve, routes_after

if TYPE_CHECKING:
    from collections.abc import Callable

    from modelfn.deploy.plan import Options
    from modelfn.deploy.targets import Target
    from modelfn.model_store.base import ModelStore
    from modelfn.model_store.routes import ModelRoutes, RouteSource

    Build = Callable[[str, int], str]


def deploy(store: ModelStore, ref: str, options: Options, target: Target,
           source: RouteSource, current: ModelRoutes | None, *, label: str,
           build: Build | None = None, dry_run: bool = False, timeout_s: float = 600.0,
           progress: Callable[[str], None], output: Callable[[str], None]) -> str:
    """Deploy ``ref`` (``name[:version]``) to ``target`` and return the URL that serves
    its split ("" when nothing was applied). ``current``: the model's routing table now;
    ``label``: the target as the user names it, for the progress line; ``build``: makes
    the image of a resolved ``(name, version)`` and returns it by digest."""
    if build is not None:
        name, number = resolve(store, ref)
        ref = f"{name}:{number}"
        options = replace(options, image=build(name, number))
    deployment = plan(store, ref, options, current)
    rendered = target.render(deployment, dry_run=dry_run, progress=progress)
    target.validate(rendered)
    if dry_run or not target.applies:
        output(target.show(rendered, deployment))
        if not target.applies:
            progress(target.apply_hint())
        return ""
    progress(f"deploying {deployment.model}:{deployment.version} with {label}"
             f"{target.describe(rendered)}, split {dict(deployment.traffic)}")
    applied = target.apply(deployment, rendered, timeout_s=timeout_s,
                           progress=lambda text: progress(f"  {text}"))
    routing = target.routing
    table = routes_after(deployment, current, target=routing.target, url=applied.url,
                         pinned=applied.pinned, auth=routing.auth, region=routing.region,
                         concurrency=routing.concurrency)
    source.write(table)
    if not applied.changed and current == table:
        progress("unchanged: the same version, image and split were already deployed")
    for version, route in sorted(table.versions.items()):
        progress(f"  v{version}: {route.url}")
    return applied.url
