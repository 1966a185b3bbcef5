"""Functions (`modelfn serve` of one digits version) and `modelfn gateway`, as real processes."""

from __future__ import annotations

import shutil
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from modelfn.model_store.routes import ModelRoutes, VersionRoute
from modelfn.process.supervisor import Process, free_port, http_probe

if TYPE_CHECKING:
    from modelfn.localstack.lambda_platform import LocalLambda

DIGITS = Path(__file__).resolve().parents[1] / "examples" / "models" / "digits"
#: the image a local Lambda function names (the local platform runs the installed modelfn)
LAMBDA_IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/modelfn@sha256:" + "cd" * 32


def lambda_function(aws: LocalLambda, repository: Path) -> tuple[str, str]:
    """A modelfn Lambda function over ``repository`` with a public (``NONE``) function URL,
    created with boto3: its name and URL."""
    lam, name = aws.client("lambda"), f"fn-{uuid.uuid4().hex[:8]}"
    role = aws.client("iam").create_role(RoleName=f"r-{name}", AssumeRolePolicyDocument="{}")
    lam.create_function(FunctionName=name, Role=role["Role"]["Arn"], PackageType="Image",
                        Code={"ImageUri": LAMBDA_IMAGE}, Timeout=60, MemorySize=2048,
                        Environment={"Variables": {"MODELFN_REPOSITORY": str(repository)}})
    lam.get_waiter("function_active_v2").wait(FunctionName=name)
    url = lam.create_function_url_config(FunctionName=name, AuthType="NONE")["FunctionUrl"]
    lam.add_permission(FunctionName=name, StatementId="url", Principal="*",
                       Action="lambda:InvokeFunctionUrl", FunctionUrlAuthType="NONE")
    lam.add_permission(FunctionName=name, StatementId="invoke", Principal="*",
                       Action="lambda:InvokeFunction", InvokedViaFunctionUrl=True)
    return name, str(url)


def route_config(config: str | Path) -> dict[str, Any]:
    """The config a routing table records for a version (``deploy`` writes it from the
    config.pbtxt the version was pushed with): of config.pbtxt text, or of a model folder."""
    from modelfn.deploy.deployment import Batching
    from modelfn.runtime.config_file import parse_config

    text = (config / "config.pbtxt").read_text() if isinstance(config, Path) else config
    policy = Batching.of(parse_config(text)).policy
    assert policy is not None, "the config names no tensors: a table records none for it"
    return dict(policy)


def digits_repository(root: Path, version: int) -> Path:
    """A repository serving the example digits model as ``version``."""
    model = root / f"v{version}" / "digits"
    (model / str(version)).mkdir(parents=True)
    shutil.copy(DIGITS / "config.pbtxt", model / "config.pbtxt")
    shutil.copy(DIGITS / "1" / "model.onnx", model / str(version) / "model.onnx")
    return model.parent


@dataclass
class Function:
    """One function: `modelfn serve` of one digits version on a loopback port."""

    repository: Path
    port: int
    process: Process | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Function:
        self.process = Process(
            [sys.executable, "-m", "modelfn.cli.main", "serve", str(self.repository),
             "--host", "127.0.0.1", "--port", str(self.port)], name=f"function:{self.port}",
        ).start()
        return self

    def wait_ready(self) -> None:
        assert self.process is not None
        self.process.wait_ready(http_probe(f"{self.url}/v2/health/ready"), timeout=60)

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()


@dataclass
class GatewayProcess:
    process: Process
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


def start_gateway(routes_dir: Path, *args: str) -> GatewayProcess:
    port = free_port()
    process = Process(
        [sys.executable, "-m", "modelfn.cli.main", "gateway", "--routes-dir", str(routes_dir),
         "--host", "127.0.0.1", "--port", str(port), "--reload", "0.2", *args], name="gateway",
    ).start()
    process.wait_ready(http_probe(f"http://127.0.0.1:{port}/v2/health/ready"), timeout=30)
    return GatewayProcess(process, port)


def digits_routes(functions: dict[int, Function], split: dict[int, int]) -> ModelRoutes:
    return ModelRoutes(
        model="digits", target="local",
        versions={v: VersionRoute(f.url, max_batch_size=8, concurrency=16)
                  for v, f in functions.items()},
        split=split,
    )
