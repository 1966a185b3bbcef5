"""Triton ensembles for tests: config.pbtxt text for steps, and repositories that chain the
tiny ONNX models of ``onnx_models`` through internal tensors."""

from __future__ import annotations

from typing import TYPE_CHECKING

from onnx import TensorProto
from onnx_models import identity_graph, lookup_graph, save, simple_graph

if TYPE_CHECKING:
    from pathlib import Path

CPU = "instance_group [{ kind: KIND_CPU }]\n"
#: 'add' and 'twice' batch up to 8 rows with the default (work-conserving) policy
BATCHING = f"max_batch_size: 8\ndynamic_batching {{}}\n{CPU}"
#: a batch of 'pair' runs only once it holds two requests (or after ten minutes): two
#: ensemble requests whose steps met in one batch are told apart from two that did not
PAIR = (f"max_batch_size: 2\n{CPU}dynamic_batching {{ preferred_batch_size: [2] "
        "max_queue_delay_microseconds: 600000000 default_queue_policy { "
        "allow_timeout_override: true default_timeout_microseconds: 600000000 } }\n")
#: lookup's table has 4 rows: an INDEX past them fails the batch on the CPU provider
LOOKUP = f"max_batch_size: 8\n{CPU}"


def tensor(name: str, dims: str = "[ 4 ]", datatype: str = "TYPE_FP32") -> str:
    return f'{{ name: "{name}" data_type: {datatype} dims: {dims} }}'


def step(model: str, inputs: dict[str, str], outputs: dict[str, str], version: int = -1) -> str:
    """One ``ensemble_scheduling`` step: ``inputs`` maps the model's inputs to ensemble
    tensors, ``outputs`` the model's outputs to ensemble tensors."""
    maps = [f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items()]
    maps += [f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items()]
    return f'{{\n  model_name: "{model}"\n  model_version: {version}\n  ' + "\n  ".join(
        maps) + "\n}"


def ensemble_config(steps: list[str], inputs: list[str], outputs: list[str],
                    max_batch_size: int = 8, extra: str = "") -> str:
    return (f'platform: "ensemble"\nmax_batch_size: {max_batch_size}\n'
            f"input [ {', '.join(inputs)} ]\noutput [ {', '.join(outputs)} ]\n{extra}"
            f"ensemble_scheduling {{\n step [\n{', '.join(steps)}\n ]\n}}\n")


def save_ensemble(model_dir: Path, config: str) -> Path:
    """An ensemble: its config and its version directory (empty, as Triton wants it)."""
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    (model_dir / "config.pbtxt").write_text(config)
    return model_dir


#: chain: OUT = (A + B + B) * 2, through the internal tensor 'sum'
CHAIN = ensemble_config(
    [step("add", {"INPUT0": "A", "INPUT1": "B"}, {"OUTPUT0": "sum"}),
     step("twice", {"INPUT0": "sum", "INPUT1": "B"}, {"OUTPUT0": "OUT"})],
    [tensor("A"), tensor("B")], [tensor("OUT")])
#: diamond: 'sum' and 'diff' from the two inputs at once, then one step joins them:
#: OUT = ((A + B) + (A - B)) * 2 = 4A, LEFT = (A + B) - (A - B) = 2B
DIAMOND = ensemble_config(
    [step("add", {"INPUT0": "A", "INPUT1": "B"}, {"OUTPUT0": "sum"}),
     step("add", {"INPUT0": "A", "INPUT1": "B"}, {"OUTPUT1": "diff"}),
     step("twice", {"INPUT0": "sum", "INPUT1": "diff"}, {"OUTPUT0": "OUT", "OUTPUT1": "LEFT"})],
    [tensor("A"), tensor("B")], [tensor("OUT"), tensor("LEFT")])
#: paired: A + B through 'pair', whose batches wait for two requests
PAIRED = ensemble_config(
    [step("pair", {"INPUT0": "A", "INPUT1": "B"}, {"OUTPUT0": "OUT"})],
    [tensor("A"), tensor("B")], [tensor("OUT")], max_batch_size=2)
#: looked_up: VALUE = table[INDEX], doubled by 'twice'; an INDEX past the table fails step 0
LOOKED_UP = ensemble_config(
    [step("lookup", {"INDEX": "INDEX"}, {"VALUE": "value"}),
     step("twice_1", {"INPUT0": "value", "INPUT1": "value"}, {"OUTPUT0": "OUT"})],
    [tensor("INDEX", "[ 1 ]", "TYPE_INT64")], [tensor("OUT", "[ 1 ]")])
#: echoed: strings through ONNX Runtime's string identity (it takes text)
ECHOED = ensemble_config(
    [step("strings", {"IN": "TEXT"}, {"OUT": "ECHO"})],
    [tensor("TEXT", "[ 2 ]", "TYPE_STRING")], [tensor("ECHO", "[ 2 ]", "TYPE_STRING")])


def ensemble_repository(root: Path) -> Path:
    """ONNX models 'add' (OUTPUT0 = A + B, OUTPUT1 = A - B), 'twice' (the same, OUTPUT0
    doubled), 'pair', 'lookup', 'twice_1' and 'strings', and the ensembles above over them,
    each named as its constant in lower case."""
    save(root / "add", simple_graph(width=4), config=BATCHING)
    save(root / "twice", simple_graph(width=4, scale=2.0), config=BATCHING)
    save(root / "pair", simple_graph(width=4), config=PAIR)
    save(root / "lookup", lookup_graph([1.0, 2.0, 3.0, 4.0]), config=LOOKUP)
    save(root / "twice_1", simple_graph(width=1, scale=2.0), config=BATCHING)
    save(root / "strings", identity_graph(TensorProto.STRING, ["N", 2]), config=BATCHING)
    for name, config in (("chain", CHAIN), ("diamond", DIAMOND), ("paired", PAIRED),
                         ("looked_up", LOOKED_UP), ("echoed", ECHOED)):
        save_ensemble(root / name, config)
    return root
