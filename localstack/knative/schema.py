"""Admission of Services by the local Knative API: Knative's checks, the local platform's
limits, and the immutability of revisions.

The CRD's schema, pruning and Knative's webhook checks are the platform's
(``platforms.knative_schema``, which deploy validates with too); here a refusal becomes the
``Status`` an API server answers (``BadRequest``, ``Invalid``), a template is also checked
against what the local platform runs (``revisions.template_causes``), and on an update a
template which keeps its name must be the template that name was made from
(``revision_causes``: revisions are immutable).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from modelfn.localstack.knative.errors import Invalid, MalformedRequest
from modelfn.localstack.knative.template import template_causes
from modelfn.platforms import knative as kn
from modelfn.platforms import knative_schema as schema
from modelfn.platforms.knative_schema import Cause

if TYPE_CHECKING:
    from collections.abc import Mapping

#: a revision already made: the Service it belongs to and the template it was made from
Made = tuple[str, "Mapping[str, Any]"]
#: changes a refusal lists before it says how many more there are
SHOWN_CHANGES = 5


def admit(obj: dict[str, Any], *, strict: bool = False,
          defaults: kn.Defaults = kn.DEFAULTS) -> dict[str, Any]:
    """``obj`` pruned to the schema, checked as Knative checks it (and as the local platform
    can run it) and defaulted, or ``Invalid`` (422); with ``strict``, an undeclared field
    is ``BadRequest`` (400) as the API server says. ``defaults``: the cluster's limits
    (timeouts, concurrency), a fresh install's unless given."""
    try:
        return schema.admit(obj, strict=strict, defaults=defaults,
                            template_check=template_causes)
    except schema.Inadmissible as exc:
        raise Invalid(exc.name, exc.causes) from exc
    except schema.Refused as exc:
        raise MalformedRequest(exc.message, name=exc.name, causes=exc.causes) from exc


def _changes(old: Any, new: Any, at: str = "") -> list[str]:
    """Where ``new`` differs from ``old``: ``path: -old +new`` per changed leaf."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for key in [*old, *(k for k in new if k not in old)]:
            where = f"{at}.{key}" if at else str(key)
            if key not in new:
                out.append(f"{where}: -{json.dumps(old[key])}")
            elif key not in old:
                out.append(f"{where}: +{json.dumps(new[key])}")
            else:
                out += _changes(old[key], new[key], where)
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [c for i, (o, n) in enumerate(zip(old, new, strict=True))
                for c in _changes(o, n, f"{at}[{i}]")]
    return [] if old == new else [f"{at or '<template>'}: -{json.dumps(old)} +{json.dumps(new)}"]


def revision_causes(obj: Mapping[str, Any], old: Mapping[str, Any] | None,
                    made: Made | None) -> list[Cause]:
    """Revisions are immutable: a template that keeps its name must be the template the
    name was given before, in the Service's previous object ``old`` (what Knative's webhook
    checks) and in the revision already ``made`` under that name (which must be this
    Service's). ``obj`` and ``old`` are admitted (defaulted) objects."""
    template = obj["spec"].get("template") or {}
    revision = (template.get("metadata") or {}).get("name")
    if not revision:
        return []
    field = "spec.template.metadata.name"
    service = obj["metadata"]["name"]
    if made is not None and made[0] != service:
        return [Cause(field, f'Invalid value: "{revision}": a revision of that name already '
                      f'exists, made for Service "{made[0]}"')]
    before = [made[1]] if made is not None else []
    old_template = (old or {}).get("spec", {}).get("template") or {}
    if (old_template.get("metadata") or {}).get("name") == revision:
        before.insert(0, old_template)
    for earlier in before:
        changes = _changes(earlier, template)
        if changes:
            shown = "; ".join(changes[:SHOWN_CHANGES])
            if len(changes) > SHOWN_CHANGES:
                shown += f"; and {len(changes) - SHOWN_CHANGES} more"
            return [Cause(field, "Saw the following changes without a name change (-old "
                          f"+new): {shown} (revisions are immutable: give the template a new "
                          f'name, not "{revision}", to make a new revision)')]
    return []
