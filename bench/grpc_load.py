"""A closed-loop KServe V2 gRPC load generator, the gRPC twin of ``modelfn bench``.

    python bench/grpc_load.py HOST:PORT --model digits [-c 1,32] [--duration 8]
                              [--warmup 2] [--json out.json]

N workers on one ``grpc.aio`` channel (HTTP/2 streams), each sending its next
``ModelInfer`` when the previous one answers. The request is built once by tritonclient
(random inputs from the model's metadata, batch 1, ``raw_input_contents``) and sent as
pre-serialised bytes, and answers are not parsed: the client does no protobuf work per
request, so it is not what is measured. The average batch size comes from the server's
ModelStatistics at the start and the end of the window. Prints (and writes) one JSON row
per concurrency with the keys ``modelfn bench`` uses.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import time
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import tritonclient.grpc as tg
from tritonclient.grpc import service_pb2
from tritonclient.grpc._utils import _get_inference_request

from modelfn.client.bodies import random_inputs

INFER = "/inference.GRPCInferenceService/ModelInfer"
STATISTICS = "/inference.GRPCInferenceService/ModelStatistics"
OPTIONS = [("grpc.max_receive_message_length", 2**31 - 1),
           ("grpc.max_send_message_length", 2**31 - 1)]


def prepared_request(address: str, model: str) -> tuple[bytes, int]:
    """The serialised ModelInferRequest every worker sends, and its batch size (1)."""
    with tg.InferenceServerClient(address) as client:
        metadata = client.get_model_metadata(model, as_json=True)
        arrays = random_inputs({"inputs": [
            {"name": i["name"], "datatype": i["datatype"], "shape": [int(d) for d in i["shape"]]}
            for i in metadata["inputs"]]})
        inputs = []
        for name, array in arrays.items():
            tensor = tg.InferInput(name, list(array.shape), tg.np_to_triton_dtype(array.dtype))
            tensor.set_data_from_numpy(array)
            inputs.append(tensor)
        client.infer(model, inputs)  # it works before it is measured
    request = _get_inference_request(
        model_name=model, inputs=inputs, model_version="", request_id="", outputs=None,
        sequence_id=0, sequence_start=False, sequence_end=False, priority=0, timeout=None,
        parameters=None)
    return request.SerializeToString(), 1


async def _counts(channel: grpc.aio.Channel, model: str) -> tuple[int, int]:
    call = channel.unary_unary(STATISTICS)
    request = service_pb2.ModelStatisticsRequest(name=model).SerializeToString()
    reply = service_pb2.ModelStatisticsResponse.FromString(await call(request))
    return (sum(s.inference_count for s in reply.model_stats),
            sum(s.execution_count for s in reply.model_stats))


async def run(address: str, model: str, body: bytes, concurrency: int, duration: float,
              warmup: float) -> dict[str, Any]:
    clock = time.perf_counter
    latencies: list[float] = []
    errors = 0
    first_error: str | None = None
    async with grpc.aio.insecure_channel(address, options=OPTIONS) as channel:
        infer = channel.unary_unary(INFER)
        start = clock() + warmup
        end = start + duration

        async def worker() -> None:
            nonlocal errors, first_error
            while (sent := clock()) < end:
                try:
                    await infer(body)
                except grpc.aio.AioRpcError as exc:
                    if sent >= start:
                        errors += 1
                        first_error = first_error or f"{exc.code()}: {exc.details()}"
                    continue
                done = clock()
                if start <= done <= end:
                    latencies.append(done - sent)

        async def sample() -> tuple[tuple[int, int], tuple[int, int], float]:
            await asyncio.sleep(max(0.0, start - clock()))
            before, cpu = await _counts(channel, model), _own_cpu()
            await asyncio.sleep(max(0.0, end - clock()))
            after = await _counts(channel, model)
            return before, after, (_own_cpu() - cpu) / duration

        sampler = asyncio.create_task(sample())
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        before, after, client_cpu = await sampler
    ms = np.asarray(latencies) * 1e3
    rows, execs = after[0] - before[0], after[1] - before[1]
    return {
        "protocol": "grpc",
        "model": model,
        "concurrency": concurrency,
        "duration_s": duration,
        "requests": len(ms),
        "errors": errors,
        "first_error": first_error,
        "req_per_s": len(ms) / duration,
        "p50_ms": float(np.percentile(ms, 50)) if len(ms) else None,
        "p90_ms": float(np.percentile(ms, 90)) if len(ms) else None,
        "p99_ms": float(np.percentile(ms, 99)) if len(ms) else None,
        "avg_batch_size": rows / execs if execs else None,
        "client_cpu": client_cpu,
        "body_bytes": len(body),
    }


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("address", help="HOST:PORT of the gRPC server")
    parser.add_argument("--model", "-m", required=True)
    parser.add_argument("-c", "--concurrency", default="1,32")
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--body", type=Path,
                        help="send this serialised ModelInferRequest instead of asking the "
                             "server for the model's metadata and building one")
    parser.add_argument("--save-body", type=Path, help="write the request sent here")
    args = parser.parse_args()
    body = (args.body.read_bytes() if args.body
            else prepared_request(args.address, args.model)[0])
    if args.save_body:
        args.save_body.write_bytes(body)
    rows = [asyncio.run(run(args.address, args.model, body, int(c), args.duration, args.warmup))
            for c in args.concurrency.split(",")]
    text = json.dumps(rows, indent=2)
    if args.json:
        args.json.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
