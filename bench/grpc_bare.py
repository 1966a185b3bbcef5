"""The ceiling of grpcio's asyncio server on this machine: ModelInfer answered with canned
bytes, no decoding, no model, on the same loop (uvloop) modelfn serves gRPC on.

    python bench/grpc_bare.py PORT

``bench/grpc_vs_rest.py`` drives it with the same load generator as modelfn's gRPC
server: what modelfn's server gets below it is modelfn's own cost per request.
"""

from __future__ import annotations

import sys

import grpc
from tritonclient.grpc import service_pb2

SERVICE = "inference.GRPCInferenceService"
#: a digits answer: label [1,1] INT64 and probabilities [1,10] FP32, raw
REPLY = service_pb2.ModelInferResponse(
    model_name="digits", model_version="1",
    outputs=[service_pb2.ModelInferResponse.InferOutputTensor(name="label", datatype="INT64",
                                                               shape=[1]),
             service_pb2.ModelInferResponse.InferOutputTensor(name="probabilities",
                                                               datatype="FP32", shape=[1, 10])],
    raw_output_contents=[bytes(8), bytes(40)]).SerializeToString()
STATS = service_pb2.ModelStatisticsResponse().SerializeToString()


async def infer(request: bytes, context: object) -> bytes:
    return REPLY


async def statistics(request: bytes, context: object) -> bytes:
    return STATS


async def serve(port: int) -> None:
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {
        "ModelInfer": grpc.unary_unary_rpc_method_handler(infer),
        "ModelStatistics": grpc.unary_unary_rpc_method_handler(statistics),
    }),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


if __name__ == "__main__":
    import uvloop

    uvloop.run(serve(int(sys.argv[1])))
