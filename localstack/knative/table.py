"""``kubectl get``'s server-side printing: Services as a ``meta.k8s.io/v1`` ``Table``.

The columns are the CRD's ``additionalPrinterColumns`` (URL, LatestCreated, LatestReady,
Ready, Reason) between Name and Age, as an API server renders a custom resource.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from modelfn.platforms.knative_schema import version

#: the JSONPath forms printer columns use: ``.a.b`` and ``.a[?(@.k=='v')].f``
_STEP = re.compile(r"\.(\w+)(?:\[\?\(@\.(\w+)=='([^']*)'\)\])?")


def jsonpath(obj: Any, path: str) -> Any:
    """The value at a printer column's ``jsonPath``, or None."""
    node = obj
    for name, key, value in _STEP.findall(path):
        node = node.get(name) if isinstance(node, dict) else None
        if key:
            node = next((item for item in node or [] if isinstance(item, dict)
                         and item.get(key) == value), None)
    return node


def age(timestamp: str | None, at: datetime | None = None) -> str:
    """How long ago ``timestamp`` was, as ``kubectl`` prints an Age (``42s``, ``5m``)."""
    if not timestamp:
        return "<unknown>"
    then = datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    seconds = max(0, int(((at or datetime.now(UTC)) - then).total_seconds()))
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if seconds < 120:
        return f"{seconds}s"
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if hours < 3:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    return f"{hours}h" if hours < 48 else f"{days}d"


def table(objects: list[dict[str, Any]], resource_version: str, *,
          include_object: bool = False) -> dict[str, Any]:
    columns = version().get("additionalPrinterColumns", [])
    definitions = [{"name": "Name", "type": "string", "format": "name", "priority": 0,
                    "description": "Name must be unique within a namespace."}]
    definitions += [{"name": c["name"], "type": c["type"], "format": "",
                     "priority": c.get("priority", 0), "description": c.get("description", "")}
                    for c in columns]
    definitions.append({"name": "Age", "type": "date", "format": "", "priority": 0,
                        "description": "CreationTimestamp"})
    rows = []
    for obj in objects:
        cells: list[Any] = [obj["metadata"]["name"]]
        cells += [jsonpath(obj, c["jsonPath"]) for c in columns]
        cells.append(age(obj["metadata"].get("creationTimestamp")))
        embedded = obj if include_object else {
            "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
            "metadata": obj["metadata"]}
        rows.append({"cells": cells, "object": embedded})
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1",
            "metadata": {"resourceVersion": resource_version},
            "columnDefinitions": definitions, "rows": rows}
