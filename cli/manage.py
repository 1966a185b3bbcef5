"""``modelfn traffic``, ``rollback``, ``status`` and ``undeploy``: a deployed model's split,
its history, what the platform says of it, and its removal.

The routing table (the store's ``_routes/<model>.json``) says where a model is deployed, so
these commands need no ``--target`` (one given must agree with it). They change the
platform first (Knative's ``spec.traffic``, the Lambda ``live`` alias) and write the table
after, so the gateway never routes to a split the platform does not have. ``status`` reads
the split the platform serves (the target's ``served_split``) and, when a change made
outside modelfn (``kubectl patch``, boto3 ``update_alias``) left the table behind, prints
both and the ``modelfn traffic`` that reconciles them. ``--dry-run`` reads the platform
through a recorder (``deploy/recorder``) and prints the calls the same code would make,
changing nothing. Data goes to stdout, notes to stderr.
"""

from __future__ import annotations

import json
import urllib.request
from typing import TYPE_CHECKING, Any

import click

from modelfn.cli.errors import exit_on_error
from modelfn.cli.params import DURATION_OR_ZERO
from modelfn.cli.targets import (
    ModelNotDeployed,
    Where,
    deployed_options,
    describe,
)
from modelfn.model_store.routes import LOCAL_LAMBDA
from modelfn.runtime.errors import InvalidInput

if TYPE_CHECKING:
    from collections.abc import Mapping

    from modelfn.deploy.recorder import CallRecorder
    from modelfn.deploy.split import ServedSplit
    from modelfn.deploy.targets import Target
    from modelfn.model_store.routes import ModelRoutes, RouteSource


def note(text: str) -> None:
    click.echo(text, err=True)


def parse_split(pairs: tuple[str, ...], versions: Mapping[int, object] | None
                ) -> dict[int, int]:
    """``("1=0", "2=100")`` as a split over every deployed version (unnamed ones get 0);
    ``versions`` None: whatever versions are named."""
    split = dict.fromkeys(versions or {}, 0)
    for pair in pairs:
        version, sep, percent = pair.partition("=")
        try:
            if not sep:
                raise ValueError
            v, p = int(version.removeprefix("v")), int(percent.removesuffix("%"))
        except ValueError:
            raise InvalidInput(f"'{pair}' is not VERSION=PERCENT (e.g. 2=100)") from None
        if versions is not None and v not in versions:
            raise InvalidInput(f"version {v} is not deployed (deployed: "
                               f"{', '.join(map(str, sorted(versions)))})")
        if not 0 <= p <= 100:
            raise InvalidInput(f"'{pair}': a percent is between 0 and 100")
        split[v] = p
    if sum(split.values()) != 100:
        raise InvalidInput(f"the percents add up to {sum(split.values())}, not 100: "
                           f"{_show(split)}")
    return split


def _show(split: Mapping[int, int]) -> str:
    return " ".join(f"{v}={p}" for v, p in sorted(split.items()))


class Platform:
    """What a command changes: ``where``'s platform and the routing table; with ``dry_run``
    a platform that is read but whose changes are recorded (``calls``), and a table left
    as it is."""

    def __init__(self, where: Where, dry_run: bool) -> None:
        self.where = where
        self.dry_run = dry_run
        self._recorders: list[CallRecorder] = []

    def target(self) -> Target:
        """``where``'s deploy target, or with ``dry_run`` its recording twin."""
        target = self.where.platform()
        if not self.dry_run:
            return target
        recording, recorder = target.recording()
        self._recorders.append(recorder)
        return recording

    def write(self, source: RouteSource, table: ModelRoutes) -> None:
        if not self.dry_run:
            source.write(table)

    def delete(self, source: RouteSource, model: str) -> None:
        if not self.dry_run:
            source.delete(model)

    def report(self, done: str, would: str | None = None) -> None:
        """Say what was ``done``; a dry run prints the platform calls it would make (stdout,
        JSON) and says what it ``would`` do (``done`` where that reads the same)."""
        if not self.dry_run:
            note(done)
            return
        calls = [call for recorder in self._recorders for call in recorder.calls]
        click.echo(json.dumps(calls, indent=2, default=str))
        note(f"--dry-run: {would or done}; nothing was changed "
             f"({len(calls) or 'no'} platform call{'' if len(calls) == 1 else 's'})")


def apply_split(platform: Platform, table: ModelRoutes, split: Mapping[int, int],
                wait_s: float) -> bool:
    """Move the platform to ``split``; False when it already had it."""
    return platform.target().set_split(table.model, split, timeout_s=wait_s,
                                       progress=lambda text: note(f"  {text}"))


def _commit(platform: Platform, source: RouteSource, table: ModelRoutes, after: ModelRoutes,
            wait_s: float) -> None:
    changed = apply_split(platform, table, after.split, wait_s)
    platform.write(source, after)
    move = f"{table.model}: {_show(table.split)} -> {_show(after.split)}"
    had = "" if changed else " (the platform had it already)"
    platform.report(f"{move}{had}", f"would move {move}{had}")


def _cloudrun_traffic(model: str, split: Mapping[int, int], region: str | None) -> None:
    """There is no gcloud here: say the command that applies the split on Cloud Run."""
    tags = ",".join(f"v{v}={p}" for v, p in sorted(split.items()))
    from modelfn.deploy.knative import service_name

    click.echo(f"gcloud run services update-traffic {service_name(model)} --to-tags {tags}"
               + (f" --region {region}" if region else ""))
    note("run it where gcloud is configured (Cloud Run applies the split; modelfn does not "
         "call Google Cloud)")


@click.command()
@click.argument("model")
@click.argument("split", nargs=-1, required=True, metavar="VERSION=PERCENT...")
@deployed_options
@click.option("--wait", "wait_s", default="10m", show_default=True, type=DURATION_OR_ZERO,
              help="How long to wait for the route to be Ready.")
@click.option("--dry-run", is_flag=True,
              help="Print the platform calls it would make (JSON); change nothing.")
def traffic(model: str, split: tuple[str, ...], where: Where,
            wait_s: float, dry_run: bool) -> None:
    """Set the traffic split of a deployed model, e.g. `1=0 2=100` promotes version 2."""
    with exit_on_error():
        if where.target == "cloudrun":  # it only prints a command, dry run or not
            _cloudrun_traffic(model, parse_split(split, None), where.region)
            return
        source, table = where.deployed(model)
        after = table.with_split(parse_split(split, table.versions))
        _commit(Platform(where, dry_run), source, table, after, wait_s)


@click.command()
@click.argument("model")
@deployed_options
@click.option("--wait", "wait_s", default="10m", show_default=True, type=DURATION_OR_ZERO,
              help="How long to wait for the route to be Ready.")
@click.option("--dry-run", is_flag=True,
              help="Print the platform calls it would make (JSON); change nothing.")
def rollback(model: str, where: Where, wait_s: float, dry_run: bool) -> None:
    """Undo the last traffic change: restore the previous split."""
    with exit_on_error():
        source, table = where.deployed(model)
        _commit(Platform(where, dry_run), source, table, table.rolled_back(), wait_s)


@click.command()
@click.argument("model")
@click.option("--version", "version", type=int,
              help="Remove only this version (it must have no traffic left).")
@deployed_options
@click.option("--wait", "wait_s", default="10m", show_default=True, type=DURATION_OR_ZERO,
              help="How long to wait for the route to be Ready.")
@click.option("--dry-run", is_flag=True,
              help="Print the platform calls it would make (JSON); change nothing.")
def undeploy(model: str, version: int | None, where: Where,
             wait_s: float, dry_run: bool) -> None:
    """Remove a deployed model (its Service or function), or one of its versions."""
    with exit_on_error():
        from dataclasses import replace

        platform = Platform(where, dry_run)
        try:
            source, table = where.deployed(model)
        except ModelNotDeployed as exc:
            if where.target is None and version is None:
                raise ModelNotDeployed(model, f"{exc.where}; to remove what a platform still "
                                       "has of it, give its --target") from None
            if version is not None or not _remove_unrouted(platform, model):
                raise
            platform.report(f"undeployed {model} (no routing table named it; removed what "
                            "the platform had)", f"would remove {model} from the platform "
                            "(no routing table names it)")
            return
        if version is not None and set(table.versions) != {version}:
            if version not in table.versions:
                raise InvalidInput(f"version {version} of '{model}' is not deployed "
                                   f"(deployed: {', '.join(map(str, sorted(table.versions)))})")
            if table.split.get(version, 0) > 0:
                raise InvalidInput(
                    f"version {version} of '{model}' still takes {table.split[version]}% of "
                    f"the traffic; move it first, e.g. "
                    f"{where.hint('traffic', model, *_without(table, version))}")
            split = {v: p for v, p in table.split.items() if v != version}
            platform.target().remove_version(model, version, split, timeout_s=wait_s,
                                             progress=lambda text: note(f"  {text}"))
            platform.write(source, replace(
                table, split=split,
                versions={v: r for v, r in table.versions.items() if v != version},
                history=tuple(h for h in table.history if version not in h)))
            platform.report(f"undeployed {model} version {version}; serving {_show(split)}",
                            f"would undeploy {model} version {version} and serve "
                            f"{_show(split)}")
            return
        gone = platform.target().delete(model)
        platform.delete(source, model)
        left = "" if gone else " (the platform had nothing left of it)"
        platform.report(f"undeployed {model}{left}", f"would undeploy {model}{left}")


def _without(table: ModelRoutes, version: int) -> list[str]:
    """A split that takes ``version`` out of ``table``'s: its share goes to the version
    that serves the most (the newest of equals), as ``VERSION=PERCENT`` words."""
    rest = {v: table.split.get(v, 0) for v in table.versions if v != version}
    heir = max(rest, key=lambda v: (rest[v], v))
    rest[heir] += table.split.get(version, 0)
    return [f"{v}={p}" for v, p in sorted({**rest, version: 0}.items())]


def _remove_unrouted(platform: Platform, model: str) -> bool:
    """Delete what the platform has of a model no routing table names (a deploy that failed
    before it wrote one); False when it has nothing."""
    return platform.target().delete(model)


@click.command()
@click.argument("model")
@deployed_options
@click.option("--output", type=click.Choice(["table", "json"]), default="table",
              show_default=True, envvar="MODELFN_OUTPUT",
              help="json: the whole status as one JSON object on stdout.")
def status(model: str, where: Where, output: str) -> None:
    """Versions, URLs, split, Ready, instances and the last error of a deployed model.

    The traffic shown is what the platform serves; `split` in the JSON is the routing
    table's, `served_split` the platform's, and `split_in_sync` says whether they agree.
    URLs are shown as they take a path (`URL/v2/...`), without a trailing slash."""
    with exit_on_error():
        _, table = where.deployed(model)
        facts = _lambda_facts(where, table) if where.is_lambda else _knative_facts(where, table)
        served: ServedSplit | None = facts["served"]
        doc: dict[str, Any] = {
            "model": model, "target": table.target, "url": _url(table.url),
            "ready": facts["ready"], "reason": facts.get("reason"),
            "message": facts.get("message"),
            "split": {str(v): p for v, p in sorted(table.split.items())},
            "served_split": None if served is None else served.as_pairs(),
            "served_from": None if served is None else served.source,
            "split_in_sync": None if served is None else served.matches(table.split),
            "versions": {
                str(v): {"url": _url(r.url), "protocol": r.protocol,
                         "percent": table.split.get(v, 0),
                         "served_percent": None if served is None
                         else served.versions.get(v, 0),
                         "auth": r.auth,
                         "max_batch_size": r.max_batch_size, "concurrency": r.concurrency,
                         "instances": facts["instances"].get(v)}
                for v, r in sorted(table.versions.items())},
            "history": [{str(v): p for v, p in sorted(s.items())} for s in table.history],
            "updated": table.updated,
        }
        if output == "json":
            click.echo(json.dumps(doc, indent=2))
            return
        ready = {True: "Ready", False: "NOT READY", None: "Ready unknown"}[doc["ready"]]
        click.echo(f"{model} ({describe(table.target)}): "
                   f"{doc['url'] or '(the gateway splits)'}  {ready}")
        if doc["message"]:
            click.echo(f"  last error: {doc['reason'] or ''} {doc['message']}".rstrip())
        click.echo(f"  {'version':<8} {'traffic':>7} {'instances':>9}  url")
        for v, info in doc["versions"].items():
            instances = "-" if info["instances"] is None else info["instances"]
            percent = info["percent"] if served is None else info["served_percent"]
            click.echo(f"  v{v:<7} {percent:>6}% {instances:>9}  {info['url']}"
                       f"  ({info['protocol']}, auth {info['auth']}, "
                       f"max_batch_size {info['max_batch_size']})")
        if served is not None and not doc["split_in_sync"]:
            for line in _split_drift(where, table, served):
                click.echo(f"  {line}")
        restores = _restores(table)
        if restores is not None:
            click.echo(f"  rollback restores: {_show(restores)}")


def _restores(table: ModelRoutes) -> Mapping[int, int] | None:
    """The split ``modelfn rollback`` would restore; None when it has none to."""
    try:
        return table.rolled_back().split
    except InvalidInput:
        return None


def _url(url: str | None) -> str | None:
    """A function's URL as paths are joined onto it: Lambda's end in ``/``."""
    return None if url is None else url.rstrip("/")


def _split_drift(where: Where, table: ModelRoutes, served: ServedSplit) -> list[str]:
    """What to say when the platform serves another split than the routing table says."""
    served_split = {v: p for v, p in served.versions.items() if p}
    lines = [f"the platform serves {served.show()} ({served.source}), but modelfn's routing "
             f"table says {_show(table.split)}: it was changed outside modelfn",
             "to reconcile, restore the table's split: "
             + where.hint("traffic", table.model, *_show(table.split).split())]
    if not any(served.others.values()) and served_split and set(served_split) <= set(
            table.versions):
        lines.append("or keep the platform's and record it: "
                     + where.hint("traffic", table.model, *_show(served_split).split()))
    return lines


def _local_status(where: Where) -> dict[str, Any] | None:
    if where.status_url is None:
        return None
    with urllib.request.urlopen(where.status_url, timeout=10) as answer:
        doc: dict[str, Any] = json.loads(answer.read())
    return doc


def _knative_facts(where: Where, table: ModelRoutes) -> dict[str, Any]:
    from modelfn.deploy.knative import service_name
    from modelfn.deploy.knative_target import revisions, served_split

    service = where.knative().service_of(where.namespace, table.model)
    if service is None:
        return {"ready": False, "reason": "NotFound", "instances": {}, "served": None,
                "message": f"service {where.namespace}/{service_name(table.model)} does not "
                           "exist"}
    conditions = {c.get("type"): c for c in service.get("status", {}).get("conditions", [])}
    ready = conditions.get("Ready", {})
    instances: dict[int, int] = {}
    local = _local_status(where)
    if local is not None:
        by_name = {(r["namespace"], r["name"]): r for r in local["knative"].get("revisions", [])}
        current = revisions(service)
        for version in table.versions:
            found = by_name.get((where.namespace, current.get(version, "")))
            if found is not None:
                instances[version] = int(found["instances"])
    return {"ready": {"True": True, "False": False}.get(ready.get("status", "")),
            "reason": ready.get("reason"), "message": ready.get("message"),
            "instances": instances, "served": served_split(service)}


def _lambda_facts(where: Where, table: ModelRoutes) -> dict[str, Any]:
    target = where.aws_lambda()
    function = target.function_state(table.model)
    if function is None:
        return {"ready": False, "reason": "NotFound", "instances": {}, "served": None,
                "message": f"function {table.model} does not exist"}
    state = function.get("State")
    update = function.get("LastUpdateStatus")
    ready = state == "Active" and update in (None, "Successful")
    message = function.get("StateReason") or function.get("LastUpdateStatusReason")
    instances: dict[int, int] = {}
    local = _local_status(where) if table.target == LOCAL_LAMBDA else None
    if local is not None:
        counts = local["lambda"].get("functions", {}).get(table.model, {})
        for version, published in target.published(table.model, table.versions).items():
            if published in counts:
                instances[version] = int(counts[published]["environments"])
            else:
                instances[version] = 0
    return {"ready": ready, "reason": None if ready else f"{state}/{update}",
            "message": message, "instances": instances,
            "served": target.served_split(table.model)}
