from __future__ import annotations

import pytest

from modelfn.runtime.errors import InvalidInput
from modelfn.runtime.names import check_model_name, parse_model_ref


@pytest.mark.parametrize("name", ["digits", "resnet-50", "bert_base.v2", "0model"])
def test_good_names(name: str) -> None:
    assert check_model_name(name) == name


@pytest.mark.parametrize("name", ["", ".", "..", "../x", "a/b", ".hidden", "-flag", "a b",
                                  "a\\b", "x\x00y", "naïve"])
def test_bad_names_are_refused_with_the_rule(name: str) -> None:
    with pytest.raises(InvalidInput, match="invalid model name"):
        check_model_name(name)


def test_refs() -> None:
    assert parse_model_ref("digits") == ("digits", None)
    assert parse_model_ref("digits:latest") == ("digits", None)
    assert parse_model_ref("digits:12") == ("digits", 12)
    for bad in ("digits:0", "digits:01", "digits:-1", "digits:x"):
        with pytest.raises(InvalidInput, match="invalid version"):
            parse_model_ref(bad)


def test_a_version_longer_than_an_int64_is_invalid_not_a_crash() -> None:
    """int() raises ValueError past 4,300 digits: such a version was an unhandled error."""
    from modelfn.model_store.names import version_number

    assert parse_model_ref("digits:" + "9" * 19) == ("digits", 10**19 - 1)
    for bad in ("1" * 20, "1" * 5000):
        with pytest.raises(InvalidInput, match="positive 64-bit integers"):
            parse_model_ref(f"digits:{bad}")
        with pytest.raises(InvalidInput, match=r"expected a positive integer \(64-bit\)"):
            version_number(bad)
    with pytest.raises(InvalidInput, match=r"'1{64}\.\.\. \(5000 characters\)'"):
        parse_model_ref("digits:" + "1" * 5000)
    with pytest.raises(InvalidInput, match=r"expected a positive integer \(64-bit\)"):
        version_number("\u0661")  # an Arabic-Indic 1: decimal to Python, not a version
