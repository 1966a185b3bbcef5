"""An ensemble's config.pbtxt: ensemble_scheduling read with Triton's field names, given back
in Triton's JSON form, and every rule Triton checks on the config alone, each refusal
naming the file, the line and the step."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import tritonclient
from ensemble_repos import DIAMOND, ensemble_config, step, tensor
from google.protobuf import json_format

from modelfn.runtime.config import EnsembleStep
from modelfn.runtime.config_file import parse_config
from modelfn.runtime.ensemble import complete_ensemble
from modelfn.runtime.errors import ConfigError
from modelfn.runtime.pbtxt_writer import config_to_pbtxt

if TYPE_CHECKING:
    from types import ModuleType

PATH = "models/ens/config.pbtxt"
AB = [tensor("A"), tensor("B")]
ONE_STEP = [step("add", {"INPUT0": "A", "INPUT1": "B"}, {"OUTPUT0": "OUT"})]


def error_of(text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, PATH)
    assert caught.value.status_code == 400
    return str(caught.value)


def test_steps_are_read_with_their_maps_versions_and_lines() -> None:
    config = parse_config(DIAMOND, PATH)
    assert config.is_ensemble and config.max_batch_size == 8
    assert config.ensemble_steps == [
        EnsembleStep("add", -1, {"INPUT0": "A", "INPUT1": "B"}, {"OUTPUT0": "sum"}),
        EnsembleStep("add", -1, {"INPUT0": "A", "INPUT1": "B"}, {"OUTPUT1": "diff"}),
        EnsembleStep("twice", -1, {"INPUT0": "sum", "INPUT1": "diff"},
                     {"OUTPUT0": "OUT", "OUTPUT1": "LEFT"}),
    ]
    lines = DIAMOND.splitlines()
    assert [lines[s.line - 1].strip()[-1] for s in config.ensemble_steps] == ["{"] * 3
    assert [lines[s.line].strip() for s in config.ensemble_steps] == [
        'model_name: "add"', 'model_name: "add"', 'model_name: "twice"']
    pinned = parse_config(ensemble_config(
        [step("add", {"INPUT0": "A", "INPUT1": "B"}, {"OUTPUT0": "OUT"}, version=3)],
        AB, [tensor("OUT")]), PATH)
    assert pinned.ensemble_steps[0].model_version == 3


@pytest.fixture(scope="module")
def triton_proto() -> ModuleType:
    """Triton's own ModelConfig protobuf, as tritonclient ships it."""
    location = Path(tritonclient.__file__).parent / "grpc" / "model_config_pb2.py"
    found = importlib.util.spec_from_file_location("triton_model_config_pb2_ens", location)
    assert found is not None and found.loader is not None
    module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)
    return module


def test_json_form_is_tritons_and_the_writer_gives_the_same_config_back(
        triton_proto: ModuleType) -> None:
    config = complete_ensemble(parse_config(DIAMOND, PATH), "ens")
    doc = config.to_json()
    assert (doc["platform"], doc["backend"]) == ("ensemble", "")
    assert "optimization" not in doc and doc["instance_group"] == []
    assert doc["ensemble_scheduling"]["step"][2] == {
        "model_name": "twice", "model_version": -1,
        "input_map": {"INPUT0": "sum", "INPUT1": "diff"},
        "output_map": {"OUTPUT0": "OUT", "OUTPUT1": "LEFT"}, "model_namespace": ""}
    message = json_format.ParseDict(doc, triton_proto.ModelConfig())
    assert [s.model_name for s in message.ensemble_scheduling.step] == ["add", "add", "twice"]
    assert dict(message.ensemble_scheduling.step[1].output_map) == {"OUTPUT1": "diff"}
    again = parse_config(config_to_pbtxt(doc), PATH)
    assert again.to_json() == doc


def bad(steps: list[str], inputs: list[str] | None = None, outputs: list[str] | None = None,
        extra: str = "") -> str:
    return ensemble_config(steps, AB if inputs is None else inputs,
                           [tensor("OUT")] if outputs is None else outputs, extra=extra)


CYCLE = [step("add", {"INPUT0": "A", "INPUT1": "t2"}, {"OUTPUT0": "t1"}),
         step("add", {"INPUT0": "t1", "INPUT1": "B"}, {"OUTPUT0": "t2"}),
         step("add", {"INPUT0": "t1", "INPUT1": "t2"}, {"OUTPUT0": "OUT"})]


@pytest.mark.parametrize(("text", "message"), [
    ('platform: "onnxruntime_onnx"\nensemble_scheduling { step [] }\n',
     f"{PATH}:2: ensemble scheduling cannot be set for model 'ens' whose platform is not "
     '"ensemble"'),
    ('name: "e"\nplatform: "ensemble"\n',
     f"{PATH}:2: ensemble 'e' must set ensemble_scheduling (its steps)"),
    (bad(ONE_STEP, extra="instance_group [{ count: 2 }]\n"),
     f"{PATH}:5: instance group should not be specified for ensemble 'ens'"),
    (bad(ONE_STEP, extra="dynamic_batching { }\n"),
     f"{PATH}:5: dynamic_batching can not be specified (its steps' models batch) for "
     "ensemble 'ens'"),
    (bad(ONE_STEP, extra='model_warmup [{ name: "w" }]\n'),
     f"{PATH}:5: model_warmup can not be specified for ensemble 'ens'"),
    (bad(ONE_STEP, extra="optimization { }\n"),
     f"{PATH}:5: optimization should not be specified for ensemble 'ens'"),
    (bad(ONE_STEP, extra='backend: "onnxruntime"\n'),
     f"{PATH}:5: backend can not be specified for ensemble 'ens'"),
    ('platform: "ensemble"\noutput [ { name: "OUT" data_type: TYPE_FP32 dims: [1] } ]\n'
     'ensemble_scheduling { step [ { model_name: "add" } ] }\n',
     f"{PATH}:1: ensemble 'ens' must list its inputs: an ensemble's config is not completed "
     "from a model file"),
    (bad([]), f"{PATH}: must specify 'step' for ensemble 'ens'"),
    (bad(['{ input_map { key: "INPUT0" value: "A" } output_map { key: "O" value: "OUT" } }']),
     f"{PATH}:7: must specify 'model_name' in step 0 of ensemble 'ens'"),
    (bad(['{ model_name: "add" output_map { key: "OUTPUT0" value: "OUT" } }']),
     f"{PATH}:7: must specify 'input_map' in step 0 of ensemble 'ens'"),
    (bad(['{ model_name: "add" input_map { key: "INPUT0" value: "A" } }']),
     f"{PATH}:7: must specify 'output_map' in step 0 of ensemble 'ens'"),
    (bad([step("ens", {"IN": "A"}, {"OUT": "OUT"})]),
     f"{PATH}:7: ensemble 'ens' step 0 (model 'ens') runs the ensemble itself: an ensemble "
     "cannot contain itself"),
    (bad([step("add", {"INPUT0": "A", "INPUT1": "B"}, {"OUTPUT0": "OUT"}, version=0)]),
     f"{PATH}:7: ensemble 'ens' step 0 (model 'add'): model_version must be -1 (the newest) "
     "or a version number, not 0"),
    (bad([*ONE_STEP, step("twice", {"INPUT0": "A", "INPUT1": "B"}, {"OUTPUT0": "OUT"})]),
     f"{PATH}:13: ensemble tensor 'OUT' can appear in an output map only once for ensemble "
     "'ens' step 1 (step 0 produces it too)"),
    (bad([step("add", {"INPUT0": "A", "INPUT1": "B"}, {"OUTPUT0": "OUT", "OUTPUT1": "B"})]),
     f"{PATH}:7: ensemble 'ens' step 0 (model 'add') writes ensemble tensor 'B', which is an "
     "input of the ensemble"),
    (bad([step("add", {"INPUT0": "A", "INPUT1": "nowhere"}, {"OUTPUT0": "OUT"})],
         inputs=[tensor("A")]),
     f"{PATH}:7: ensemble 'ens' step 0 (model 'add'): input 'INPUT1' reads ensemble tensor "
     "'nowhere', which is neither an input of the ensemble nor any step's output"),
    (bad(CYCLE),
     f"{PATH}:7: ensemble 'ens' has a cycle: step 0 (model 'add'), which reads 't2' from "
     "step 1 (model 'add'), which reads 't1' from step 0 (model 'add')"),
    (bad(ONE_STEP, inputs=[*AB, tensor("C")]),
     f"{PATH}: ensemble input 'C' for ensemble 'ens' is not used"),
    (bad(ONE_STEP, outputs=[tensor("OUT"), tensor("MORE")]),
     f"{PATH}: output 'MORE' for ensemble 'ens' is not written: no step's output_map "
     "produces it"),
    (bad([step("add", {"INPUT0": "A", "INPUT1": "B"}, {"OUTPUT0": "OUT", "OUTPUT1": "lost"})]),
     f"{PATH}:7: ensemble tensor 'lost' is unused in ensemble 'ens': step 0 (model 'add') "
     "writes it, but no step reads it and it is not an output"),
    (bad(['{ model_name: "add" input_map { key: "INPUT0" value: "A" } input_map { key: '
          '"INPUT0" value: "B" } output_map { key: "OUTPUT0" value: "OUT" } }']),
     f"{PATH}:7: field 'ensemble_scheduling.step.input_map' has key \"INPUT0\" more than "
     "once"),
    (bad(ONE_STEP).replace("ensemble_scheduling {", "ensemble_scheduling {\n"
                           " max_inflight_requests: 4"),
     f"{PATH}:6: field 'ensemble_scheduling.max_inflight_requests' is not supported by "
     "modelfn"),
    (bad(['{ model_name: "add" model_namespace: "x" input_map { key: "INPUT0" value: "A" } '
          'output_map { key: "OUTPUT0" value: "OUT" } }'], inputs=[tensor("A")]),
     f"{PATH}:7: field 'ensemble_scheduling.step.model_namespace' is not supported by "
     "modelfn"),
], ids=["not-an-ensemble", "no-scheduling", "instance-group", "dynamic-batching", "warmup",
        "optimization", "backend", "no-inputs", "no-step", "no-model-name", "no-input-map",
        "no-output-map", "itself", "version-0", "written-twice", "writes-an-input",
        "unknown-tensor", "cycle", "input-unused", "output-unwritten", "tensor-unused",
        "input-mapped-twice", "max-inflight", "namespace"])
def test_each_rule_is_a_config_error_with_its_line(text: str, message: str) -> None:
    assert error_of(text) == message
