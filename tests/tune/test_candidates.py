"""Candidates written into a model's config: the tuned fields change, nothing else does."""

from __future__ import annotations

from modelfn.runtime.config_file import parse_config
from modelfn.tune.candidates import (
    PADDED_PARAMETER,
    THREADS_PARAMETER,
    Candidate,
    apply,
    current,
    from_config_json,
    render,
)

USER = """\
name: "digits"
platform: "onnxruntime_onnx"
max_batch_size: 64
input [ { name: "input" data_type: TYPE_FP32 dims: [ 64 ] } ]
output [ { name: "label" data_type: TYPE_INT64 dims: [ 1 ] reshape: { shape: [ ] } } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
dynamic_batching { default_queue_policy { max_queue_size: 100 } }
parameters { key: "enable_mem_arena" value { string_value: "0" } }
model_warmup [ { name: "one" batch_size: 1
  inputs { key: "input" value { data_type: TYPE_FP32 dims: [ 64 ] zero_data: true } } } ]
"""


def test_apply_changes_the_tuned_fields_and_keeps_the_rest() -> None:
    user = parse_config(USER)
    tuned = apply(user, Candidate(2, 1, 16, delay_us=1000, preferred=(16,)))
    assert tuned.max_batch_size == 16
    assert [(g.count, g.kind) for g in tuned.instance_group] == [(2, "KIND_CPU")]
    assert tuned.parameters == {"enable_mem_arena": "0", THREADS_PARAMETER: "1"}
    assert tuned.dynamic_batching is not None
    assert tuned.dynamic_batching.max_queue_delay_microseconds == 1000
    assert tuned.dynamic_batching.preferred_batch_size == (16,)
    assert tuned.dynamic_batching.default_queue_policy.max_queue_size == 100
    assert [w.name for w in tuned.model_warmup] == ["one"]
    assert user.max_batch_size == 64 and THREADS_PARAMETER not in user.parameters  # a copy


def test_rendered_config_parses_back_to_the_same_fields() -> None:
    tuned = apply(parse_config(USER), Candidate(1, 2, 8))
    text = render(tuned, "Tuned by modelfn tune\nc=32: 100 rows/s")
    assert text.startswith("# Tuned by modelfn tune\n# c=32: 100 rows/s\n")
    again = parse_config(text)
    assert again.to_json() == tuned.to_json()


def test_no_batching_is_written_as_an_explicit_zero() -> None:
    tuned = apply(parse_config(USER), Candidate(1, None, 0))
    again = parse_config(render(tuned))
    assert again.max_batch_size == 0 and "max_batch_size" in again.explicit
    assert again.dynamic_batching is None
    assert THREADS_PARAMETER not in again.parameters


def test_candidate_of_a_served_config() -> None:
    served = apply(parse_config(USER), Candidate(2, 3, 16, delay_us=500, preferred=(8, 16)))
    candidate = from_config_json(served.to_json())
    assert candidate.key == (2, 3, 16, 500, (8, 16), None)
    assert candidate.label == "current"


def test_the_current_config_before_a_server_reports_it() -> None:
    """What the file sets; auto-complete's batch (its parameter, else 4) when it sets none."""
    assert current(parse_config(USER)).key == (1, None, 64, 0, (), None)
    assert current(parse_config(USER)).as_is
    no_batching = parse_config(USER.replace("max_batch_size: 64", "max_batch_size: 0"))
    assert current(no_batching).max_batch_size == 0  # shown as the file says, not as 4
    unset = parse_config(USER.replace("max_batch_size: 64\n", ""))
    assert current(unset).max_batch_size == 4
    with_default = USER.replace(
        "max_batch_size: 64\n", "").replace(
        'parameters { key: "enable_mem_arena"',
        'parameters { key: "default_max_batch_size" value { string_value: "16" } }\n'
        'parameters { key: "enable_mem_arena"')
    assert current(parse_config(with_default)).max_batch_size == 16
    two = apply(parse_config(USER), Candidate(2, 1, 8))
    assert current(two).key == (2, 1, 8, 0, (), None)
    assert current(None) == Candidate(label="current", as_is=True)


def test_describe() -> None:
    assert Candidate(2, None, 8).describe() == "2xauto threads, batch 8"
    assert Candidate(1, 2, 8, 1000, (8,)).describe() == (
        "1x2 threads, batch 8, delay 1000 us, preferred [8]")


def test_a_gpu_candidate_writes_and_reads_back_its_padding() -> None:
    """A model on a GPU: the candidate's padded sizes go into the parameter (None removes
    it, for the backend's default) and come back from the served config with the kind."""
    gpu_user = parse_config(USER.replace("KIND_CPU", "KIND_GPU"))
    tuned = apply(gpu_user, Candidate(2, None, 32, gpu=True, padded="1,8,16,32"))
    assert tuned.parameters[PADDED_PARAMETER] == "1,8,16,32"
    back = from_config_json(parse_config(render(tuned)).to_json())
    assert back.gpu and back.padded == "1,8,16,32" and back.instances == 2
    assert PADDED_PARAMETER not in apply(tuned, Candidate(1, None, 32, gpu=True)).parameters
    assert not from_config_json(parse_config(USER).to_json()).gpu
    assert Candidate(2, None, 32, gpu=True, padded="none").describe() == (
        "2 GPU instances, batch 32, padded none")
