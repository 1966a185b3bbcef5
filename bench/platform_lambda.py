"""The local Lambda's two figures: a cold start through a function URL, and a warm invoke.

    python bench/platform_lambda.py [--cold 5] [--warm 500]

Each cold sample is a new function (created with boto3 at the local platform's endpoint,
an ``Image`` function running modelfn's Lambda handler over examples/models/digits) whose
``NONE`` URL gets its first request: the time from sending it to the answer covers a new
execution environment (``awslambdaric`` process start, modelfn import, model load and
warmup) and the invocation. The warm figure is sequential V2 JSON infers of one row
through the same URL once its environment is up (one keep-alive client). Prints a
markdown table; the figures are noisy on a shared machine.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import numpy as np
import orjson

from modelfn.localstack.lambda_platform import LocalLambda

DIGITS = Path(__file__).parents[1] / "examples" / "models" / "digits"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/digits:1"


def public_function(aws: LocalLambda, role: str, repo: Path) -> str:
    lam = aws.client("lambda")
    name = f"bench-{uuid.uuid4().hex[:8]}"
    lam.create_function(FunctionName=name, Role=role, PackageType="Image",
                        Code={"ImageUri": IMAGE}, Timeout=60, MemorySize=2048,
                        Environment={"Variables": {"MODELFN_REPOSITORY": str(repo)}})
    url = lam.create_function_url_config(FunctionName=name, AuthType="NONE")["FunctionUrl"]
    lam.add_permission(FunctionName=name, StatementId="url", Principal="*",
                       Action="lambda:InvokeFunctionUrl", FunctionUrlAuthType="NONE")
    lam.add_permission(FunctionName=name, StatementId="invoke", Principal="*",
                       Action="lambda:InvokeFunction", InvokedViaFunctionUrl=True)
    return str(url)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cold", type=int, default=5, help="cold-start samples")
    parser.add_argument("--warm", type=int, default=500, help="warm requests")
    args = parser.parse_args()
    body = orjson.dumps({"inputs": [{
        "name": "input", "shape": [1, 64], "datatype": "FP32",
        "data": np.random.default_rng(0).random(64, dtype=np.float32).tolist()}]})
    with tempfile.TemporaryDirectory() as tmp, LocalLambda(idle_s=600) as aws:
        repo = Path(tmp) / "models"
        shutil.copytree(DIGITS, repo / "digits")
        iam = aws.client("iam")
        role = iam.create_role(RoleName="bench", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
        cold: list[float] = []
        with httpx.Client(timeout=120) as client:
            url = ""
            for _ in range(args.cold):
                url = public_function(aws, role, repo)
                started = time.perf_counter()
                response = client.post(f"{url}v2/models/digits/infer", content=body)
                cold.append((time.perf_counter() - started) * 1000)
                response.raise_for_status()
            warm: list[float] = []
            for _ in range(args.warm):
                started = time.perf_counter()
                client.post(f"{url}v2/models/digits/infer", content=body).raise_for_status()
                warm.append((time.perf_counter() - started) * 1000)
    print("| figure | n | p50 ms | p90 ms | min ms | max ms |")
    print("|---|---|---|---|---|---|")
    for label, values in (("cold start (new environment) → first answer", cold),
                          ("warm invoke via function URL", warm)):
        print(f"| {label} | {len(values)} | {statistics.median(values):.2f} | "
              f"{percentile(values, 0.9):.2f} | {min(values):.2f} | {max(values):.2f} |")


if __name__ == "__main__":
    main()
