"""What a model's warmup may cost it: a ``model_warmup`` sample that fails is the model's
load failure, naming both; modelfn's own implicit warmup failing (Triton's simple_string
refuses its empty strings) is a warning, and the model serves. ``input_data_file`` is read
in Triton's format: one row, raw tensor bytes, or for BYTES length-prefixed elements."""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

import numpy as np
import pytest
from onnx import TensorProto
from onnx_models import add_sub_graph, save, simple_graph

from modelfn.runtime.backends import BACKENDS
from modelfn.runtime.backends.onnxruntime import OnnxRuntimeBackend
from modelfn.runtime.errors import BackendError, ConfigError
from modelfn.runtime.repository import Repository
from modelfn.runtime.warmup_data import bytes_elements

if TYPE_CHECKING:
    from pathlib import Path

    from modelfn.runtime.batch_request import RequestContext

STRING_CONFIG = """name: "simple_string"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_STRING dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_STRING dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_STRING dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_STRING dims: [ 16 ] }
]
"""


def _sample(inputs: str, batch_size: int = 2) -> str:
    return (f'model_warmup [{{ name: "numbers" batch_size: {batch_size} count: 1\n'
            f"  inputs {{ key: \"INPUT0\" value: {{ data_type: TYPE_STRING dims: [ 16 ] "
            f"{inputs} }} }}\n"
            f"  inputs {{ key: \"INPUT1\" value: {{ data_type: TYPE_STRING dims: [ 16 ] "
            f"{inputs} }} }}\n}}]\n")


def _serialized(elements: list[bytes]) -> bytes:
    return b"".join(struct.pack("<I", len(e)) + e for e in elements)


def _simple_string(root: Path, extra: str = "") -> Path:
    model = root / "simple_string"
    save(model, add_sub_graph(TensorProto.STRING, ["N", 16], TensorProto.INT32),
         config=STRING_CONFIG + extra)
    return model


async def test_an_implicit_warmup_the_model_refuses_is_a_warning_and_it_serves(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _simple_string(tmp_path)
    save(tmp_path / "simple", simple_graph())
    repo = Repository(tmp_path)
    repo.load()
    try:
        model = repo.get("simple_string")
        assert model.ready and model.inline_rows == 0  # no timings: the worker thread
        assert repo.get("simple").ready
        (warning,) = [r for r in caplog.records if r.levelname == "WARNING"]
        assert warning.getMessage().startswith(
            "model simple_string: modelfn's own warmup (zeros and empty strings at each "
            "batch size; the config has no model_warmup) failed, so it serves without batch "
            "timings, every batch on a worker thread: ")
        numbers = np.array([[str(i) for i in range(16)]], dtype=object)
        ones = np.full((1, 16), "1", dtype=object)
        out = await model.infer({"INPUT0": numbers, "INPUT1": ones}, 1)
        assert [int(v) for v in out["OUTPUT0"][0]] == [i + 1 for i in range(16)]
        assert [int(v) for v in out["OUTPUT1"][0]] == [i - 1 for i in range(16)]
    finally:
        await repo.stop()


def test_a_failing_model_warmup_sample_fails_the_load_naming_model_and_sample(
        tmp_path: Path) -> None:
    _simple_string(tmp_path, _sample("zero_data: true"))
    with pytest.raises(BackendError) as info:
        Repository(tmp_path).load()
    assert info.value.message.startswith(
        "model 'simple_string' model_warmup 'numbers' failed: ")


async def test_a_bytes_input_data_file_is_read_in_tritons_format(tmp_path: Path) -> None:
    model = _simple_string(tmp_path, _sample('input_data_file: "numbers"', batch_size=3))
    (model / "warmup").mkdir()
    (model / "warmup" / "numbers").write_bytes(_serialized([b"%d" % i for i in range(16)]))
    repo = Repository(tmp_path)
    repo.load()
    try:
        assert repo.get("simple_string").ready
    finally:
        await repo.stop()


@pytest.mark.parametrize(("data", "message"), [
    (_serialized([b"1"] * 15), "holds 15 elements, dims [16] need 16 (each a 4-byte "
                               "little-endian length, then its bytes)"),
    (_serialized([b"1"] * 17), "holds 17 elements, dims [16] need 16"),
    (_serialized([b"1"] * 15) + struct.pack("<I", 4) + b"12",
     "is truncated: element 15 declares 4 bytes, 2 are left"),
    (_serialized([b"1"] * 15) + b"\x01\x00", "is truncated: element 15 at byte 75 has 2 of "
                                             "the 4 bytes of its length"),
    (b"1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16",  # text, as modelfn used to read it
     f"is truncated: element 0 declares {struct.unpack('<I', b'1 2 ')[0]} bytes"),
])
def test_a_bytes_input_data_file_that_does_not_fit_is_a_clear_config_error(
        tmp_path: Path, data: bytes, message: str) -> None:
    model = _simple_string(tmp_path, _sample('input_data_file: "numbers"'))
    (model / "warmup").mkdir()
    (model / "warmup" / "numbers").write_bytes(data)
    with pytest.raises(ConfigError) as info:
        Repository(tmp_path).load()
    assert ("model 'simple_string' model_warmup 'numbers': input 'INPUT0' input_data_file "
            "'numbers' ") in info.value.message
    assert message in info.value.message
    assert "simple_string/config.pbtxt" in info.value.message


def test_bytes_elements_may_be_empty() -> None:
    assert bytes_elements(_serialized([b"", b"ab", b""]), "data") == [b"", b"ab", b""]
    assert bytes_elements(b"", "data") == []


class Recording(OnnxRuntimeBackend):
    """The real ONNX Runtime backend, keeping the inputs of every run."""

    seen: list[dict[str, np.ndarray]] = []

    def run(self, instance: int, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        Recording.seen.append({k: v.copy() for k, v in inputs.items()})
        return super().run(instance, inputs)


FLOAT_SAMPLE = """max_batch_size: 8
model_warmup [{ name: "rows" batch_size: 3
  inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 16 ] input_data_file: "row" } }
  inputs { key: "INPUT1" value: { data_type: TYPE_FP32 dims: [ 16 ] zero_data: true } }
}]
"""


@pytest.fixture
def recording(monkeypatch: pytest.MonkeyPatch) -> type[Recording]:
    monkeypatch.setattr(Recording, "seen", [])
    monkeypatch.setitem(BACKENDS, "onnxruntime_onnx", Recording)
    return Recording


async def test_a_raw_input_data_file_holds_one_row_repeated_over_the_batch(
        tmp_path: Path, recording: type[Recording]) -> None:
    """Triton sends ``batch_size`` requests of the file's one row."""
    save(tmp_path / "simple", simple_graph(), config=FLOAT_SAMPLE)
    (tmp_path / "simple" / "warmup").mkdir()
    row = np.arange(16, dtype=np.float32)
    (tmp_path / "simple" / "warmup" / "row").write_bytes(row.tobytes())
    repo = Repository(tmp_path)
    repo.load()
    try:
        first = recording.seen[0]["INPUT0"]
        assert first.shape == (3, 16) and (first == row).all()
    finally:
        await repo.stop()


def test_a_short_raw_input_data_file_is_a_config_error(tmp_path: Path) -> None:
    save(tmp_path / "simple", simple_graph(), config=FLOAT_SAMPLE)
    (tmp_path / "simple" / "warmup").mkdir()
    (tmp_path / "simple" / "warmup" / "row").write_bytes(b"\0" * 63)
    with pytest.raises(ConfigError, match=r"model 'simple' model_warmup 'rows': input 'INPUT0' "
                                          r"input_data_file 'row' has 63 bytes, dims \[16\] of "
                                          r"FP32 need 64"):
        Repository(tmp_path).load()


class PerRequest(OnnxRuntimeBackend):
    """ONNX Runtime answering request by request, as Triton's Python backend's execute does;
    no implicit warmup, as that backend has none."""

    per_request = True
    implicit_warmup = False
    batches: list[list[int]] = []

    def run_requests(self, instance: int,
                     requests: list[tuple[dict[str, np.ndarray], RequestContext | None]]
                     ) -> list[dict[str, np.ndarray] | Exception]:
        PerRequest.batches.append([len(inputs["INPUT0"]) for inputs, _ in requests])
        return [self.run(instance, inputs) for inputs, _ in requests]


async def test_a_per_request_backend_gets_a_sample_as_batch_size_requests_and_nothing_else(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(PerRequest, "batches", [])
    monkeypatch.setitem(BACKENDS, "onnxruntime_onnx", PerRequest)
    save(tmp_path / "with_sample", simple_graph(), config=FLOAT_SAMPLE)
    (tmp_path / "with_sample" / "warmup").mkdir()
    (tmp_path / "with_sample" / "warmup" / "row").write_bytes(b"\0" * 64)
    save(tmp_path / "without", simple_graph())
    repo = Repository(tmp_path)
    repo.load()
    try:
        assert repo.get("with_sample").ready and repo.get("without").ready
        assert PerRequest.batches == [[1, 1, 1]]  # one call, three requests of a row
    finally:
        await repo.stop()
