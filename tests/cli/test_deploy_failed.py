"""A deploy that fails leaves nothing the other commands cannot see. Against `modelfn dev`
as a process: a model version whose function cannot start (its file in the store damaged
after the push) is deployed with `modelfn deploy --target local`; the Knative Service is
read with the official `kubernetes` client; every command is a `modelfn` process."""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import boto3
import pytest
from dev_support import EXAMPLES, modelfn, start_dev

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

LOCAL = ("--target", "local", "--wait", "120")


def s3_client(env: dict[str, str]) -> Any:
    """The local platform's S3, with the credentials `modelfn dev` gives."""
    return boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"],
                        aws_access_key_id=env.get("AWS_ACCESS_KEY_ID"),
                        aws_secret_access_key=env.get("AWS_SECRET_ACCESS_KEY"),
                        region_name=env.get("AWS_DEFAULT_REGION"))


def copy_of_digits(where: Path, name: str, version: int) -> Path:
    model = where / name
    shutil.copytree(EXAMPLES / "models" / "digits", model)
    (model / "1").rename(model / str(version))
    config = model / "config.pbtxt"
    config.write_text(config.read_text().replace('name: "digits"', f'name: "{name}"'))
    return model


def push(env: dict[str, str], where: Path, name: str, version: int = 1, *,
         damaged: bool = False) -> None:
    """Push a copy of digits as ``name`` ``version``; ``damaged``: then overwrite its
    model file in the store, so the function that fetches it cannot start."""
    modelfn(env, "push", str(copy_of_digits(where, name, version)), "--version", str(version))
    if not damaged:
        return
    store = urlparse(env["MODELFN_STORE"])
    s3 = s3_client(env)
    keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(
        Bucket=store.netloc, Prefix=store.path.strip("/")) for o in page.get("Contents", ())
        if f"/{name}/" in o["Key"] and o["Key"].endswith("model.onnx")]
    key = next(k for k in keys if f"/{name}/{version}/" in k)
    s3.put_object(Bucket=store.netloc, Key=key, Body=b"not an onnx model")


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    process, env = start_dev(tmp_path_factory.mktemp("dev"), "--idle", "30s", "--no-gateway")
    try:
        yield env
    finally:
        assert process.stop(60) == 0, process.tail()


def service(env: dict[str, str], name: str) -> dict[str, object] | None:
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    api = client.CustomObjectsApi(config.new_client_from_config(env["KUBECONFIG"]))
    try:
        found: dict[str, object] = api.get_namespaced_custom_object(
            "serving.knative.dev", "v1", "default", "services", name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return found


def test_a_failed_first_deploy_leaves_no_service_behind(dev: dict[str, str],
                                                         tmp_path: Path) -> None:
    push(dev, tmp_path, "broken", damaged=True)
    failed = modelfn(dev, "deploy", "broken:1", *LOCAL, code=5)
    assert "not ready" in failed.stderr, failed.stderr
    assert "removed" in failed.stderr  # it says what it undid
    assert service(dev, "broken") is None
    status = modelfn(dev, "status", "broken", "--target", "local", code=3)
    assert "not deployed" in status.stderr
    assert "not deployed" in modelfn(dev, "undeploy", "broken", "--target", "local",
                                     code=3).stderr


def test_undeploy_removes_a_service_no_routing_table_names(dev: dict[str, str],
                                                           tmp_path: Path) -> None:
    """A Service left by an older modelfn (or a deploy killed before it wrote the table)."""
    push(dev, tmp_path, "orphan")
    modelfn(dev, "deploy", "orphan:1", *LOCAL)
    store = urlparse(dev["MODELFN_STORE"])
    s3 = s3_client(dev)
    s3.delete_object(Bucket=store.netloc,
                     Key=f"{store.path.strip('/')}/_routes/orphan.json".lstrip("/"))
    assert service(dev, "orphan") is not None
    done = modelfn(dev, "undeploy", "orphan", "--target", "local")
    assert "undeployed orphan" in done.stderr + done.stdout
    assert service(dev, "orphan") is None


def test_a_deploy_after_a_failed_one_does_not_print_the_old_failure(
        dev: dict[str, str], tmp_path: Path) -> None:
    push(dev, tmp_path, "flaky")
    modelfn(dev, "deploy", "flaky:1", *LOCAL)
    push(dev, tmp_path / "v2", "flaky", 2, damaged=True)
    failed = modelfn(dev, "deploy", "flaky:2", *LOCAL, code=5)
    assert "not ready" in failed.stderr and "corrupt object" in failed.stderr
    assert service(dev, "flaky") is not None  # an update is not rolled back: v1 still serves
    push(dev, tmp_path / "v3", "flaky", 3)
    fixed = modelfn(dev, "deploy", "flaky:3", *LOCAL)
    # version 2's failure is the Service's state until the platform sees the new generation
    assert "flaky-v2" not in fixed.stderr and "corrupt" not in fixed.stderr, fixed.stderr
    assert "v3:" in fixed.stderr
    modelfn(dev, "undeploy", "flaky", "--target", "local")
    assert service(dev, "flaky") is None
