"""The deploy lifecycle as a user types it, against `modelfn dev` running as a process: push
two versions, deploy version 1, a 10% canary to version 2 (observed split, pinned URL),
promote, roll back, status, undeploy a version, undeploy the model. Local Knative (process
mode) and the local Lambda (awslambdaric behind AWS_IAM function URLs). Every command is
a `modelfn` process; requests are real HTTP. Nothing is mocked."""

from __future__ import annotations

import json
import shlex
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from dev_support import EXAMPLES, EXPECTED, REQUEST, modelfn, retrained, start_dev, status, versions

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

REQUESTS = 300  # unpinned requests to observe a 10% split: 30 expected, sd 5.2

@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """`modelfn dev` as a process; the environment a user gets from `. DIR/env`."""
    path = tmp_path_factory.mktemp("dev")
    process, env = start_dev(path, "--idle", "30s", "--no-gateway")
    try:
        modelfn(env, "push", str(EXAMPLES / "models" / "digits"))
        modelfn(env, "push", str(retrained(path / "v2")))
        assert versions(env) == [1, 2]
        yield env
    finally:
        assert process.stop(60) == 0, process.tail()


def answered_by(url: str, auth: str = "none", n: int = 1) -> list[str]:
    """The model versions that answered ``n`` digits requests at ``url``, each checked
    (through modelfn's V2 client; ``auth`` iam signs with the environment's credentials)."""
    from modelfn.client.v2 import V2Client

    client = V2Client(url, auth=auth)  # type: ignore[arg-type]
    body = json.dumps(REQUEST).encode()
    seen = []
    for _ in range(n):
        header, outputs = client.infer_body("digits", body,
                                            {"content-type": "application/json"})
        assert outputs[0].data.ravel().tolist() == EXPECTED
        seen.append(str(header["model_version"]))
    return seen


def invoke(env: dict[str, str], url: str, *args: str, code: int = 0) -> str:
    """`modelfn invoke` of the digits request; its stdout (the V2 response)."""
    done = modelfn(env, "invoke", url, "-m", "digits", "--input",
                   str(EXAMPLES / "requests" / "digits.json"), "--output", "json", *args,
                   code=code)
    return done.stdout if code == 0 else done.stderr


def test_knative_canary_promote_rollback_undeploy(dev: dict[str, str]) -> None:
    target = ("--target", "local")
    first = modelfn(dev, "deploy", "digits:1", *target)
    url = first.stdout.strip().splitlines()[-1]
    assert url.startswith("http://")
    answer = json.loads(invoke(dev, url))
    assert answer["model_version"] == "1" and answer["outputs"][0]["data"] == EXPECTED
    assert set(answered_by(url, n=3)) == {"1"}

    canary = modelfn(dev, "deploy", "digits:2", *target, "--traffic", "10")
    assert canary.stdout.strip().splitlines()[-1] == url
    facts = status(dev, *target)
    assert facts["split"] == {"1": 90, "2": 10} and facts["ready"] is True
    pinned = facts["versions"]["2"]["url"]
    assert set(answered_by(pinned, n=3)) == {"2"}
    seen = answered_by(url, n=REQUESTS)
    share = seen.count("2") / REQUESTS
    assert 0.04 <= share <= 0.18, f"version 2 took {share:.0%} of {REQUESTS}, not ~10%"

    again = modelfn(dev, "deploy", "digits:2", *target, "--traffic", "10")
    assert "unchanged" in again.stderr

    before = service(dev)
    dry = modelfn(dev, "traffic", "digits", *target, "1=0", "2=100", "--dry-run")
    assert tag_percents(dry_calls(dry.stdout, "patch_namespaced_custom_object")) == {
        "v1": 0, "v2": 100}
    assert "--dry-run: would move digits: 1=90 2=10 -> 1=0 2=100" in dry.stderr
    unchanged(dev, target, before, {"1": 90, "2": 10})

    modelfn(dev, "traffic", "digits", *target, "1=0", "2=100")
    assert status(dev, *target)["split"] == {"1": 0, "2": 100}
    assert set(answered_by(url, n=20)) == {"2"}

    before = service(dev)
    dry = modelfn(dev, "rollback", "digits", *target, "--dry-run")
    assert tag_percents(dry_calls(dry.stdout, "patch_namespaced_custom_object")) == {
        "v1": 90, "v2": 10}
    unchanged(dev, target, before, {"1": 0, "2": 100})
    modelfn(dev, "rollback", "digits", *target)
    facts = status(dev, *target)
    assert facts["split"] == {"1": 90, "2": 10}
    assert facts["history"][-1] == {"1": 100}  # before version 2 was deployed
    assert facts["versions"]["1"]["instances"] >= 1  # it just served

    table = modelfn(dev, "status", "digits", *target).stdout
    assert "v1" in table and "v2" in table and "Ready" in table

    refused = modelfn(dev, "undeploy", "digits", "--version", "2", *target, code=2)
    assert "still takes 10%" in refused.stderr
    modelfn(dev, "traffic", "digits", *target, "1=100")
    before = service(dev)
    dry = modelfn(dev, "undeploy", "digits", "--version", "2", *target, "--dry-run")
    assert tag_percents(dry_calls(dry.stdout, "patch_namespaced_custom_object")) == {"v1": 100}
    assert "would undeploy digits version 2 and serve 1=100" in dry.stderr
    unchanged(dev, target, before, {"1": 100, "2": 0})
    modelfn(dev, "undeploy", "digits", "--version", "2", *target)
    assert set(status(dev, *target)["versions"]) == {"1"}
    assert set(answered_by(url, n=10)) == {"1"}

    before = service(dev)
    dry = modelfn(dev, "undeploy", "digits", *target, "--dry-run")
    (call,) = dry_calls(dry.stdout, "delete_namespaced_custom_object")
    assert (call["params"]["namespace"], call["params"]["name"]) == ("default", "digits")
    unchanged(dev, target, before, {"1": 100})
    modelfn(dev, "undeploy", "digits", *target)
    gone = modelfn(dev, "status", "digits", *target, code=3)
    assert "not deployed" in gone.stderr
    try:  # the service's route is gone: its port is closed, or the ingress has no host
        code = httpx.post(f"{url}/v2/models/digits/infer", json=REQUEST, timeout=30).status_code
    except httpx.ConnectError:
        code = 404
    assert code == 404


def dry_calls(stdout: str, *expected: str) -> list[dict[str, Any]]:
    """The platform calls a ``--dry-run`` printed, which must be ``expected``, in order."""
    calls: list[dict[str, Any]] = json.loads(stdout)
    assert [c["call"] for c in calls] == list(expected), calls
    return calls


def tag_percents(calls: list[dict[str, Any]]) -> dict[str, int]:
    """The split a recorded patch of the Service's traffic sets, by tag."""
    (call,) = calls
    assert (call["params"]["namespace"], call["params"]["name"]) == ("default", "digits")
    return {t["tag"]: t["percent"] for t in call["params"]["body"]["spec"]["traffic"]}


def unchanged(env: dict[str, str], target: tuple[str, ...], before: dict[str, Any],
              split: dict[str, int]) -> None:
    """A dry run left the Service and the routing table as they were."""
    after = service(env)
    assert after["metadata"]["generation"] == before["metadata"]["generation"]
    assert after["spec"] == before["spec"]
    assert status(env, *target)["split"] == split


def service(env: dict[str, str], name: str = "digits") -> dict[str, Any]:
    """The Knative Service as the local API has it, read with the kubernetes client."""
    from kubernetes import client, config

    api = client.CustomObjectsApi(config.new_client_from_config(config_file=env["KUBECONFIG"]))
    found: dict[str, Any] = api.get_namespaced_custom_object(
        "serving.knative.dev", "v1", "default", "services", name)
    return found


def revisions(obj: dict[str, Any]) -> dict[int, str]:
    """Model version -> the revision its tag points at."""
    return {int(t["tag"][1:]): t["revisionName"] for t in obj["spec"]["traffic"]}


def test_redeploying_a_version_with_other_options_makes_a_new_revision(
        dev: dict[str, str]) -> None:
    """Knative revisions are immutable (the local API refuses a changed template that keeps
    its name, 422, as Knative does): a redeploy with other options is a new revision of the
    same version, under the same tag, so its pinned URL and the split's URL keep serving
    it; the same options again change nothing; traffic, rollback and status find it."""
    target = ("--target", "local")
    url = modelfn(dev, "deploy", "digits:1", *target).stdout.strip().splitlines()[-1]
    first = service(dev)
    pinned = status(dev, *target)["versions"]["1"]["url"]
    assert set(answered_by(pinned)) == {"1"}

    again = modelfn(dev, "deploy", "digits:1", *target, "--min-scale", "1", "--cpu", "2")
    assert again.stdout.strip().splitlines()[-1] == url
    second = service(dev)
    template = second["spec"]["template"]
    name = template["metadata"]["name"]
    assert name != first["spec"]["template"]["metadata"]["name"]
    assert name.startswith("digits-v1-") and len(name) <= 63
    assert template["metadata"]["annotations"]["autoscaling.knative.dev/min-scale"] == "1"
    assert template["spec"]["containers"][0]["resources"]["limits"]["cpu"] == "2"
    assert second["metadata"]["generation"] == first["metadata"]["generation"] + 1
    assert second["status"]["latestReadyRevisionName"] == name
    assert revisions(second) == {1: name}
    facts = status(dev, *target)
    assert facts["ready"] is True and facts["split_in_sync"] is True
    assert facts["versions"]["1"]["url"] == pinned  # the tag, so the pinned URL, stays
    assert facts["versions"]["1"]["instances"] >= 1  # min-scale 1, found by its tag
    assert set(answered_by(url, n=3)) == {"1"} and set(answered_by(pinned, n=3)) == {"1"}

    same = modelfn(dev, "deploy", "digits:1", *target, "--min-scale", "1", "--cpu", "2")
    assert "unchanged" in same.stderr
    assert service(dev)["metadata"]["generation"] == second["metadata"]["generation"]

    modelfn(dev, "deploy", "digits:2", *target, "--traffic", "10")
    names = revisions(service(dev))
    assert names[1] == name and names[2].startswith("digits-v2-")
    modelfn(dev, "traffic", "digits", *target, "1=0", "2=100")
    assert set(answered_by(url, n=5)) == {"2"}
    modelfn(dev, "rollback", "digits", *target)
    facts = status(dev, *target)
    assert facts["split"] == {"1": 90, "2": 10} and facts["served_split"] == {"1": 90, "2": 10}
    assert revisions(service(dev)) == names
    assert set(answered_by(pinned, n=2)) == {"1"}
    assert set(answered_by(facts["versions"]["2"]["url"], n=2)) == {"2"}

    modelfn(dev, "traffic", "digits", *target, "1=100")
    modelfn(dev, "undeploy", "digits", "--version", "2", *target)
    assert revisions(service(dev)) == {1: name}
    assert set(answered_by(url, n=3)) == {"1"}
    modelfn(dev, "undeploy", "digits", *target)


def test_lambda_canary_and_signed_urls(dev: dict[str, str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        monkeypatch.setenv(key, dev[key])  # the standard chain the client signs with
    target = ("--target", "local", "--lambda")
    url = modelfn(dev, "deploy", "digits:1", *target).stdout.strip().splitlines()[-1]
    assert url.startswith("http://")
    assert "HTTP 403" in invoke(dev, url, code=7)  # AWS_IAM: unsigned is refused ...
    assert json.loads(invoke(dev, url, "--auth", "iam"))["model_version"] == "1"  # ... signed
    assert set(answered_by(url, "iam", n=2)) == {"1"}

    modelfn(dev, "deploy", "digits:2", *target, "--traffic", "10")
    boto = _lambda(dev)
    live = boto.get_alias(FunctionName="digits", Name="live")
    weights = live["RoutingConfig"]["AdditionalVersionWeights"]
    v2 = boto.get_alias(FunctionName="digits", Name="v2")["FunctionVersion"]
    assert weights == {v2: 0.1}
    facts = status(dev, *target)
    assert facts["split"] == {"1": 90, "2": 10} and facts["ready"] is True
    assert set(answered_by(facts["versions"]["2"]["url"], "iam", n=2)) == {"2"}

    same = modelfn(dev, "traffic", "digits", *target, "1=90", "2=10", "--dry-run")
    dry_calls(same.stdout)  # none: the platform has it
    assert "(the platform had it already)" in same.stderr
    dry = modelfn(dev, "traffic", "digits", *target, "2=100", "--dry-run")
    (call,) = dry_calls(dry.stdout, "update_alias")
    assert call["params"] == {"FunctionName": "digits", "Name": "live", "FunctionVersion": v2,
                              "RoutingConfig": {"AdditionalVersionWeights": {}}}
    assert boto.get_alias(FunctionName="digits", Name="live")["RoutingConfig"][
        "AdditionalVersionWeights"] == {v2: 0.1}
    assert status(dev, *target)["split"] == {"1": 90, "2": 10}

    modelfn(dev, "traffic", "digits", *target, "2=100")
    live = boto.get_alias(FunctionName="digits", Name="live")
    assert live["FunctionVersion"] == v2 and not live["RoutingConfig"].get(
        "AdditionalVersionWeights")
    assert set(answered_by(url, "iam", n=4)) == {"2"}
    modelfn(dev, "rollback", "digits", *target)
    assert boto.get_alias(FunctionName="digits", Name="live")["RoutingConfig"][
        "AdditionalVersionWeights"] == {v2: 0.1}

    wrong = modelfn(dev, "traffic", "digits", "--target", "local", "1=100", code=2)
    assert "deployed on --target local --lambda" in wrong.stderr
    (call,) = dry_calls(modelfn(dev, "undeploy", "digits", *target, "--dry-run").stdout,
                        "delete_function")
    assert call["params"] == {"FunctionName": "digits"}
    assert boto.get_alias(FunctionName="digits", Name="live")["FunctionVersion"]
    modelfn(dev, "undeploy", "digits", *target)
    assert not [f for f in boto.list_functions()["Functions"] if f["FunctionName"] == "digits"]


def _lambda(env: dict[str, str]) -> Any:
    import boto3

    return boto3.client("lambda", endpoint_url=env["AWS_ENDPOINT_URL"],
                        region_name=env["AWS_DEFAULT_REGION"],
                        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"])


def test_status_shows_the_split_the_platform_serves_when_changed_outside_modelfn(
        dev: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    from kubernetes import client, config

    target = ("--target", "local")
    modelfn(dev, "deploy", "digits:1", *target)
    modelfn(dev, "deploy", "digits:2", *target, "--traffic", "10")
    assert status(dev, *target)["split_in_sync"] is True
    api = client.CustomObjectsApi(config.new_client_from_config(config_file=dev["KUBECONFIG"]))
    names = revisions(service(dev))
    api.patch_namespaced_custom_object(
        "serving.knative.dev", "v1", "default", "services", "digits",
        {"spec": {"traffic": [{"revisionName": names[1], "percent": 0, "tag": "v1"},
                              {"revisionName": names[2], "percent": 100, "tag": "v2"}]}})
    facts = status(dev, *target)
    assert facts["split"] == {"1": 90, "2": 10}  # the routing table's
    assert facts["served_split"] == {"1": 0, "2": 100} and facts["split_in_sync"] is False
    assert facts["versions"]["2"]["served_percent"] == 100
    text = modelfn(dev, "status", "digits", *target).stdout
    assert "the platform serves 1=0 2=100" in text and "table says 1=90 2=10" in text
    assert "restore the table's split: modelfn traffic digits 1=90 2=10\n" in text
    assert "record it: modelfn traffic digits 2=100\n" in text
    run_hint(dev, text, "record it: ")
    facts = status(dev, *target)
    assert facts["split_in_sync"] is True and facts["served_split"] == {"1": 0, "2": 100}
    assert "the platform serves" not in modelfn(dev, "status", "digits", *target).stdout
    modelfn(dev, "undeploy", "digits", *target)

    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        monkeypatch.setenv(key, dev[key])
    target = ("--target", "local", "--lambda")
    modelfn(dev, "deploy", "digits:1", *target)
    modelfn(dev, "deploy", "digits:2", *target, "--traffic", "10")
    boto = _lambda(dev)
    v1 = boto.get_alias(FunctionName="digits", Name="v1")["FunctionVersion"]
    v2 = boto.get_alias(FunctionName="digits", Name="v2")["FunctionVersion"]
    boto.update_alias(FunctionName="digits", Name="live", FunctionVersion=v1,
                      RoutingConfig={"AdditionalVersionWeights": {v2: 0.5}})
    facts = status(dev, *target)
    assert facts["served_split"] == {"1": 50, "2": 50} and facts["split_in_sync"] is False
    assert facts["split"] == {"1": 90, "2": 10}
    text = modelfn(dev, "status", "digits", *target).stdout
    assert "the platform serves 1=50 2=50 (alias digits:live)" in text
    assert "restore the table's split: modelfn traffic digits 1=90 2=10\n" in text
    run_hint(dev, text, "restore the table's split: ")
    assert status(dev, *target)["split_in_sync"] is True
    modelfn(dev, "undeploy", "digits", *target)


def run_hint(env: dict[str, str], text: str, after: str, code: int = 0) -> str:
    """Run the ``modelfn ...`` command ``text`` prints after ``after``, as typed; its
    stderr."""
    line = text.split(after, 1)[1].splitlines()[0]
    words = shlex.split(line[line.index("modelfn "):])
    assert words[0] == "modelfn"
    return modelfn(env, *words[1:], code=code).stderr


def test_commands_on_a_deployed_model_read_its_target_from_the_routing_table(
        dev: dict[str, str], tmp_path: Path) -> None:
    """status, traffic, rollback and undeploy need no --target; one given must agree. A
    deploy to another target says how the user typed each and the undeploy that frees the
    model, and that command runs as printed."""
    modelfn(dev, "deploy", "digits:1", "--target", "local")
    modelfn(dev, "deploy", "digits:2", "--target", "local", "--traffic", "10")
    facts = status(dev)
    assert facts["target"] == "local" and facts["split"] == {"1": 90, "2": 10}
    assert facts["ready"] is True
    text = modelfn(dev, "status", "digits").stdout
    assert text.startswith("digits (--target local): http://")

    moved = modelfn(dev, "deploy", "digits:1", "--target", "local", "--lambda", code=4)
    assert moved.stderr.strip() == (
        "Error: 'digits' is deployed on --target local; to deploy it with --target local "
        "--lambda, undeploy it first: modelfn undeploy digits")
    wrong = modelfn(dev, "status", "digits", "--lambda", code=2)
    assert "deployed on --target local, not on --target local --lambda" in wrong.stderr

    refused = modelfn(dev, "undeploy", "digits", "--version", "2", code=2)
    assert refused.stderr.rstrip().endswith("move it first, e.g. modelfn traffic digits "
                                            "1=100 2=0")
    run_hint(dev, refused.stderr, "e.g. ")
    assert status(dev, "--target", "local")["split"] == {"1": 100, "2": 0}
    modelfn(dev, "rollback", "digits")
    assert status(dev)["split"] == {"1": 90, "2": 10}
    modelfn(dev, "traffic", "digits", "2=100")
    assert status(dev)["served_split"] == {"1": 0, "2": 100}

    # without the platform's env: the tables of --state-dir's platform, its env loaded
    bare = {k: v for k, v in dev.items() if not k.startswith(("AWS_", "KUBECONFIG"))
            and k not in ("MODELFN_STORE", "MODELFN_S3_ENDPOINT", "MODELFN_DEV_DIR")}
    found = json.loads(modelfn(bare, "status", "digits", "--state-dir", dev["MODELFN_DEV_DIR"],
                               "--output", "json").stdout)
    assert found["split"] == {"1": 0, "2": 100} and found["ready"] is True
    nowhere = modelfn({**bare, "HOME": str(tmp_path)}, "status", "digits", code=2)
    assert "no model store: give it with --store URI" in nowhere.stderr

    moved = modelfn(dev, "deploy", "digits:1", "--target", "local", "--lambda", code=4)
    run_hint(dev, moved.stderr, "undeploy it first: ")
    assert "not deployed" in modelfn(dev, "status", "digits", code=3).stderr
    orphan = modelfn(dev, "undeploy", "digits", code=3)
    assert "give its --target" in orphan.stderr

    modelfn(dev, "deploy", "digits:1", "--target", "local", "--lambda")
    facts = json.loads(modelfn(bare, "status", "digits", "--state-dir", dev["MODELFN_DEV_DIR"],
                               "--output", "json").stdout)
    assert facts["target"] == "local-lambda" and facts["ready"] is True
    assert modelfn(dev, "status", "digits").stdout.startswith(
        "digits (--target local --lambda): http://")
    modelfn(dev, "undeploy", "digits")
    assert "not deployed" in modelfn(dev, "status", "digits", code=3).stderr


def test_a_lambda_canary_shows_every_version_without_a_trailing_slash(
        dev: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        monkeypatch.setenv(key, dev[key])
    target = ("--target", "local", "--lambda")
    url = modelfn(dev, "deploy", "digits:1", *target).stdout.strip().splitlines()[-1]
    canary = modelfn(dev, "deploy", "digits:2", *target, "--traffic", "10")
    assert canary.stdout.strip().splitlines()[-1] == url and not url.endswith("/")
    facts = status(dev)
    pinned = {v: facts["versions"][v]["url"] for v in ("1", "2")}
    assert facts["url"] == url
    for version, pin in pinned.items():
        assert not pin.endswith("/")
        assert f"  v{version}: {pin}\n" in canary.stderr
        assert set(answered_by(pin, "iam", n=1)) == {version}
    assert facts["versions"]["1"]["protocol"] == "http"
    text = modelfn(dev, "status", "digits").stdout
    assert f"(--target local --lambda): {url}  Ready" in text
    assert f"  {pinned['2']}  (http, auth iam, max_batch_size 64)" in text
    assert json.loads(invoke(dev, pinned["2"], "--auth", "iam"))["model_version"] == "2"
    assert set(answered_by(url, "iam", n=3)) <= {"1", "2"}
    modelfn(dev, "undeploy", "digits")
