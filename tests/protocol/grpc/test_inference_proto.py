"""Our .proto against the one tritonclient.grpc is built from: every message, field, enum
value and RPC of ours must be Triton's, with the same number and type, or clients break."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from google.protobuf import descriptor_pool
from tritonclient.grpc import model_config_pb2, service_pb2

from modelfn.protocol.grpc import inference_pb2 as pb

if TYPE_CHECKING:
    from collections.abc import Iterator

    from google.protobuf.descriptor import Descriptor, EnumDescriptor

TRITON = descriptor_pool.Default()
assert service_pb2.DESCRIPTOR and model_config_pb2.DESCRIPTOR  # loaded into TRITON


def _messages(descriptor: Descriptor) -> Iterator[Descriptor]:
    yield descriptor
    for nested in descriptor.nested_types:
        yield from _messages(nested)


OURS = [m for top in pb.DESCRIPTOR.message_types_by_name.values() for m in _messages(top)]
ENUMS: list[EnumDescriptor] = [
    *pb.DESCRIPTOR.enum_types_by_name.values(),
    *(e for m in OURS for e in m.enum_types),
]


def test_our_stubs_live_in_their_own_pool() -> None:
    assert pb.DESCRIPTOR.pool is not TRITON
    assert pb.DESCRIPTOR.package == "inference"


@pytest.mark.parametrize("ours", OURS, ids=lambda m: m.full_name)
def test_every_field_is_tritons(ours: Descriptor) -> None:
    theirs = TRITON.FindMessageTypeByName(ours.full_name)
    for field in ours.fields:
        twin = theirs.fields_by_name.get(field.name)
        assert twin is not None, f"{ours.full_name}.{field.name} is not Triton's"
        assert (field.number, field.type, field.is_repeated) == (
            twin.number, twin.type, twin.is_repeated), f"{ours.full_name}.{field.name}"
        if field.message_type is not None:
            assert field.message_type.full_name == twin.message_type.full_name
        if field.enum_type is not None:
            assert field.enum_type.full_name == twin.enum_type.full_name
        if field.containing_oneof is not None:
            assert field.containing_oneof.name == twin.containing_oneof.name


@pytest.mark.parametrize("ours", ENUMS, ids=lambda e: e.full_name)
def test_every_enum_value_is_tritons(ours: EnumDescriptor) -> None:
    theirs = TRITON.FindEnumTypeByName(ours.full_name)
    assert {v.name: v.number for v in ours.values} == {
        v.name: v.number for v in theirs.values if v.name in ours.values_by_name}


def test_the_v2_messages_are_complete() -> None:
    """The protocol's own messages have every field; only ModelConfig is a subset."""
    for name in ("ModelInferRequest", "ModelInferResponse", "InferTensorContents",
                 "InferParameter", "ModelMetadataResponse", "ModelStatistics",
                 "InferStatistics", "RepositoryIndexResponse"):
        ours = pb.DESCRIPTOR.message_types_by_name[name]
        theirs = TRITON.FindMessageTypeByName(f"inference.{name}")
        missing = set(theirs.fields_by_name) - set(ours.fields_by_name)
        assert missing <= {"memory_usage", "response_stats"}, f"{name} lacks {missing}"


def test_every_rpc_is_tritons() -> None:
    ours = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    theirs = TRITON.FindServiceByName("inference.GRPCInferenceService")
    assert ours.full_name == "inference.GRPCInferenceService"
    for method in ours.methods:
        twin = theirs.methods_by_name[method.name]
        assert method.input_type.full_name == twin.input_type.full_name
        assert method.output_type.full_name == twin.output_type.full_name
    assert {m.name for m in ours.methods} == {
        "ServerLive", "ServerReady", "ModelReady", "ServerMetadata", "ModelMetadata",
        "ModelInfer", "ModelConfig", "ModelStatistics", "RepositoryIndex"}
