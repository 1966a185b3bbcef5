"""`modelfn deploy` to a platform that fetches the model store itself (Cloud Run, a real
Knative cluster) refuses a store behind a loopback endpoint: the local platform's emulated
S3 (its env sourced) is one they cannot reach, and there the same s3:// URI names someone's
real bucket. The store is a real S3 emulator on loopback; nothing is mocked."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import pytest
import yaml
from dev_support import EXAMPLES, modelfn

from modelfn.localstack.s3 import S3Emulator

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/digits@sha256:" + "ab" * 32
CLOUDRUN = ("--target", "cloudrun", "--region", "europe-west4", "--image", IMAGE)


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Emulator]:
    with S3Emulator() as emulator:
        emulator.create_bucket("modelfn-dev")
        yield emulator


@pytest.fixture
def sourced(s3: S3Emulator, tmp_path: Path) -> dict[str, str]:
    """What `set -a; . DIR/env` of the local platform gives a shell: the store and the
    endpoint, with digits version 1 pushed there."""
    import os

    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MODELFN_", "AWS_", "KUBECONFIG"))}
    env |= {"AWS_ENDPOINT_URL": s3.endpoint_url, "MODELFN_S3_ENDPOINT": s3.endpoint_url,
            "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "MODELFN_STORE": f"s3://modelfn-dev/{uuid.uuid4().hex[:8]}",
            "MODELFN_CACHE": str(tmp_path / "cache")}
    modelfn(env, "push", str(EXAMPLES / "models" / "digits"))
    return env


def refused(done_stderr: str, store: str, endpoint: str, platform: str) -> None:
    assert done_stderr.count("\n") == 1, done_stderr
    assert done_stderr.startswith(f"Error: the model store {store}/ is at {endpoint}, on this "
                                  "machine (the local platform's emulated endpoint): "
                                  f"{platform} cannot reach it; give --store of a real bucket")


def test_cloudrun_refuses_the_local_platforms_store(sourced: dict[str, str]) -> None:
    done = modelfn(sourced, "deploy", "digits:1", *CLOUDRUN, code=2)
    assert done.stdout == ""
    refused(done.stderr, sourced["MODELFN_STORE"], sourced["AWS_ENDPOINT_URL"],
            "a Cloud Run service")


def test_cloudrun_refuses_a_loopback_endpoint_url_given_on_the_command_line(
        sourced: dict[str, str]) -> None:
    env = {k: v for k, v in sourced.items() if k not in ("AWS_ENDPOINT_URL",
                                                          "MODELFN_S3_ENDPOINT")}
    endpoint = sourced["AWS_ENDPOINT_URL"].replace("127.0.0.1", "localhost")
    done = modelfn(env, "deploy", "digits:1", *CLOUDRUN, "--endpoint-url", endpoint, code=2)
    refused(done.stderr, sourced["MODELFN_STORE"], endpoint, "a Cloud Run service")


def test_cloudrun_renders_a_baked_model_whatever_the_store(sourced: dict[str, str]) -> None:
    """The model is in the image: Cloud Run never reads the store."""
    done = modelfn(sourced, "deploy", "digits:1", *CLOUDRUN, "--bake")
    container = yaml.safe_load(done.stdout)["spec"]["template"]["spec"]["containers"][0]
    assert "MODELFN_STORE" not in {e["name"] for e in container["env"]}


def test_a_real_knative_cluster_refuses_the_local_platforms_store(
        sourced: dict[str, str], tmp_path: Path) -> None:
    """A kubeconfig naming a cluster elsewhere: refused before any call to it."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "remote",
        "clusters": [{"name": "remote",
                      "cluster": {"server": "https://cluster.invalid:6443"}}],
        "users": [{"name": "me", "user": {"token": "t"}}],
        "contexts": [{"name": "remote", "context": {"cluster": "remote", "user": "me"}}]}))
    done = modelfn({**sourced, "KUBECONFIG": str(kubeconfig)}, "deploy", "digits:1",
                   "--target", "knative", "--image", IMAGE, "--wait", "0", code=2)
    refused(done.stderr.splitlines()[-1] + "\n", sourced["MODELFN_STORE"],
            sourced["AWS_ENDPOINT_URL"], "the cluster at https://cluster.invalid:6443")


def test_the_function_reads_the_store_where_the_deploy_did(sourced: dict[str, str]) -> None:
    """An S3-compatible store (MinIO, or here the emulator) is at an endpoint; a rendered
    Service that named only `s3://bucket/...` had its function read AWS's S3 instead."""
    done = modelfn(sourced, "deploy", "digits:1", "--target", "knative", "--dry-run",
                   "--image", IMAGE)
    container = yaml.safe_load(done.stdout)["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["MODELFN_STORE"] == sourced["MODELFN_STORE"] + "/"
    assert env["MODELFN_S3_ENDPOINT"] == sourced["AWS_ENDPOINT_URL"]
    baked = modelfn(sourced, "deploy", "digits:1", "--target", "knative", "--dry-run",
                    "--image", IMAGE, "--bake")
    container = yaml.safe_load(baked.stdout)["spec"]["template"]["spec"]["containers"][0]
    assert "MODELFN_S3_ENDPOINT" not in {e["name"] for e in container["env"]}
