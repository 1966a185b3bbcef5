"""Compressed infer bodies, as Triton's HTTP server takes and gives them.

A request may come with ``Content-Encoding: gzip`` or ``deflate`` (tritonclient's
``request_compression_algorithm``). Both are inflated as Triton inflates them (zlib's
``inflateInit2`` with window bits 15 | 32: a gzip or a zlib stream, whichever the header
says; "deflate" is zlib-wrapped, RFC 9110 8.4.1.2), and the inflated body is held to the
same limit as a plain one, checked while it inflates: a small body that would inflate past
it (a decompression bomb) is refused (413) with no more than the limit inflated. A stream
that is not gzip or zlib, or ends early, is the request's 400; another coding is 415, its
answer naming the codings served in ``Accept-Encoding`` (RFC 7694).
``Inference-Header-Content-Length`` counts the inflated body, as in Triton.

An answer is compressed when ``Accept-Encoding`` asks for it, chosen as Triton chooses:
the highest ``q`` among ``identity``, ``gzip`` and ``deflate``, the first listed on a tie.
"""

from __future__ import annotations

import zlib

from modelfn.runtime.errors import InvalidInput, ModelfnError

#: what a request's Content-Encoding may be, lower case (besides identity)
CODINGS = ("gzip", "deflate")
ACCEPTED = ", ".join(CODINGS)
#: zlib's window bits that read a gzip or a zlib header, whichever comes (Triton's)
_EITHER = 15 | 32
_WBITS = {"gzip": 31, "deflate": 15}
#: Accept-Encoding values already read (clients send the same one every time); at most
_CHOSEN_MAX = 256
_chosen: dict[bytes, str | None] = {}


class UnsupportedCoding(ModelfnError):
    """A request body in a content coding the server does not read."""

    status_code = 415

    def __init__(self, coding: str) -> None:
        super().__init__(f"Content-Encoding '{coding}' is not supported: send the body "
                         f"uncompressed or as {' or '.join(CODINGS)}")
        self.headers = {"accept-encoding": ACCEPTED}


class InflatedTooLarge(ModelfnError):
    """A compressed body that inflates past the body limit (a decompression bomb, or a
    large request): refused once the limit is reached, the rest never inflated."""

    status_code = 413

    def __init__(self, coding: str, sent: int, limit: int, what: str) -> None:
        super().__init__(f"The {coding} request body of {sent} bytes inflates past the limit "
                         f"of {limit} bytes for {what}; a compressed body is held to the "
                         "limit once inflated")
        self.limit = limit


class CorruptBody(InvalidInput):
    def __init__(self, coding: str, why: str) -> None:
        super().__init__(f"the request body is not valid {coding} data: {why}")


def request_coding(value: bytes | str) -> str | None:
    """The coding a Content-Encoding header names (None: identity); 415 unless served."""
    text = (value.decode("latin-1") if isinstance(value, bytes) else value).strip().lower()
    if text in ("", "identity"):
        return None
    if text not in CODINGS:
        raise UnsupportedCoding(text)
    return text


def inflate(body: bytes | bytearray, coding: str, limit: int, what: str = "a request body"
            ) -> bytes:
    """``body`` inflated, at most ``limit`` bytes of it (``InflatedTooLarge`` past that)."""
    inflater = zlib.decompressobj(_EITHER)
    try:
        data = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise CorruptBody(coding, str(exc)) from None
    if len(data) > limit:
        raise InflatedTooLarge(coding, len(body), limit, what)
    if not inflater.eof:
        raise CorruptBody(coding, "the stream ends before its end")
    if inflater.unused_data:
        raise CorruptBody(coding, f"{len(inflater.unused_data)} bytes follow the end of the "
                                  "stream")
    return data


def response_coding(accept: bytes) -> str | None:
    """The coding an answer gets for an ``Accept-Encoding`` header (None: identity),
    chosen as Triton chooses; remembered per header value."""
    try:
        return _chosen[accept]
    except KeyError:
        pass
    chosen, weight = None, 0.0
    for item in accept.decode("latin-1").split(","):
        name, _, params = item.partition(";")
        name = name.strip().lower()
        if name not in ("identity", *CODINGS):
            continue
        q = 1.0
        params = params.strip().lower()
        if params.startswith("q="):
            try:
                q = float(params[2:])
            except ValueError:
                continue
        if q > weight:
            chosen, weight = (None if name == "identity" else name), q
    if len(_chosen) < _CHOSEN_MAX and len(accept) <= 256:
        _chosen[accept] = chosen
    return chosen


def compress(content: bytes, coding: str) -> bytes:
    """``content`` as ``coding``: a gzip stream, or a zlib stream for deflate."""
    compressor = zlib.compressobj(wbits=_WBITS[coding])
    return compressor.compress(content) + compressor.flush()
