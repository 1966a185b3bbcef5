from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import numpy as np
import pytest
from onnx import TensorProto
from onnx_models import identity_graph, save, simple_graph

from modelfn.runtime.errors import ConfigError, InvalidInput, ModelNotFound
from modelfn.runtime.repository import Repository

if TYPE_CHECKING:
    from pathlib import Path


async def test_loads_every_model_and_the_versions_its_policy_names(simple_repo: Path) -> None:
    repo = Repository(simple_repo)
    repo.load()
    assert {(m.name, m.version) for m in repo.all_versions()} == {
        ("simple", 1), ("simple", 2), ("identity_int32", 1)}
    assert repo.ready
    assert repo.get("simple").version == 2  # newest ready version
    assert repo.get("simple", "1").version == 1
    assert repo.phases["session"] > 0 and "warmup" in repo.phases
    await repo.stop()


async def test_default_policy_serves_only_the_latest_version(tmp_path: Path) -> None:
    root = tmp_path / "models"
    for version in (1, 2, 10):
        save(root / "m", simple_graph(), version=version)
    (root / "m" / "03").mkdir()  # leading zero: ignored as Triton does
    (root / "m" / "notes").mkdir()
    repo = Repository(root)
    repo.load()
    assert [m.version for m in repo.all_versions()] == [10]
    await repo.stop()


async def test_pinned_version_overrides_the_policy(simple_repo: Path) -> None:
    repo = Repository(simple_repo)
    repo.load(["simple:1"])
    assert [(m.name, m.version) for m in repo.all_versions()] == [("simple", 1)]
    with pytest.raises(ModelNotFound, match="'simple' version 2"):
        repo.get("simple", "2")
    await repo.stop()


@pytest.mark.parametrize(("refs", "error", "message"), [
    (["../etc"], InvalidInput, "invalid model name '../etc'"),
    (["a/b"], InvalidInput, "invalid model name"),
    (["nope"], ModelNotFound, "'nope'"),
    (["simple:9"], ModelNotFound, "'simple' version 9"),
    (["simple:x"], InvalidInput, "invalid version 'x'"),
])
def test_bad_model_refs(simple_repo: Path, refs: list[str], error: type[Exception],
                        message: str) -> None:
    with pytest.raises(error, match=message):
        Repository(simple_repo).load(refs)


def test_model_without_versions_or_files_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="holds no model directories"):
        Repository(tmp_path).load()
    save(tmp_path / "real", simple_graph(width=4))
    with pytest.raises(ConfigError, match=r"model 'empty' has no version directory"):
        Repository(tmp_path).load()
    (tmp_path / "real" / "1" / "model.onnx").unlink()
    (tmp_path / "real" / "1").rmdir()
    (tmp_path / "real").rmdir()
    (tmp_path / "empty" / "1").mkdir()
    with pytest.raises(ConfigError, match=r"no model file in empty/1: expected model\.onnx"):
        Repository(tmp_path).load()


def test_a_version_that_contradicts_the_config_fails_the_load(tmp_path: Path) -> None:
    root = tmp_path / "models"
    save(root / "m", identity_graph(TensorProto.INT32, ["N", 3]), version=1)
    save(root / "m", identity_graph(TensorProto.FLOAT, ["N", 3]), version=2,
         config="version_policy { all {} }\n")
    with pytest.raises(ConfigError, match="TYPE_INT32|TYPE_FP32"):
        Repository(root).load()


def test_repository_must_exist(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is not a directory"):
        Repository(tmp_path / "missing").load()


@pytest.mark.parametrize(("parameters", "count", "expected"), [
    # the measured cost decides against the limit; a limit no model reaches keeps it
    # deterministic on a loaded machine (inline_rows' defaults are tested below)
    ({"inline_max_us": "1000000"}, 1, 8),  # every batch, up to max_batch_size
    ({"inline_max_us": "0"}, 1, 0),
    ({"inline_max_us": "1000000"}, 2, 0),  # instances run in parallel only on threads
])
async def test_cheap_models_run_inline_unless_told_otherwise(
    tmp_path: Path, parameters: dict[str, str], count: int, expected: int
) -> None:
    lines = [f'parameters {{ key: "{k}" value {{ string_value: "{v}" }} }}'
             for k, v in parameters.items()]
    config = "\n".join([f"instance_group [{{ count: {count} kind: KIND_CPU }}]",
                        "max_batch_size: 8", *lines]) + "\n"
    save(tmp_path / "m", simple_graph(width=4), config=config)
    repo = Repository(tmp_path)
    repo.load()
    assert repo.get("m").inline_rows == expected
    await repo.stop()


@pytest.mark.parametrize("one_at_a_time", [True, False])
async def test_one_request_at_a_time_never_waits_the_queue_delay(
        tmp_path: Path, one_at_a_time: bool) -> None:
    """A Lambda environment takes one invocation at a time: no other request can join a
    batch, so a configured delay (60 s here) would only hold the one there is."""
    save(tmp_path / "m", identity_graph(TensorProto.INT32, ["N", 3]), config=(
        'name: "m"\nmax_batch_size: 8\n'
        "dynamic_batching { max_queue_delay_microseconds: 60000000 }\n"))
    repo = Repository(tmp_path, one_request_at_a_time=one_at_a_time)
    repo.load()
    rows = {"IN": np.ones((1, 3), np.int32)}
    answer = asyncio.ensure_future(repo.get("m").batcher.infer(rows, 1))
    done, _ = await asyncio.wait([answer], timeout=5)
    assert bool(done) is one_at_a_time  # otherwise it still waits for 7 more rows
    if done:
        np.testing.assert_array_equal(answer.result()["OUT"], rows["IN"])
    await repo.stop()


def _parameter(key: str, value: str) -> str:
    return f'parameters {{ key: "{key}" value {{ string_value: "{value}" }} }}\n'


BAD_CONFIGS = [
    (_parameter("warmup_budget_s", "soon"),
     "parameter 'warmup_budget_s' must be a number from 0 to 3600, not 'soon'"),
    (_parameter("graph_optimization_level", "-1"),
     "parameter 'graph_optimization_level' must be one of 0, 1, 2 or 99, not '-1'"),
    (_parameter("default_max_batch_size", "nan"),
     "parameter 'default_max_batch_size' must be a whole number from 1 to 65536, not 'nan'"),
    (_parameter("default_max_batch_size", "0"),
     "parameter 'default_max_batch_size' must be a whole number from 1 to 65536, not '0'"),
    (_parameter("inline_max_us", "-5"),
     "parameter 'inline_max_us' must be a number from 0 to 1e+06, not '-5'"),
    (_parameter("intra_op_thread_count", "100000"),
     "parameter 'intra_op_thread_count' must be a whole number from 1 to"),
    ("max_batch_size: 2147483647\n",
     "max_batch_size 2147483647: the inputs of one full batch need"),
    ("instance_group [{ count: 2147483647 kind: KIND_CPU }]\n",
     "instance_group count 2147483647 is more than modelfn runs (64)"),
    ("instance_group [{ count: 10000 kind: KIND_CPU }]\n",
     "instance_group count 10000 is more than modelfn runs (64)"),
    ("parameters " + "{ x " * 5000 + "}" * 5000 + "\n", "nested more than 32 deep"),
    ("max_batch_size: 99999999999\n", "max_batch_size"),
]


@pytest.mark.parametrize(("config", "message"), BAD_CONFIGS,
                         ids=[m[:40] for _, m in BAD_CONFIGS])
def test_a_config_the_machine_cannot_hold_is_a_config_error_naming_the_file(
    tmp_path: Path, config: str, message: str
) -> None:
    save(tmp_path / "m", simple_graph(width=4), config=config)
    with pytest.raises(ConfigError) as info:
        Repository(tmp_path).load()
    assert message in info.value.message
    assert "m/config.pbtxt" in info.value.message


def test_more_cpu_instances_than_the_cpus_carry(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from modelfn.runtime import limits

    monkeypatch.setattr(limits, "usable_cpus", lambda: 2)
    save(tmp_path / "m", simple_graph(width=4),
         config="instance_group [{ count: 17 kind: KIND_CPU }]\n")
    with pytest.raises(ConfigError, match="17 CPU instances on 2 usable CPU"):
        Repository(tmp_path).load()


@pytest.mark.parametrize(("cpus", "runs_us", "instances", "expected"), [
    # runs_us: one row's run and the largest warmed batch's (64 rows)
    # one CPU: a batch holds the loop up to 5 ms rather than pay a handoff that buys nothing
    (1, (20, 340), 1, 64),  # the digits MLP: every batch
    (1, (200, 12800), 1, 25),  # 200 us a row: 25 rows cost 5,000 us, 26 rows 5,200 us
    (1, (27000, 900000), 1, 0),  # the CNN: one row holds it 27 ms
    (2, (5, 10), 1, 64),  # under the ~15 us handoff with more CPUs
    (2, (5, 69), 1, 10),  # ~1 us a row: 10 rows cost 14.1 us, 11 rows 15.2 us
    (2, (20, 40), 1, 0),
    (1, (1, 1), 2, 0),  # instances run in parallel only on their worker threads
])
def test_inline_rows_defaults(monkeypatch: pytest.MonkeyPatch, cpus: int,
                              runs_us: tuple[float, float], instances: int, expected: int
                              ) -> None:
    from types import SimpleNamespace

    from modelfn.runtime import warmup
    from modelfn.runtime.config_file import parse_config
    from modelfn.runtime.warmup import WarmupReport

    monkeypatch.setattr(warmup, "usable_cpus", lambda: cpus)
    backend = SimpleNamespace(instance_count=instances)
    config = parse_config('name: "m"\nmax_batch_size: 64\n')
    one, largest = runs_us
    report = WarmupReport(list(range(1, 65)), largest / 1e6, (1, one / 1e6))
    assert warmup.inline_rows(config, backend, report) == expected  # type: ignore[arg-type]
    assert warmup.inline_rows(config, backend, None) == 0  # nothing timed the batches


@pytest.mark.parametrize("name", ["/etc/hostname", "../../secret.onnx", "..", "sub/model.onnx",
                                  "link.onnx"])
def test_default_model_filename_stays_in_the_version_directory(tmp_path: Path,
                                                               name: str) -> None:
    save(tmp_path / "m", simple_graph(width=4),
         config=f'default_model_filename: "{name}"\n')
    outside = tmp_path / "elsewhere.onnx"
    outside.write_bytes((tmp_path / "m" / "1" / "model.onnx").read_bytes())
    (tmp_path / "m" / "1" / "link.onnx").symlink_to(outside)
    with pytest.raises(ConfigError, match="default_model_filename '.*' must be a file name in "
                                          "m/1"):
        Repository(tmp_path).load()


def test_label_filename_stays_in_the_model_directory(tmp_path: Path) -> None:
    save(tmp_path / "m", simple_graph(width=4), config=(
        'output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [4] '
        'label_filename: "../labels.txt" }]\n'))
    (tmp_path / "labels.txt").write_text("a\nb\n")
    with pytest.raises(ConfigError, match="label_filename '../labels.txt' must be a file name"):
        Repository(tmp_path).load()


@pytest.mark.parametrize(("text", "labels"), [
    # characters str.splitlines() takes for line ends, Triton (std::getline) does not
    ("zero\none\ntwo\u2028bis\nthree\x85x\nfour\x0cf\nfive\n",
     ["zero", "one", "two\u2028bis", "three\x85x", "four\x0cf", "five"]),
    ("a\r\nb\r\n", ["a", "b"]),  # saved on Windows
    ("a\n\nc", ["a", "", "c"]),  # an empty label keeps its class; no newline at the end
    ("", []),
])
def test_label_files_are_split_at_newlines_only(tmp_path: Path, text: str,
                                                labels: list[str]) -> None:
    """A label holding U+2028 or U+0085 used to split in two, and every later class got
    the label of the class before it."""
    from modelfn.runtime.config_file import parse_config
    from modelfn.runtime.repository import read_labels

    config = parse_config('name: "m"\noutput [{ name: "OUTPUT0" data_type: TYPE_FP32 '
                          'dims: [6] label_filename: "labels.txt" }]\n')
    (tmp_path / "labels.txt").write_bytes(text.encode())
    assert read_labels(config, tmp_path) == {"OUTPUT0": labels}
