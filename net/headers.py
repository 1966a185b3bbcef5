"""The one hop-by-hop set: HTTP headers that describe a connection, not the message.

A proxy never forwards them (RFC 9110 7.6.1). Body framing is apart (``FRAMING``): a proxy
that copies a body byte for byte forwards the framing with it, one that reads the body and
sends it on frames it anew. Each user adds what it strips on top, named for what it adds.
"""

from __future__ import annotations

#: connection-specific headers (RFC 9110 7.6.1, RFC 7230 6.1), lower case
HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-connection", "proxy-authenticate",
    "proxy-authorization", "te", "trailer", "upgrade",
})
#: the headers that frame a message's body (RFC 9112 6)
FRAMING = frozenset({"content-length", "transfer-encoding"})


def latin1(names: frozenset[str]) -> frozenset[bytes]:
    """``names`` as raw header names, for the servers that read heads as bytes."""
    return frozenset(name.encode("latin-1") for name in names)
