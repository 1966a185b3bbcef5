"""The network floor: what the function, the gateway and the local platform share on the wire.

It stands on the V2 wire (``modelfn.runtime``) and under every server and proxy of
modelfn; it imports none of them.
"""
