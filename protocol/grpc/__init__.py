"""KServe V2 over gRPC: ``inference.GRPCInferenceService`` on the runtime's repository.

Importing this package imports nothing of grpcio: only ``server``, ``service`` and
``codec`` do, so a process that serves REST alone never pays for it.
"""
