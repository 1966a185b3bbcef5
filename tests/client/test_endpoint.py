"""A V2 endpoint as the client sees it: URLs joined to a base that may carry a path and a
query, and error answers (V2's ``{"error": ...}`` or a proxy's page) as one short line."""

from __future__ import annotations

import pytest

from modelfn.client.endpoint import endpoint_url, error_from_answer, infer_url, model_url


@pytest.mark.parametrize(("base", "want"), [
    ("http://h:8000", "http://h:8000/v2/models/m/versions/2/infer"),
    ("http://h:8000/", "http://h:8000/v2/models/m/versions/2/infer"),
    ("http://h/gw/?token=a%2Fb&x=1", "http://h/gw/v2/models/m/versions/2/infer?token=a%2Fb&x=1"),
    ("http://h?x=1#frag", "http://h/v2/models/m/versions/2/infer?x=1"),
    ("", "/v2/models/m/versions/2/infer"),  # a path alone, as bench/run.py asks for
])
def test_v2_paths_join_the_bases_path_and_keep_its_query(base: str, want: str) -> None:
    assert infer_url(base, "m", "2") == want
    assert model_url("http://h/?x=1", "m") == "http://h/v2/models/m?x=1"
    assert endpoint_url("http://h/p?x=1", "/metrics") == "http://h/p/metrics?x=1"


@pytest.mark.parametrize(("status", "body", "want"), [
    (404, b'{"error": "Request for unknown model"}', "HTTP 404: Request for unknown model"),
    (500, b'{"error": "line one\\n  line two"}', "HTTP 500: line one line two"),
    (502, b"<html>\n<head><title>502 Bad Gateway</title></head>\n<body><h1>502</h1></body>",
     "HTTP 502: 502 Bad Gateway"),
    (503, b"<html><body>\n<p>Service &amp; more</p></body></html>", "HTTP 503: Service & more"),
    (500, b"Traceback (most recent call last):\n  File x\n", "HTTP 500: Traceback (most "
                                                            "recent call last):"),
    (500, b'["x"]', 'HTTP 500: ["x"]'),
    (504, b"", "HTTP 504: Gateway Timeout"),
    (599, b"", "HTTP 599: no message"),
])
def test_an_error_answer_is_one_short_line(status: int, body: bytes, want: str) -> None:
    error = error_from_answer(status, body)
    assert error.message == want and error.status_code == status


def test_a_long_error_is_cut() -> None:
    message = error_from_answer(500, b'{"error": "' + b"x" * 5000 + b'"}').message
    assert len(message) < 320 and message.endswith("...")
