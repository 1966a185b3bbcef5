"""The V2 wire: the Open Inference Protocol's codec, tensors and adapters.

It stands on the engine (``modelfn.runtime``: arrays in, arrays out) and the network floor
(``modelfn.net``), and speaks KServe V2 over REST (``rest``) and gRPC (``grpc``) through
one protocol-neutral path (``dataplane``).
"""
