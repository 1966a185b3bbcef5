"""Container mode's command line. Running it needs podman and root (the image tests in
tests/deploy/test_image.py, marked ``containers``); here only what the platform asks of
podman is checked: the recipe's flags, variables passed by name, the image and its command."""

from __future__ import annotations

from typing import TYPE_CHECKING

from modelfn.localstack.lambda_service import FunctionConfig
from modelfn.localstack.podman import PodmanLauncher

if TYPE_CHECKING:
    from pathlib import Path


def test_podman_run_passes_variables_by_name_only(tmp_path: Path) -> None:
    podman = PodmanLauncher(tmp_path, "127.0.0.1:5000/digits@sha256:" + "0" * 64,
                            ("app.handler",))
    config = FunctionConfig("app.handler", task_root=tmp_path, name="digits",
                            env={"MODELFN_MODELS": "digits:1"}, launcher=podman)
    env = config.child_env("127.0.0.1:9001")
    argv = config.argv(env, "digits-abc")
    assert argv[:2] == ["podman", "--root"] and argv[2] == str(tmp_path / "root")
    assert argv[argv.index("run"):argv.index("run") + 4] == [
        "run", "--rm", "--replace", "--name=digits-abc"]
    for flag in ("--storage-driver", "--network=host", "--runtime=runc",
                 "--tls-verify=false"):
        assert flag in argv
    assert argv[-2:] == [podman.image, "app.handler"]
    passed = {arg.removeprefix("--env=") for arg in argv if arg.startswith("--env=")}
    assert {"AWS_LAMBDA_RUNTIME_API", "AWS_LAMBDA_FUNCTION_NAME", "_HANDLER",
            "MODELFN_MODELS", "AWS_REGION"} <= passed
    assert "PATH" not in passed and "HOME" not in passed
    assert not any("127.0.0.1:9001" in arg or "digits:1" in arg for arg in argv)
    assert env["AWS_LAMBDA_RUNTIME_API"] == "127.0.0.1:9001"  # podman reads it from here
