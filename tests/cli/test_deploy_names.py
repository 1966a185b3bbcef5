"""A model whose name is no Knative Service name (Triton's `simple_string` has a `_`)
deployed to the local platform, as a user types it: its Service is `simple-digits`, the
function and the gateway still serve it as `simple_digits`, status and undeploy find it,
and a second model whose name maps to the same Service (`simple-digits`) is refused
without touching the first. Every command is a `modelfn` process against `modelfn dev`;
requests are real HTTP."""

from __future__ import annotations

import json
import shutil
from typing import TYPE_CHECKING

import httpx
import pytest
from dev_support import EXAMPLES, EXPECTED, REQUEST, modelfn, start_dev

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path
    from typing import Any


def renamed(where: Path, name: str) -> Path:
    """digits as a model called ``name`` (its directory and its config's name)."""
    model = where / name
    shutil.copytree(EXAMPLES / "models" / "digits", model)
    config = model / "config.pbtxt"
    config.write_text(config.read_text().replace('name: "digits"', f'name: "{name}"', 1))
    return model


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """`modelfn dev` with its gateway, simple_digits and simple-digits pushed."""
    path = tmp_path_factory.mktemp("dev")
    process, env = start_dev(path, "--idle", "30s")
    try:
        repo = path / "repo"
        for name in ("simple_digits", "simple-digits"):
            modelfn(env, "push", str(renamed(repo, name)))
        yield env
    finally:
        assert process.stop(60) == 0, process.tail()


def infer(url: str, model: str) -> dict[str, Any]:
    answer = httpx.post(f"{url}/v2/models/{model}/infer", json=REQUEST, timeout=120)
    assert answer.status_code == 200, answer.text
    doc: dict[str, Any] = answer.json()
    assert doc["model_name"] == model and doc["outputs"][0]["data"] == EXPECTED
    return doc


def services(env: dict[str, str]) -> dict[str, dict[str, Any]]:
    """The local platform's Knative Services by name, read with the kubernetes client."""
    from kubernetes import client, config

    api = client.CustomObjectsApi(config.new_client_from_config(config_file=env["KUBECONFIG"]))
    found = api.list_namespaced_custom_object("serving.knative.dev", "v1", "default",
                                              "services")
    return {s["metadata"]["name"]: s for s in found["items"]}


def test_a_model_with_an_underscore_is_served_under_its_name_by_a_valid_service(
        dev: dict[str, str]) -> None:
    target = ("--target", "local")
    done = modelfn(dev, "deploy", "simple_digits:1", *target)
    url = done.stdout.strip().splitlines()[-1]
    assert "(service default/simple-digits)" in done.stderr
    (service,) = services(dev).values()
    assert service["metadata"]["name"] == "simple-digits"
    assert service["metadata"]["annotations"]["modelfn.dev/model"] == "simple_digits"
    assert service["spec"]["template"]["metadata"]["name"].startswith("simple-digits-v1-")
    assert infer(url, "simple_digits")["model_version"] == "1"
    infer(dev["MODELFN_GATEWAY"], "simple_digits")

    facts = json.loads(modelfn(dev, "status", "simple_digits", *target, "--output",
                               "json").stdout)
    assert facts["ready"] is True and facts["split_in_sync"] is True
    assert facts["served_split"] == {"1": 100}
    infer(facts["versions"]["1"]["url"], "simple_digits")

    # simple-digits maps to the same Service: refused, in one line, and nothing changes
    for command in (("deploy", "simple-digits:1"), ("undeploy", "simple-digits")):
        refused = modelfn(dev, *command, *target, code=4)
        (line,) = [t for t in refused.stderr.splitlines() if t.startswith("Error")]
        assert ("Knative service default/simple-digits serves model 'simple_digits', not "
                "'simple-digits'") in line
    assert services(dev)["simple-digits"]["metadata"]["generation"] == service["metadata"][
        "generation"]
    infer(url, "simple_digits")

    modelfn(dev, "undeploy", "simple_digits", *target)
    assert services(dev) == {}
    modelfn(dev, "status", "simple_digits", *target, code=3)

    # with the name free again, simple-digits deploys as a Service of the same name
    url = modelfn(dev, "deploy", "simple-digits:1", *target).stdout.strip().splitlines()[-1]
    assert services(dev)["simple-digits"]["metadata"]["annotations"][
        "modelfn.dev/model"] == "simple-digits"
    infer(url, "simple-digits")
    modelfn(dev, "undeploy", "simple-digits", *target)
