"""modelfn on a GPU against raw onnxruntime with the same providers, in one run.

    python bench/gpu.py [--out DIR] [--duration 8] [--settings cuda,cuda-unpadded,trt-fp16]

For each setting (the CUDA provider with one or two instances, with modelfn's default
padding of batches to 1 or 32 rows, without padding, or padded to 1, 8, 16 or 32 rows; the
TensorRT provider at FP32 or FP16 in front of it, when that provider loads):

1. raw: an in-process session built from the same config by modelfn's own
   ``session_settings`` (same providers, same options), fed from host memory through IO
   binding exactly as modelfn's backend feeds it, back-to-back at batch 1, 8, 16 and 32;
2. modelfn: ``modelfn serve`` of a one-model repository (``KIND_GPU``, ``max_batch_size``
   32, dynamic batching): its cold start by phase from its ready line, the providers its
   session really took (its log), then ``modelfn bench --binary`` at c=1 and c=32 from a
   client process of its own, with the server's average batch size from ``/metrics``.

The model is the ResNet-18-style CNN of ``make_cnn.py``, generated into ``--out``. Every
figure goes to ``gpu.json`` and a table to ``gpu.md`` there; the table is printed last.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import make_cnn  # noqa: E402

BATCHES = (1, 8, 16, 32)
_PARAMETER = 'parameters {{ key: "padded_batch_sizes" value: {{ string_value: "{}" }} }}\n'
CONCURRENCY = (1, 32)

#: setting -> (instances, the optimization block of config.pbtxt)
SETTINGS: dict[str, tuple[int, str]] = {
    "cuda": (1, ""),  # modelfn's default on a GPU: batches padded to 1 or max_batch_size rows
    "cuda-unpadded": (1, _PARAMETER.format("none")),  # every batch at its own size
    "cuda-buckets": (1, _PARAMETER.format("1,8,16,32")),
    "cuda-x2": (2, ""),
    "trt-fp32": (1, 'optimization { execution_accelerators { gpu_execution_accelerator: [\n'
                    '  { name: "tensorrt" parameters { key: "precision_mode" value: "FP32" }\n'
                    '    parameters { key: "trt_engine_cache_enable" value: "1" } } ] } }\n'),
    "trt-fp16": (1, 'optimization { execution_accelerators { gpu_execution_accelerator: [\n'
                    '  { name: "tensorrt" parameters { key: "precision_mode" value: "FP16" }\n'
                    '    parameters { key: "trt_engine_cache_enable" value: "1" } } ] } }\n'),
}
_PROVIDERS = re.compile(r"model cnn: onnxruntime runs it on \[([^\]]*)\]")
_READY = re.compile(r"ready: .*\(cold start ([^)]*)\)")


def config_text(setting: str) -> str:
    instances, optimization = SETTINGS[setting]
    return (
        'name: "cnn"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 32\n'
        'input [{ name: "input" data_type: TYPE_FP32 dims: [3, 224, 224] }]\n'
        'output [{ name: "logits" data_type: TYPE_FP32 dims: [1000] }]\n'
        "dynamic_batching { }\n"
        f"instance_group [{{ count: {instances} kind: KIND_GPU }}]\n" + optimization
    )


def repository(out: Path, setting: str, onnx_bytes: bytes) -> Path:
    root = out / "repos" / setting
    (root / "cnn" / "1").mkdir(parents=True, exist_ok=True)
    (root / "cnn" / "1" / "model.onnx").write_bytes(onnx_bytes)
    (root / "cnn" / "config.pbtxt").write_text(config_text(setting))
    return root


def raw(model: Path, setting: str, duration: float) -> dict[str, Any]:
    """Back-to-back runs of a session with modelfn's providers and IO binding."""
    import onnxruntime as ort

    from modelfn.runtime.backends.onnxruntime import _session_options, session_settings
    from modelfn.runtime.config_file import parse_config

    settings = session_settings(parse_config(config_text(setting)))
    started = time.perf_counter()
    session = ort.InferenceSession(
        str(model), _session_options(settings),
        providers=[name for name, _ in settings.providers],
        provider_options=[options for _, options in settings.providers])
    rng = np.random.default_rng(0)
    result: dict[str, Any] = {"providers": session.get_providers(), "batches": {}}
    for batch in BATCHES:
        x = rng.standard_normal((batch, 3, 224, 224), dtype=np.float32)
        binding = session.io_binding()
        binding.bind_cpu_input("input", x)
        binding.bind_output("logits", "cpu")
        first = time.perf_counter()
        session.run_with_iobinding(binding)  # the first run of a shape builds / searches
        first_s = time.perf_counter() - first
        for _ in range(3):
            session.run_with_iobinding(binding)
        runs, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < duration / len(BATCHES):
            binding = session.io_binding()
            binding.bind_cpu_input("input", x)
            binding.bind_output("logits", "cpu")
            session.run_with_iobinding(binding)
            binding.copy_outputs_to_cpu()
            runs += 1
        result["batches"][batch] = {"rows_per_s": runs * batch / elapsed,
                                    "ms_per_run": elapsed / runs * 1e3,
                                    "first_run_s": first_s}
    result["session_s"] = time.perf_counter() - started
    return result


def serve(root: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "modelfn.cli.main", "serve", str(root),
         "--host", "127.0.0.1", "--port", str(port)],
        stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)


def wait_ready(proc: subprocess.Popen[bytes], log: Path, timeout: float) -> float:
    import httpx

    start = time.perf_counter()
    while time.perf_counter() - start < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"modelfn serve exited {proc.returncode}:\n{log.read_text()}")
        if _READY.search(log.read_text(errors="replace")):
            port = proc.args[proc.args.index("--port") + 1]  # type: ignore[index,union-attr]
            try:  # the ready line comes just before uvicorn listens
                if httpx.get(f"http://127.0.0.1:{port}/v2/health/ready").status_code == 200:
                    return time.perf_counter() - start
            except httpx.HTTPError:
                pass
        time.sleep(0.05)
    raise RuntimeError(f"modelfn serve not ready in {timeout} s:\n{log.read_text()}")


def modelfn(root: Path, out: Path, setting: str, port: int, duration: float) -> dict[str, Any]:
    log = out / f"serve-{setting}.log"
    launched = time.perf_counter()
    proc = serve(root, port, log)
    try:
        ready_s = wait_ready(proc, log, timeout=600)
        text = log.read_text(errors="replace")
        phases = dict(part.split("=") for part in _READY.search(text).group(1).split())  # type: ignore[union-attr]
        took = _PROVIDERS.search(text)
        result: dict[str, Any] = {
            "ready_s": ready_s,
            "phases": {k: float(v.rstrip("s")) for k, v in phases.items()},
            "providers": [p.strip(" '") for p in took.group(1).split(",")] if took else None,
            "launch_to_ready_s": time.perf_counter() - launched,
        }
        report = out / f"bench-{setting}.json"
        subprocess.run(
            [sys.executable, "-m", "modelfn.cli.main", "bench", f"http://127.0.0.1:{port}",
             "-m", "cnn", "--binary", "-c", ",".join(map(str, CONCURRENCY)),
             "--duration", str(duration), "--warmup", "2", "--json", str(report)],
            check=True, timeout=300)
        result["load"] = json.loads(report.read_text())
        return result
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=HERE / ".work" / "gpu")
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--settings", default="cuda,cuda-unpadded,cuda-buckets,cuda-x2,trt-fp16")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    onnx_bytes = make_cnn.build().SerializeToString()
    results: dict[str, Any] = {"gpu": gpu_line(), "settings": {}}
    for index, setting in enumerate(args.settings.split(",")):
        root = repository(args.out, setting, onnx_bytes)
        entry: dict[str, Any] = {}
        try:
            entry["raw"] = raw(root / "cnn" / "1" / "model.onnx", setting, args.duration)
            entry["modelfn"] = modelfn(root, args.out, setting, 8600 + index, args.duration)
        except Exception as exc:  # one setting's failure is recorded, the others still run
            entry["error"] = f"{type(exc).__name__}: {exc}"[-2000:]
        results["settings"][setting] = entry
        (args.out / "gpu.json").write_text(json.dumps(results, indent=1, default=str))
        print(f"{setting}: done", flush=True)
    table = report(results)
    (args.out / "gpu.md").write_text(table)
    print(table)


def gpu_line() -> str:
    try:
        return subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30).stdout.strip()
    except OSError:
        return "no nvidia-smi"


def report(results: dict[str, Any]) -> str:
    lines = [f"GPU: {results['gpu']}", "",
             "| setting | providers (raw / modelfn) | raw rows/s b1 / b8 / b16 / b32 "
             "| modelfn c=1 rows/s, p50 ms | modelfn c=32 rows/s, p50 ms, batch | c=32 ÷ raw b32 "
             "| cold start (phases) |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for setting, entry in results["settings"].items():
        if "error" in entry:
            lines.append(f"| {setting} | failed: {entry['error'][:300]} | | | | | |")
            continue
        raw_b = entry["raw"]["batches"]
        mf = entry["modelfn"]
        loads = {row["concurrency"]: row for row in mf["load"]}
        one, many = loads.get(1, {}), loads.get(32, {})
        ratio = many.get("rows_per_s", 0) / raw_b[32]["rows_per_s"]
        phases = ", ".join(f"{k} {v:.2f}" for k, v in mf["phases"].items())
        lines.append(
            f"| {setting} | {'+'.join(p[:-17] for p in entry['raw']['providers'])} / "
            f"{'+'.join(p[:-17] for p in mf['providers'] or ['?'])} "
            f"| {' / '.join(format(raw_b[b]['rows_per_s'], '.0f') for b in BATCHES)} "
            f"| {one.get('rows_per_s', 0):.0f}, {one.get('p50_ms') or 0:.2f} "
            f"| {many.get('rows_per_s', 0):.0f}, {many.get('p50_ms') or 0:.2f}, "
            f"{many.get('avg_batch_size') or 0:.1f} | {ratio:.2f}× "
            f"| {mf['ready_s']:.2f} s ({phases}) |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
