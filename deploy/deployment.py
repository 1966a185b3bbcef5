"""A target-neutral deployment: what runs, with what resources, scaled how, split how.

``deploy`` builds one ``Deployment`` from the model's completed config and the user's
options; each target (Knative, Cloud Run, Lambda, the local platform) renders it into
its own objects. Nothing here knows a platform's API.

How batching decides concurrency. One function instance batches whatever is in flight,
so it wants requests in flight, not one at a time (Knative's default target is 100 and
Lambda runs one per environment). An instance with ``instances`` model instances of
``max_batch_size`` rows serves ``capacity = instances × max(1, max_batch_size)`` requests
at once; the hard per-instance limit (``containerConcurrency``) is twice that — one batch
running on each instance and the next one forming — and the autoscaler's soft target is
the capacity itself, so a new instance starts when a full batch is waiting on every one.
Both stop at ``MAX_CONCURRENCY``: Knative refuses a ``containerConcurrency`` above its
``container-concurrency-max-limit`` (1000 by default) and Cloud Run allows 1000 at most.
Knative's 0 ("unlimited") is not offered: the gateway and the autoscaler's target need a
finite number of requests per instance.

Revisions are named ``<model>-v<version>-<hash>``, the hash of the rendered template
(``deploy/knative.py``), because Knative revisions are immutable: the same options give
the same name (an identical redeploy changes nothing), other options a new revision. They
are tagged ``v<version>``, so a version's pinned URL stays the same across redeploys.
Deployments made before that named them ``<model>-v<version>``; ``version_of`` reads both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from modelfn.platforms import knative as kn
from modelfn.platforms.kubernetes import cpu_cores, memory_bytes
from modelfn.runtime.errors import InvalidInput

if TYPE_CHECKING:
    from collections.abc import Mapping

    from modelfn.handlers.environment import FunctionEnvironment
    from modelfn.runtime.config import ModelConfig

#: the most requests one instance may take at once (Knative's default limit; Cloud Run's)
MAX_CONCURRENCY = kn.DEFAULTS.container_concurrency_max_limit
#: hex digits of the template hash in a revision name: ``digits-v2-1a2b3c4``
REVISION_HASH_LEN = 7
_REVISION = re.compile(rf"^([1-9][0-9]*)(?:-[0-9a-f]{{{REVISION_HASH_LEN}}})?$")
#: an OCI image reference, as the distribution grammar has it (what Knative, Cloud Run
#: and Lambda parse): [host[:port]/]path[:tag][@digest], the path in lower case
_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
#: a first path component is a registry host when it has a dot or a port, or is localhost
_HOST = (rf"(?:(?:{_LABEL}(?:\.{_LABEL})+|localhost|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
         rf"|{_LABEL}:[0-9]+)")
_PATH = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE = re.compile(
    rf"^(?:{_HOST}/)?{_PATH}(?:/{_PATH})*"
    r"(?::[\w][\w.-]{0,127})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$")
IMAGE_NAME_MAX = 255


def without_tag(image: str) -> str:
    """An image reference without its ``:tag`` (a registry's ``:port`` stays)."""
    slash = image.rfind("/")
    colon = image.rfind(":")
    return image[:colon] if colon > slash else image


def check_image(reference: str) -> str:
    """``reference`` if it is an OCI image reference (``registry/repo@sha256:...``), else
    ``InvalidInput`` saying what is wrong, before anything is rendered or sent."""
    if not reference.strip():
        raise InvalidInput("--image is empty: give the function image, e.g. "
                           "registry.example.com/modelfn/digits@sha256:... (modelfn build "
                           "prints it)")
    name = without_tag(reference.split("@", 1)[0])
    if _IMAGE.match(reference) is None or len(name) > IMAGE_NAME_MAX:
        hint = (" (the repository path must be lower case)"
                if _IMAGE.match(reference.lower()) is not None and reference != reference.lower()
                else "")
        raise InvalidInput(f"--image '{reference}' is not an OCI image reference like "
                           f"registry.example.com/modelfn/digits@sha256:...{hint}")
    return reference


@dataclass(frozen=True)
class Batching:
    """The model's batching facts, from its completed config."""

    max_batch_size: int = 0  # 0: the model does not batch
    instances: int = 1
    #: the config in Triton's JSON form, which a gateway batching for the function decodes
    #: and batches by; None when the config lists no inputs or outputs (``plan`` completes
    #: such a config from the model first)
    policy: Mapping[str, Any] | None = None

    @classmethod
    def of(cls, config: ModelConfig) -> Batching:
        complete = bool(config.inputs and config.outputs)
        return cls(max_batch_size=config.max_batch_size, instances=config.instance_count,
                   policy=config.to_json() if complete else None)

    @property
    def capacity(self) -> int:
        """Requests one function instance serves at once."""
        return self.instances * max(1, self.max_batch_size)

    @property
    def container_concurrency(self) -> int:
        """The hard per-instance limit: a batch running on each model instance, one forming
        (at most ``MAX_CONCURRENCY``)."""
        return min(2 * self.capacity, MAX_CONCURRENCY)


@dataclass(frozen=True)
class Resources:
    cpu: str | None = None  # a Kubernetes quantity: "2", "500m"
    memory: str | None = None  # "2Gi", "512Mi"
    gpu: int = 0

    def __post_init__(self) -> None:
        if self.cpu is not None:
            cpu_cores(self.cpu)
        if self.memory is not None:
            memory_bytes(self.memory)
        if self.gpu < 0:
            raise InvalidInput(f"--gpu must be 0 or more, not {self.gpu}")


@dataclass(frozen=True)
class Scaling:
    min_scale: int = 0
    max_scale: int = 0  # 0: no limit
    concurrency: int | None = None  # overrides the batching-derived hard limit
    timeout_s: int = 300

    def __post_init__(self) -> None:
        if self.min_scale < 0 or self.max_scale < 0:
            raise InvalidInput("--min-scale and --max-scale must be 0 or more")
        if self.max_scale and self.min_scale > self.max_scale:
            raise InvalidInput(f"--min-scale {self.min_scale} is above --max-scale "
                               f"{self.max_scale}")
        if self.concurrency is not None and not 1 <= self.concurrency <= MAX_CONCURRENCY:
            raise InvalidInput(f"--concurrency must be between 1 and {MAX_CONCURRENCY}, not "
                               f"{self.concurrency}")
        if not 1 <= self.timeout_s <= 3600:
            raise InvalidInput(f"--timeout must be between 1 and 3600 s, not {self.timeout_s}")


def split_traffic(current: Mapping[int, int], version: int, percent: int) -> dict[int, int]:
    """The split after deploying ``version`` with ``percent`` of the traffic.

    The versions serving now keep the rest in their current proportions (largest
    remainders get the rounding), so ``{1: 100}`` with version 2 at 10 gives
    ``{1: 90, 2: 10}``; 100 (the default) moves everything to the new version. Versions
    left at 0 stay in the split: they keep their tags (pinned URLs) and can be promoted back.
    """
    if not 0 <= percent <= 100:
        raise InvalidInput(f"--traffic must be between 0 and 100, not {percent}")
    others = {v: p for v, p in current.items() if v != version and p > 0}
    rest = 100 - percent
    if not others:
        if rest:
            raise InvalidInput(f"version {version} cannot take {percent}%: no other version "
                               "is serving the rest (deploy it at 100 first)")
        return {**{v: 0 for v in current if v != version}, version: 100}
    total = sum(others.values())
    shares = {v: rest * p / total for v, p in others.items()}
    split = {v: int(share) for v, share in shares.items()}
    leftover = rest - sum(split.values())
    for v in sorted(shares, key=lambda v: (shares[v] - split[v], v), reverse=True)[:leftover]:
        split[v] += 1
    split.update({v: 0 for v in current if v not in others and v != version})
    split[version] = percent
    return dict(sorted(split.items()))


@dataclass(frozen=True)
class Deployment:
    """One model version deployed as a function, and the traffic split it joins."""

    model: str
    version: int
    image: str
    function: FunctionEnvironment  # what the function serves (a store ref or a baked repository)
    batching: Batching = field(default_factory=Batching)
    resources: Resources = field(default_factory=Resources)
    scaling: Scaling = field(default_factory=Scaling)
    traffic: Mapping[int, int] = field(default_factory=dict)  # version -> percent, sums to 100
    namespace: str = "default"

    def __post_init__(self) -> None:
        check_image(self.image)
        if not self.traffic:
            object.__setattr__(self, "traffic", {self.version: 100})
        if sum(self.traffic.values()) != 100:
            raise InvalidInput(f"traffic percents must add up to 100, not {dict(self.traffic)}")
        if self.version not in self.traffic:
            raise InvalidInput(f"the split {dict(self.traffic)} leaves out version "
                               f"{self.version}")

    @property
    def container_concurrency(self) -> int:
        return self.scaling.concurrency or self.batching.container_concurrency

    @property
    def target(self) -> int:
        """The autoscaler's soft in-flight target per instance (never above the hard limit)."""
        return min(self.batching.capacity, self.container_concurrency)


def revision(model: str, version: int, template_hash: str | None = None) -> str:
    """The name of a model version's revision: ``digits-v2-1a2b3c4`` (``digits-v2``, as
    deployments before template hashes named it, without ``template_hash``)."""
    base = f"{model}-v{version}"
    return base if template_hash is None else f"{base}-{template_hash[:REVISION_HASH_LEN]}"


def version_of(model: str, revision_name: str) -> int | None:
    """The model version whose revision ``revision_name`` is (``digits-v2-1a2b3c4`` or
    ``digits-v2``: 2), or None."""
    prefix = f"{model}-v"
    if not revision_name.startswith(prefix):
        return None
    match = _REVISION.match(revision_name.removeprefix(prefix))
    return int(match.group(1)) if match else None
