"""The network floor: what the function, the gateway and the local platform share on the wire.

The HTTP edge (``edge``: uvicorn's protocol, bounded, with a fast-path hook an application
registers, ``fast_path``), busy polling, HTTP header rules, gRPC status and the gRPC relay.
It stands on the engine's errors and counters (``modelfn.runtime``) and under the V2 wire
(``modelfn.protocol``) and every server and proxy of modelfn; it imports none of them.
"""
