"""Compressed request bodies and answers, as Triton's HTTP server reads and writes them."""

from __future__ import annotations

import gzip
import zlib

import pytest

from modelfn.protocol.body_limits import BodyLimits
from modelfn.protocol.content_coding import (
    CorruptBody,
    InflatedTooLarge,
    UnsupportedCoding,
    compress,
    inflate,
    request_coding,
    response_coding,
)

BODY = b'{"inputs": []}' * 100


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
def test_gzip_and_zlib_streams_inflate_under_either_name(coding: str) -> None:
    """Triton inflates with window bits 15 | 32: either header, whatever the name says."""
    for stream in (gzip.compress(BODY), zlib.compress(BODY)):
        assert inflate(stream, coding, len(BODY)) == BODY


def test_a_bomb_is_refused_once_the_limit_is_inflated() -> None:
    bomb = zlib.compress(b"\0" * (64 << 20), 9)  # 64 MiB of zeros in some 64 KiB
    with pytest.raises(InflatedTooLarge) as info:
        inflate(bomb, "deflate", 1 << 20)
    assert info.value.status_code == 413
    assert info.value.message == (
        f"The deflate request body of {len(bomb)} bytes inflates past the limit of 1048576 "
        "bytes for a request body; a compressed body is held to the limit once inflated")
    assert inflate(zlib.compress(b"x" * 100), "deflate", 100) == b"x" * 100  # at the limit


@pytest.mark.parametrize(("stream", "why"), [
    (b"plain text, not compressed", "Error -3 while decompressing data: incorrect header check"),
    (gzip.compress(BODY)[:-12], "the stream ends before its end"),
    (gzip.compress(BODY) + b"junk", "4 bytes follow the end of the stream"),
])
def test_a_corrupt_stream_is_the_requests_400(stream: bytes, why: str) -> None:
    with pytest.raises(CorruptBody) as info:
        inflate(stream, "gzip", 1 << 20)
    assert info.value.status_code == 400
    assert info.value.message == f"the request body is not valid gzip data: {why}"


def test_the_codings_served_and_the_others() -> None:
    assert request_coding(b"gzip") == "gzip" and request_coding("Deflate ") == "deflate"
    assert request_coding(b"identity") is None and request_coding(b"") is None
    with pytest.raises(UnsupportedCoding) as info:
        request_coding(b"br")
    assert info.value.status_code == 415
    assert info.value.message == ("Content-Encoding 'br' is not supported: send the body "
                                  "uncompressed or as gzip or deflate")
    assert info.value.headers == {"accept-encoding": "gzip, deflate"}


@pytest.mark.parametrize(("accept", "chosen"), [
    (b"gzip", "gzip"),
    (b"deflate", "deflate"),
    (b"gzip, deflate", "gzip"),  # a tie: the first listed, as Triton picks
    (b"deflate, gzip", "deflate"),
    (b"gzip;q=0.5, deflate;q=0.8", "deflate"),
    (b"identity, gzip", None),
    (b"br, zstd", None),
    (b"gzip;q=0", None),
    (b"gzip;q=oops, deflate;q=0.1", "deflate"),
    (b"*", None),
])
def test_the_answers_coding_is_chosen_as_triton_chooses(accept: bytes,
                                                         chosen: str | None) -> None:
    assert response_coding(accept) == chosen


@pytest.mark.parametrize(("coding", "decompress"), [("gzip", gzip.decompress),
                                                     ("deflate", zlib.decompress)])
def test_answers_are_gzip_or_zlib_streams(coding: str, decompress: object) -> None:
    assert decompress(compress(BODY, coding)) == BODY  # type: ignore[operator]


def test_an_all_json_body_is_held_to_the_json_limit_once_inflated() -> None:
    limits = BodyLimits.of(1000, 100)
    stream = gzip.compress(b" " * 500)
    with pytest.raises(InflatedTooLarge, match="limit of 100 bytes for a request that is all "
                                               "JSON"):
        limits.inflated(stream, "gzip", None)
    assert limits.inflated(stream, "gzip", 10) == b" " * 500  # binary: the body's limit
    assert limits.inflated(stream, None, None) is stream
