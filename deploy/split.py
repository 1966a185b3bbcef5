"""The traffic split a platform serves now, in the routing table's terms (model versions).

Each target reads its own (``KnativeTarget.served_split``: the Service's traffic;
``LambdaTarget.served_split``: the ``live`` alias); ``modelfn status`` compares it with
the routing table, which a ``kubectl patch`` or a boto3 ``update_alias`` leaves behind.
A share that goes to no model version (a revision or Lambda version modelfn did not
name) is kept apart, under the platform's own name for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping


@dataclass(frozen=True)
class ServedSplit:
    versions: dict[int, int]  # model version -> percent
    source: str  # where it was read, e.g. "status.traffic of service default/digits"
    others: dict[str, int] = field(default_factory=dict)  # platform name -> percent

    def matches(self, split: Mapping[int, int]) -> bool:
        """Whether ``split`` (a routing table's) is what is served; 0% shares aside."""
        return not any(self.others.values()) and (
            {v: p for v, p in self.versions.items() if p}
            == {v: p for v, p in split.items() if p})

    def as_pairs(self) -> dict[str, int]:
        """Every share, versions first: ``{"1": 90, "2": 10, "digits-00003": 0}``."""
        pairs = {str(v): p for v, p in sorted(self.versions.items())}
        pairs.update(sorted(self.others.items()))
        return pairs

    def show(self) -> str:
        return " ".join(f"{k}={p}" for k, p in self.as_pairs().items())
