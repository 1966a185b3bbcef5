"""The deploy workflow through the ``Target`` interface: a store on the filesystem, the
example digits model, and a target that applies to memory; Cloud Run, which only renders."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from modelfn.deploy import workflow
from modelfn.deploy.plan import Options
from modelfn.deploy.recorder import CallRecorder
from modelfn.deploy.targets import Applied, CannotApply, CloudRun, Routing, Target
from modelfn.model_store import open_store
from modelfn.model_store.errors import CorruptObject
from modelfn.model_store.routes import RouteSource
from modelfn.platforms import aws_lambda
from modelfn.runtime.config import config_from_json
from modelfn.runtime.errors import ConfigError, InvalidInput

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from modelfn.deploy.deployment import Deployment
    from modelfn.deploy.split import ServedSplit
    from modelfn.model_store.base import ModelStore

DIGITS = Path(__file__).resolve().parents[2] / "examples" / "models" / "digits"
IMAGE = "registry.example.com/modelfn/digits@sha256:" + "ab" * 32


class InMemory(Target):
    """Applies to a dict: what the workflow asks of a platform, nothing else."""

    def __init__(self, routing: Routing) -> None:
        super().__init__(routing)
        self.applied: list[Deployment] = []

    def render(self, deployment: Deployment, *, dry_run: bool = False,
               progress: Callable[[str], None] = print) -> Any:
        return {"model": deployment.model, "version": deployment.version}

    def validate(self, rendered: Any) -> None:
        assert rendered["model"] == "digits"

    def show(self, rendered: Any, deployment: Deployment) -> str:
        return f"{rendered}\n"

    def apply(self, deployment: Deployment, rendered: Any, *, timeout_s: float,
              progress: Callable[[str], None] = print) -> Applied:
        self.applied.append(deployment)
        return Applied("http://live", {deployment.version: f"http://v{deployment.version}"},
                       changed=len(self.applied) == 1)

    def served_split(self, model: str) -> ServedSplit | None:
        return None

    def set_split(self, model: str, split: Mapping[int, int], *, timeout_s: float,
                  progress: Callable[[str], None] = print) -> bool:
        return True

    def remove_version(self, model: str, version: int, split: Mapping[int, int], *,
                       timeout_s: float, progress: Callable[[str], None] = print) -> None:
        pass

    def delete(self, model: str) -> bool:
        return True

    def recording(self) -> tuple[Target, CallRecorder]:
        return self, CallRecorder(object())


@pytest.fixture
def store(tmp_path: Path) -> ModelStore:
    shutil.copytree(DIGITS, tmp_path / "models" / "digits")
    found = open_store(str(tmp_path / "store"))
    found.push(tmp_path / "models" / "digits")
    return found


def run(store: ModelStore, target: Target, *, dry_run: bool = False
        ) -> tuple[str, list[str], list[str]]:
    said: list[str] = []
    printed: list[str] = []
    source = RouteSource(store=store)
    url = workflow.deploy(store, "digits", Options(image=IMAGE), target, source,
                          source.read("digits"), label="--target test", dry_run=dry_run,
                          progress=said.append, output=printed.append)
    return url, said, printed


def test_a_deploy_writes_routes_with_the_targets_facts_and_the_config(store: ModelStore
                                                                      ) -> None:
    target = InMemory(Routing("lambda", "iam", "eu-west-1", aws_lambda.CONCURRENCY))
    url, said, printed = run(store, target)
    assert (url, printed) == ("http://live", [])
    assert said[0].startswith("deploying digits:1 with --target test, split {1: 100}")
    table = RouteSource(store=store).read("digits")
    assert table is not None
    assert (table.target, table.url, table.auth, table.region) == (
        "lambda", "http://live", "iam", "eu-west-1")
    route = table.versions[1]
    assert (route.url, route.concurrency) == ("http://v1", 1)
    assert route.config is not None
    config = config_from_json(dict(route.config))
    assert config.max_batch_size == route.max_batch_size > 0
    assert [t.name for t in config.inputs] and [t.name for t in config.outputs]
    _, said, _ = run(store, target)  # the same again: nothing changed, and it says so
    assert any(line.startswith("unchanged:") for line in said)


#: a config as Triton's example repositories write them: the tensors left to auto-complete
PARTIAL = """name: "digits"
platform: "onnxruntime_onnx"
max_batch_size: 8
dynamic_batching { max_queue_delay_microseconds: 500 }
"""


@pytest.fixture
def partial(tmp_path: Path) -> ModelStore:
    """The digits model pushed with ``PARTIAL``; the store's cache in ``tmp_path``."""
    shutil.copytree(DIGITS, tmp_path / "models" / "digits")
    (tmp_path / "models" / "digits" / "config.pbtxt").write_text(PARTIAL)
    found = open_store(str(tmp_path / "store"), cache_dir=tmp_path / "cache")
    found.push(tmp_path / "models" / "digits")
    return found


def test_a_partial_config_is_completed_from_the_model_for_the_routing_table(
        partial: ModelStore) -> None:
    url, _, _ = run(partial, InMemory(Routing("lambda", "iam", "eu-west-1",
                                              aws_lambda.CONCURRENCY)))
    table = RouteSource(store=partial).read("digits")
    assert table is not None and url == "http://live"
    route = table.versions[1]
    assert route.config is not None and route.max_batch_size == 8
    config = config_from_json(dict(route.config))
    assert [(t.name, t.dims) for t in config.inputs] == [("input", (64,))]
    assert [t.name for t in config.outputs] == ["label", "probabilities"]
    assert config.max_batch_size == 8  # the user's, kept, as their batching is
    assert config.dynamic_batching is not None
    assert config.dynamic_batching.max_queue_delay_microseconds == 500


def test_a_partial_config_whose_model_is_gone_from_the_store_fails_the_deploy(
        partial: ModelStore, tmp_path: Path) -> None:
    (tmp_path / "store" / "digits" / "1" / "model.onnx").unlink()
    target = InMemory(Routing("lambda", "iam", "eu-west-1", aws_lambda.CONCURRENCY))
    with pytest.raises(CorruptObject, match="model.onnx: listed in the manifest but missing"):
        run(partial, target)
    assert target.applied == [] and RouteSource(store=partial).read("digits") is None


def test_a_partial_config_whose_model_cannot_be_read_fails_the_deploy(tmp_path: Path) -> None:
    model = tmp_path / "models" / "digits"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(PARTIAL)
    (model / "1" / "model.onnx").write_bytes(b"not a model")
    store = open_store(str(tmp_path / "store"), cache_dir=tmp_path / "cache")
    store.push(model)  # the library's push, which does not load the model as the CLI's does
    with pytest.raises(ConfigError, match=r"digits:1 was pushed with a config that leaves its "
                       r"inputs and outputs to auto-complete, and its model does not complete "
                       r"it: .*model.onnx: cannot read ONNX model"):
        run(store, InMemory(Routing("lambda", "iam", "eu-west-1", aws_lambda.CONCURRENCY)))
    assert RouteSource(store=store).read("digits") is None


def test_a_knative_like_target_records_the_deployments_concurrency(store: ModelStore
                                                                   ) -> None:
    url, _, _ = run(store, InMemory(Routing("knative")))
    table = RouteSource(store=store).read("digits")
    assert table is not None and url == "http://live"
    assert table.versions[1].concurrency > 1 and table.auth == "none"


def test_a_dry_run_prints_what_it_would_apply_and_changes_nothing(store: ModelStore) -> None:
    target = InMemory(Routing("knative"))
    url, said, printed = run(store, target, dry_run=True)
    assert (url, said, target.applied) == ("", [], [])
    assert printed == ["{'model': 'digits', 'version': 1}\n"]
    assert RouteSource(store=store).read("digits") is None


def test_cloud_run_renders_says_how_to_apply_and_refuses_the_rest(store: ModelStore) -> None:
    target = CloudRun("europe-west1")
    url, said, printed = run(store, target)
    assert url == "" and "kind: Service" in printed[0]
    assert said == ["apply it with: gcloud run services replace FILE.yaml --region "
                    "europe-west1"]
    assert RouteSource(store=store).read("digits") is None
    for call in (lambda: target.set_split("digits", {1: 100}, timeout_s=1),
                 lambda: target.delete("digits"), lambda: target.served_split("digits")):
        with pytest.raises(CannotApply, match="modelfn does not call Google Cloud"):
            call()


def test_cloud_run_needs_a_region(store: ModelStore) -> None:
    with pytest.raises(InvalidInput, match="needs --region"):
        run(store, CloudRun(None))
