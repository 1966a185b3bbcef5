"""The whole local platform: `LocalPlatform` in-process and `modelfn dev` as a process,
driven by the real kubernetes client, boto3, kubectl and httpx. Nothing is mocked."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from modelfn.localstack.state import StateDir
from modelfn.process.supervisor import Process, alive, descendants

if TYPE_CHECKING:
    from collections.abc import Iterator

    from modelfn.localstack.platform import LocalPlatform

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
REQUEST = json.loads((EXAMPLES / "requests" / "digits.json").read_text())
EXPECTED = json.loads((EXAMPLES / "requests" / "digits_expected.json").read_text())["label"]
G, V, P = "serving.knative.dev", "v1", "services"


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalPlatform]:
    from modelfn.localstack.platform import LocalPlatform

    with LocalPlatform(tmp_path_factory.mktemp("dev"), idle_s=1.5) as running:
        yield running


@pytest.fixture(scope="module")
def store(platform: LocalPlatform) -> str:
    """digits version 1 pushed to the platform's model store over its S3 endpoint."""
    from modelfn.model_store import open_store

    assert platform.s3 is not None
    store = open_store(platform.store, s3_client=platform.s3.client())
    store.push(EXAMPLES / "models" / "digits")
    return platform.store


@pytest.fixture(scope="module")
def api(platform: LocalPlatform) -> Any:
    from kubernetes import client, config

    config.load_kube_config(config_file=str(platform.state.kubeconfig))
    return client.CustomObjectsApi()


def service(name: str, models: str, store: str) -> dict[str, Any]:
    return {"apiVersion": f"{G}/{V}", "kind": "Service", "metadata": {"name": name},
            "spec": {"template": {"spec": {"containerConcurrency": 16, "containers": [{
                "image": "modelfn.local/digits:process",
                "env": [{"name": "MODELFN_STORE", "value": store},
                        {"name": "MODELFN_MODELS", "value": models}]}]}}}}


def wait_condition(api: Any, name: str, timeout: float = 60) -> dict[str, Any]:
    from kubernetes import watch

    for event in watch.Watch().stream(api.list_namespaced_custom_object, G, V, "default", P,
                                      field_selector=f"metadata.name={name}",
                                      timeout_seconds=int(timeout)):
        obj = event["object"]
        status = obj.get("status", {})
        ready = {c["type"]: c for c in status.get("conditions", [])}.get("Ready", {})
        if status.get("observedGeneration") == obj["metadata"]["generation"] and \
                ready.get("status") in ("True", "False"):
            return obj  # type: ignore[no-any-return]
    raise AssertionError(f"{name} never settled")


def instances(platform: LocalPlatform, revision: str) -> int:
    assert platform.serving is not None
    return int(platform.serving.revision_status("default", revision).instances)


def test_the_environment_file_reaches_the_platform(platform: LocalPlatform) -> None:
    env = StateDir(platform.state.path).read_env()
    assert env["KUBECONFIG"] == str(platform.state.kubeconfig)
    assert env["MODELFN_STORE"] == "s3://modelfn-dev/models"
    assert env["MODELFN_GATEWAY"].startswith("http://127.0.0.1:")
    # `. DIR/env` points modelfn deploy at this platform, whatever DIR is
    assert env["MODELFN_DEV_DIR"] == str(platform.state.path)
    import boto3

    s3 = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"],
                      aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                      aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
                      region_name=env["AWS_DEFAULT_REGION"])
    assert "modelfn-dev" in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    assert httpx.get(f"{env['MODELFN_GATEWAY']}/v2/health/ready").status_code == 200


def test_the_status_endpoint_and_the_knative_api_answer_their_owner_only(
        platform: LocalPlatform) -> None:
    """What a local process or a web page can reach: nothing without the state directory,
    which only its owner reads."""
    ready = platform.state.read_ready()
    assert ready is not None
    url = str(ready["status_url"])
    assert httpx.get(url, timeout=10).json()["endpoints"]["store"] == platform.store
    root = url[:url.index("/", len("http://"))]
    for path in ("/", "/status", "/status/", url[len(root):] + "x", url[len(root):-1]):
        assert httpx.get(root + path, timeout=10).status_code == 404, path
    assert httpx.get(url, headers={"origin": "https://attacker.example"},
                     timeout=10).status_code == 403
    for path in (platform.state.ready_file, platform.state.kubeconfig,
                 platform.state.env_file):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert platform.knative is not None
    with httpx.Client(verify=False, timeout=10) as anyone:  # no token: refused
        answer = anyone.get(f"{platform.knative.url}/apis/{G}/{V}/namespaces/default/{P}")
        assert answer.status_code == 401 and answer.json()["reason"] == "Unauthorized"


def test_the_aws_endpoint_takes_only_the_secret_of_this_start(platform: LocalPlatform) -> None:
    """The AWS endpoint (S3, Lambda, IAM) answers requests signed with the secret in
    DIR/env, made at this start; the well-known dummy keys, a wrong secret, no signature
    and a web page are refused."""
    import boto3
    from botocore.exceptions import ClientError

    env = StateDir(platform.state.path).read_env()
    assert env["AWS_SECRET_ACCESS_KEY"] not in ("testing", "")

    def s3(key: str, secret: str) -> Any:
        return boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"],
                            aws_access_key_id=key, aws_secret_access_key=secret,
                            region_name=env["AWS_DEFAULT_REGION"])

    assert s3(env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]).list_buckets()
    for key, secret in (("testing", "testing"), (env["AWS_ACCESS_KEY_ID"], "testing")):
        with pytest.raises(ClientError) as refused:
            s3(key, secret).list_buckets()
        assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    bucket = f"{env['AWS_ENDPOINT_URL']}/modelfn-dev"
    assert httpx.get(bucket, timeout=10).status_code == 403
    assert httpx.put(f"{bucket}/x", content=b"x", timeout=10,
                     headers={"origin": "https://attacker.example"}).status_code == 403


def test_a_service_from_the_store_serves_scales_to_zero_and_wakes(
    platform: LocalPlatform, store: str, api: Any
) -> None:
    api.create_namespaced_custom_object(G, V, "default", P, service("digits", "digits:1", store))
    obj = wait_condition(api, "digits")
    status = obj["status"]
    assert {c["type"]: c["status"] for c in status["conditions"]}["Ready"] == "True", status
    url = status["url"]
    revision = status["latestReadyRevisionName"]
    answer = httpx.post(f"{url}/v2/models/digits/infer", json=REQUEST, timeout=60)
    assert answer.status_code == 200, answer.text
    labels = next(o for o in answer.json()["outputs"] if o["name"] == "label")["data"]
    assert labels == EXPECTED
    pids = platform.serving.pids("default", revision)  # type: ignore[union-attr]
    assert pids
    deadline = time.monotonic() + 60
    while instances(platform, revision) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert instances(platform, revision) == 0
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)  # drained, then gone
    assert not [pid for pid in pids if alive(pid)]
    started = time.monotonic()
    cold = httpx.post(f"{url}/v2/models/digits/infer", json=REQUEST, timeout=60)
    assert cold.status_code == 200  # held while the instance started, then answered
    print(f"scale from zero to a V2 answer: {time.monotonic() - started:.2f} s")


def test_a_missing_model_is_ready_false_with_the_stores_message(
    platform: LocalPlatform, store: str, api: Any
) -> None:
    api.create_namespaced_custom_object(G, V, "default", P,
                                        service("ghost", "nothere:3", store))
    obj = wait_condition(api, "ghost")
    ready = {c["type"]: c for c in obj["status"]["conditions"]}["Ready"]
    assert ready["status"] == "False"
    assert "nothere" in ready["message"]


def test_modelfn_dev_runs_prints_status_and_stops_leaving_nothing(tmp_path: Path) -> None:
    state = StateDir(tmp_path / "dev")
    dev = Process([sys.executable, "-m", "modelfn.cli.main", "dev", "--state-dir",
                   str(state.path), "--idle", "2s"], name="modelfn dev").start()
    try:
        dev.wait_ready(lambda: state.read_ready() is not None, timeout=120)
        env = state.read_env()
        assert set(env) >= {"KUBECONFIG", "AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID",
                            "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "MODELFN_STORE",
                            "MODELFN_GATEWAY"}
        status = subprocess.run([sys.executable, "-m", "modelfn.cli.main", "dev", "status",
                                 "--state-dir", str(state.path)], capture_output=True,
                                text=True, timeout=60)
        assert status.returncode == 0, status.stderr
        assert "Knative revisions" in status.stdout and "gateway" in status.stdout
        if shutil.which("kubectl"):
            kubectl = subprocess.run(["kubectl", "get", "ksvc"], capture_output=True, text=True,
                                     env={**os.environ, "KUBECONFIG": env["KUBECONFIG"]},
                                     timeout=60)
            assert kubectl.returncode == 0, kubectl.stderr
        children = descendants(dev.pid)
        assert children, "the gateway at least runs as a child"
    finally:
        os.kill(dev.pid, signal.SIGTERM)  # the leader only: its own shutdown must reap all
        code = dev.wait(90)
    assert code == 0, dev.tail()
    time.sleep(0.5)
    assert not [pid for pid in children if alive(pid)]
    assert state.read_ready() is None


def test_a_killed_modelfn_dev_takes_its_gateway_with_it(tmp_path: Path) -> None:
    """SIGKILL (an OOM kill) runs no cleanup: the gateway, started by the platform's own
    thread, asks the kernel to go with it, as every function instance does, instead of
    running on forever with init as its parent; and a new dev can take the directory."""
    state = StateDir(tmp_path / "dev")
    dev = Process([sys.executable, "-m", "modelfn.cli.main", "dev", "--state-dir",
                   str(state.path), "--idle", "2s"], name="modelfn dev").start()
    try:
        dev.wait_ready(lambda: state.read_ready() is not None, timeout=120)
        children = descendants(dev.pid)
        assert children, "the gateway at least runs as a child"
    finally:
        os.kill(dev.pid, signal.SIGKILL)
        dev.wait(30)
    deadline = time.monotonic() + 30
    while any(alive(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in children if alive(pid)]
    StateDir(state.path).claim().close()  # the kernel let go of the lock too
