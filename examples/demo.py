"""modelfn's main job end to end on this machine, on the embedded local platform.

1. ``modelfn dev``: the local platform (S3, the Knative and Lambda APIs, functions that
   scale to zero, the gateway), all on 127.0.0.1;
2. ``modelfn push``: digits versions 1 and 2 into its model store;
3. ``modelfn deploy``: version 1 to local Knative (``digits``), to a local Lambda
   function URL (``digits-lambda``) and, speaking V2 gRPC, to local Knative again
   (``digits-grpc``, ``--protocol grpc``: an ``h2c`` port);
4. requests through the gateway, JSON (httpx) then binary tensors (tritonclient), gRPC
   (tritonclient.grpc at the gateway's gRPC port), and concurrent callers to the Lambda
   function batched by the gateway;
5. an ensemble: ``digits_image`` (Python preprocess, digits, Python postprocess) pushed
   with its Python models, deployed as one function to local Knative, and sent encoded
   images through the gateway;
6. a 10% canary of version 2, shown as an observed split, then promoted;
7. the functions left idle until they scale to zero (0 instances, the processes gone);
8. one more request wakes them: the cold answer timed against the warm ones;
9. everything stopped cleanly.

Run it with ``scripts/demo``; it exits non-zero if any answer is wrong. Everything lives in
a temporary directory and every process listens on 127.0.0.1 only.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import onnx
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton

from modelfn.localstack.state import StateDir
from modelfn.process.supervisor import Process, ProcessFailed, alive, descendants

EXAMPLES = Path(__file__).resolve().parent
MODELFN = [sys.executable, "-m", "modelfn.cli.main"]
REQUEST = json.loads((EXAMPLES / "requests" / "digits.json").read_text())
EXPECTED = json.loads((EXAMPLES / "requests" / "digits_expected.json").read_text())["label"]
IDLE_S = 4  # scale to zero after this long without requests (Knative's default is 60 s)
CANARY_REQUESTS = 400


def step(text: str) -> None:
    print(f"\n== {text}", flush=True)


def modelfn(*args: str, env: dict[str, str], quiet: bool = False) -> str:
    """Run a modelfn command as a user would; its stdout (stderr shown unless ``quiet``)."""
    print("$ modelfn " + " ".join(args), flush=True)
    done = subprocess.run([*MODELFN, *args], env=env, capture_output=True, text=True)
    if not quiet and done.stderr.strip():
        print("\n".join(f"  {line}" for line in done.stderr.strip().splitlines()), flush=True)
    if done.returncode != 0:
        raise SystemExit(f"modelfn {args[0]} failed ({done.returncode}):\n{done.stdout}"
                         f"{done.stderr}")
    return done.stdout


def retrained(work: Path) -> Path:
    """Version 2 of digits: the same weights in a new file, standing in for a retrained
    model (its answers must not change, so the demo can check every one)."""
    model = work / "digits-v2" / "digits"
    shutil.copytree(EXAMPLES / "models" / "digits", model)
    proto = onnx.load(str(model / "1" / "model.onnx"))
    proto.doc_string = "digits, retrained"
    onnx.save(proto, str(model / "1" / "model.onnx"))
    return model


def renamed(work: Path, name: str) -> Path:
    """digits under another name, for its own deployment (config.pbtxt names it too)."""
    model = work / name
    shutil.copytree(EXAMPLES / "models" / "digits", model)
    config = model / "config.pbtxt"
    config.write_text(config.read_text().replace('name: "digits"', f'name: "{name}"'))
    return model


def infer(client: httpx.Client, url: str, model: str) -> tuple[str, float]:
    """One checked JSON request: (the version that answered, seconds)."""
    started = time.perf_counter()
    answer = client.post(f"{url}/v2/models/{model}/infer", json=REQUEST)
    elapsed = time.perf_counter() - started
    if answer.status_code != 200:
        raise SystemExit(f"{model}: HTTP {answer.status_code}: {answer.text}")
    body = answer.json()
    labels = next(o for o in body["outputs"] if o["name"] == "label")["data"]
    if labels != EXPECTED:
        raise SystemExit(f"{model}: wrong labels {labels}, expected {EXPECTED}")
    return str(body["model_version"]), elapsed


def infer_binary(gateway: str, model: str) -> str:
    client = triton.InferenceServerClient(gateway.removeprefix("http://"))
    rows = np.array(REQUEST["inputs"][0]["data"], dtype=np.float32).reshape(4, 64)
    tensor = triton.InferInput("input", [4, 64], "FP32")
    tensor.set_data_from_numpy(rows, binary_data=True)
    result = client.infer(model, [tensor], outputs=[
        triton.InferRequestedOutput("label", binary_data=True),
        triton.InferRequestedOutput("probabilities", binary_data=True)])
    labels = result.as_numpy("label").ravel().tolist()
    if labels != EXPECTED:
        raise SystemExit(f"{model} (binary): wrong labels {labels}, expected {EXPECTED}")
    top = result.as_numpy("probabilities").max(axis=1).round(3).tolist()
    return f"labels {labels}, confidence {top}"


def infer_grpc(address: str, model: str) -> float:
    """One checked gRPC call (raw tensor contents): seconds."""
    client = triton_grpc.InferenceServerClient(address)
    rows = np.array(REQUEST["inputs"][0]["data"], dtype=np.float32).reshape(4, 64)
    tensor = triton_grpc.InferInput("input", [4, 64], "FP32")
    tensor.set_data_from_numpy(rows)
    try:
        started = time.perf_counter()
        result = client.infer(model, [tensor])
        elapsed = time.perf_counter() - started
    finally:
        client.close()
    labels = result.as_numpy("label").ravel().tolist()
    if labels != EXPECTED:
        raise SystemExit(f"{model} (gRPC): wrong labels {labels}, expected {EXPECTED}")
    return elapsed


def infer_images(gateway: str) -> str:
    """The example images as one request of encoded bytes (tritonclient, BYTES), each
    answer checked against the ensemble's expected labels."""
    expected = json.loads((EXAMPLES / "requests" / "digits_image_expected.json").read_text())
    files = sorted(expected["images"])
    images = [(EXAMPLES / "requests" / "digits_image" / name).read_bytes() for name in files]
    client = triton.InferenceServerClient(gateway.removeprefix("http://"))
    tensor = triton.InferInput("IMAGE", [len(images), 1], "BYTES")
    tensor.set_data_from_numpy(np.array(images, dtype=np.object_).reshape(-1, 1))
    result = client.infer("digits_image", [tensor])
    labels = result.as_numpy("LABEL").ravel().tolist()
    wanted = [expected["images"][name]["label"] for name in files]
    if labels != wanted:
        raise SystemExit(f"digits_image: labels {labels}, expected {wanted}")
    top = result.as_numpy("TOP")[0].tolist()
    sent = sum(map(len, images))
    return (f"{len(images)} images ({sent / 1024:.1f} KiB of PNG and JPEG) -> labels {labels}, "
            f"as expected; {files[0]}'s top 3: {[t.decode() for t in top]}")


def lambda_batching(gateway: str, callers: int = 32, each: int = 8) -> str:
    """A Lambda environment runs one request at a time, so the gateway batches for it:
    ``callers`` concurrent clients, every answer checked, invocations counted."""
    import asyncio

    import aiohttp

    def invocations() -> int:
        text = httpx.get(f"{gateway}/metrics").text
        return sum(int(float(line.rsplit(" ", 1)[1])) for line in text.splitlines()
                   if line.startswith('modelfn_gateway_invocations_total{model="digits-lambda"'))

    async def callers_at_once() -> None:
        async with aiohttp.ClientSession() as session:
            async def caller() -> None:
                for _ in range(each):
                    async with session.post(f"{gateway}/v2/models/digits-lambda/infer",
                                            json=REQUEST) as answer:
                        body = await answer.json()
                        labels = next(o for o in body["outputs"] if o["name"] == "label")
                        if answer.status != 200 or labels["data"] != EXPECTED:
                            raise SystemExit(f"digits-lambda, batched: HTTP {answer.status} "
                                             f"{body}")
            await asyncio.gather(*(caller() for _ in range(callers)))

    before = invocations()
    asyncio.run(callers_at_once())
    used = invocations() - before
    return (f"{callers} concurrent callers x {each} requests to digits-lambda: "
            f"{callers * each} answers, all correct, from {used} Lambda invocations "
            f"(the gateway batched {callers * each / max(used, 1):.1f} requests each)")


def platform_status(env: dict[str, str]) -> dict[str, Any]:
    out = subprocess.run([*MODELFN, "dev", "status", "--output", "json"], env=env,
                         capture_output=True, text=True, check=True).stdout
    doc: dict[str, Any] = json.loads(out)
    return doc


def instances(env: dict[str, str]) -> dict[str, int]:
    """Running instances per function: Knative revisions and Lambda function versions."""
    doc = platform_status(env)
    counts = {f"knative {r['name']}": int(r["instances"])
              for r in doc["knative"].get("revisions", [])}
    for function, versions in doc["lambda"].get("functions", {}).items():
        counts[f"lambda {function}"] = sum(int(v["environments"]) for v in versions.values())
    return counts


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="modelfn-demo-"))
    state = StateDir(work / "dev")
    env = {**os.environ, "MODELFN_DEV_DIR": str(state.path),
           "MODELFN_CACHE": str(work / "cache")}
    step("1. modelfn dev: S3, the Knative and Lambda APIs, scale-to-zero functions, the "
         "gateway")
    print(f"$ modelfn dev --idle {IDLE_S}s", flush=True)
    dev = Process([*MODELFN, "dev", "--idle", f"{IDLE_S}s"], name="modelfn dev",
                  env=env).start()
    try:
        dev.wait_ready(lambda: state.read_ready() is not None, timeout=120)
        env.update(state.read_env())  # what `set -a; . DIR/env` gives a shell
        story(env, work)
        step("9. stop: modelfn dev drains every function and exits")
        children = descendants(dev.pid)
        os.kill(dev.pid, signal.SIGTERM)  # as Ctrl-C would: modelfn dev stops the rest
        code = dev.wait(90)
        if code != 0:
            raise SystemExit(f"modelfn dev exited with {code}:\n{dev.tail()}")
        time.sleep(0.5)
        left = sorted(pid for pid in children if alive(pid))
        print(f"modelfn dev exited 0; of its {len(children)} processes, {len(left)} left")
        if left:
            raise SystemExit(f"processes outlived modelfn dev: {left}")
    except ProcessFailed as exc:
        raise SystemExit(exc.message) from exc
    finally:
        dev.stop(grace=30)
        shutil.rmtree(work, ignore_errors=True)
    print("\nmodelfn demo: every answer correct")


def story(env: dict[str, str], work: Path) -> None:
    gateway = env["MODELFN_GATEWAY"].rstrip("/")
    print(f"gateway {gateway}, model store {env['MODELFN_STORE']}")

    step("2. push digits versions 1 and 2 to the model store (S3)")
    modelfn("push", str(EXAMPLES / "models" / "digits"), env=env, quiet=True)
    modelfn("push", str(retrained(work)), env=env, quiet=True)
    modelfn("push", str(renamed(work, "digits-lambda")), env=env, quiet=True)
    modelfn("push", str(renamed(work, "digits-grpc")), env=env, quiet=True)
    print(modelfn("versions", "--store", env["MODELFN_STORE"], env=env), end="")

    step("3. deploy version 1: local Knative, a local Lambda function URL (AWS_IAM), and "
         "local Knative over gRPC (h2c)")
    knative_url = modelfn("deploy", "digits:1", "--target", "local", env=env).split()[-1]
    lambda_url = modelfn("deploy", "digits-lambda:1", "--target", "local", "--lambda",
                         env=env).split()[-1]
    grpc_url = modelfn("deploy", "digits-grpc:1", "--target", "local", "--protocol", "grpc",
                       env=env).split()[-1]
    print(f"digits        -> {knative_url}\ndigits-lambda -> {lambda_url}\n"
          f"digits-grpc   -> {grpc_url} (h2c)")
    grpc_gateway = env["MODELFN_GATEWAY_GRPC"]

    step("4. V2 requests through the gateway (one URL for every model)")
    with httpx.Client(timeout=60) as client:
        for model in ("digits", "digits-lambda"):
            version, _ = infer(client, gateway, model)
            print(f"JSON   {model:<14} -> labels {EXPECTED} from version {version}")
            print(f"binary {model:<14} -> {infer_binary(gateway, model)} (tritonclient)")
        infer_grpc(grpc_gateway, "digits-grpc")
        print(f"gRPC   {'digits-grpc':<14} -> labels {EXPECTED} (tritonclient.grpc at the "
              f"gateway's gRPC port {grpc_gateway})")
        warm = {m: [infer(client, gateway, m)[1] for _ in range(50)]
                for m in ("digits", "digits-lambda")}
        warm["digits-grpc"] = [infer_grpc(grpc_gateway, "digits-grpc") for _ in range(50)]

        print(lambda_batching(gateway))

        step("5. an ensemble: encoded images in, digits out (Python, ONNX, Python steps in one "
             "function)")
        for model in ("digits_preprocess", "digits_postprocess", "digits_image"):
            pushed = modelfn("push", str(EXAMPLES / "models" / model), env=env, quiet=True)
        print(pushed.strip().split("; ", 2)[-1])  # the versions the ensemble runs
        ensemble_url = modelfn("deploy", "digits_image", "--target", "local",
                               env=env).split()[-1]
        print(f"digits_image  -> {ensemble_url}")
        print(infer_images(gateway))

        step("6. a 10% canary of version 2, observed through the gateway, then promoted")
        modelfn("deploy", "digits:2", "--target", "local", "--traffic", "10", env=env)
        seen = [infer(client, gateway, "digits")[0] for _ in range(CANARY_REQUESTS)]
        share = seen.count("2") / len(seen)
        print(f"{CANARY_REQUESTS} requests: version 1 answered {seen.count('1')}, version 2 "
              f"{seen.count('2')} ({share:.1%}; 10% deployed)")
        if not 0.04 <= share <= 0.18:
            raise SystemExit(f"the observed split {share:.1%} is far from 10%")
        answer = client.post(f"{gateway}/v2/models/digits/versions/2/infer", json=REQUEST)
        print(f"pinned /v2/models/digits/versions/2 -> version "
              f"{answer.json()['model_version']}")
        modelfn("traffic", "digits", "1=0", "2=100", env=env)
        promoted = {infer(client, gateway, "digits")[0] for _ in range(50)}
        print(f"after the promotion, 50 requests answered by version(s) {sorted(promoted)}")
        if promoted != {"2"}:
            raise SystemExit("the promotion did not move all traffic to version 2")
        print(modelfn("status", "digits", env=env), end="")

        step(f"7. idle: the functions scale to zero ({IDLE_S} s without requests)")
        started = time.monotonic()
        while True:
            running = instances(env)
            if not any(running.values()):
                break
            if time.monotonic() - started > 120:
                raise SystemExit(f"still running after 120 s: {running}")
            time.sleep(1)
        print(f"after {time.monotonic() - started:.0f} s: " + ", ".join(
            f"{name} {count}" for name, count in sorted(running.items())) + " instances")

        step("8. one request wakes each function: the cold answer against the warm ones")
        for model in ("digits", "digits-lambda", "digits-grpc"):
            cold = (infer_grpc(grpc_gateway, model) if model == "digits-grpc"
                    else infer(client, gateway, model)[1])
            p50 = statistics.median(warm[model])
            print(f"{model:<14} cold {cold * 1000:7.1f} ms   warm p50 {p50 * 1000:5.2f} ms "
                  f"(through the gateway)")


if __name__ == "__main__":
    main()
