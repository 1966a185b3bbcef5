"""The gRPC relay's reading of a request: the model and version at its head, nothing more."""

from __future__ import annotations

import pytest

from modelfn.net.grpc_relay import BadMessage, request_model
from modelfn.protocol.grpc import inference_pb2 as pb


def test_request_model_reads_only_the_head_of_a_message() -> None:
    request = pb.ModelInferRequest(model_name="digits", model_version="3", id="x")
    request.raw_input_contents.append(b"\x00" * 1024)
    assert request_model(request.SerializeToString()) == ("digits", "3")
    assert request_model(pb.ModelReadyRequest(name="m").SerializeToString()) == ("m", "")
    assert request_model(b"") == ("", "")
    for garbage in (b"\x0a\xff\xff", b"\x0f", b"\x0a\x05ab"):
        with pytest.raises(BadMessage):
            request_model(garbage)
