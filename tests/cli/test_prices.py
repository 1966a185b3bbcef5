from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from modelfn.cli.prices import (
    DEFAULT_PRICES,
    InstancePrice,
    LambdaPrice,
    PriceFileError,
    load_prices,
)

if TYPE_CHECKING:
    from pathlib import Path

GOOD = """\
region: eu-west-1
as_of: "2026-03"
lambda:
  arm64: {gb_second: 0.0000133334, per_million_requests: 0.2}
instances:
  c7g.large: {hourly: 0.08, vcpus: 2, memory_gib: 4}
  tiny: {hourly: 2e-3}
"""


def test_the_default_table_names_its_region_and_date() -> None:
    table = load_prices()
    assert table.region == "us-east-1" and table.as_of and table.currency == "USD"
    assert table.source == "built-in prices"
    assert {p.architecture for p in table.lambdas} == {"x86_64", "arm64"}
    assert table.instances and all(i.hourly > 0 for i in table.instances)
    assert DEFAULT_PRICES.name == "prices.yaml"


def test_a_user_file_replaces_the_table(tmp_path: Path) -> None:
    path = tmp_path / "prices.yaml"
    path.write_text(GOOD)
    table = load_prices(path)
    assert (table.region, table.as_of, table.currency, table.source) == (
        "eu-west-1", "2026-03", "USD", str(path))
    assert table.lambdas == (LambdaPrice("arm64", 0.0000133334, 0.2),)
    assert table.lambdas[0].request == pytest.approx(2e-7, rel=1e-12)
    # YAML 1.1 reads 2e-3 as text; a price is a number all the same
    assert table.instances == (InstancePrice("c7g.large", 0.08, 2, 4.0),
                               InstancePrice("tiny", 0.002))


@pytest.mark.parametrize(("text", "message"), [
    ("", "the file must be a mapping, not nothing"),
    ("- a\n- b\n", "the file must be a mapping, not list"),
    (GOOD.replace("region: eu-west-1\n", ""), "the file has no region"),
    (GOOD + "discount: 0.1\n", "the file has unknown key discount (expected as_of, "
                               "currency, instances, lambda, region)"),
    (GOOD.replace("gb_second: 0.0000133334", "gb_second: -1"),
     "lambda.arm64.gb_second must be a positive number, not -1"),
    (GOOD.replace("gb_second: 0.0000133334", "gb_second: cheap"),
     "lambda.arm64.gb_second must be a positive number, not 'cheap'"),
    (GOOD.replace("per_million_requests: 0.2", "per_million_requests: -0.2"),
     "lambda.arm64.per_million_requests must be a number, zero or more, not -0.2"),
    (GOOD.replace("gb_second: 0.0000133334, ", ""), "lambda.arm64 has no gb_second"),
    (GOOD.replace("lambda:\n  arm64: {gb_second: 0.0000133334, per_million_requests: 0.2}",
                  "lambda: {}"), "lambda must be a mapping with at least one entry"),
    (GOOD.replace("{hourly: 2e-3}", "{hourly: .nan}"),
     "instances.tiny.hourly must be a positive number, not nan"),
    (GOOD.replace("{hourly: 2e-3}", "{hourly: 1, vcpus: 1.5}"),
     "instances.tiny.vcpus must be a whole number >= 1, not 1.5"),
    (GOOD.replace("{hourly: 2e-3}", "{hourly: 1, hourly_spot: 0.3}"),
     "instances.tiny has unknown key hourly_spot (expected hourly, memory_gib, vcpus)"),
    (GOOD.replace("{hourly: 2e-3}", "3"), "instances.tiny must be a mapping, not int"),
    (GOOD.replace('as_of: "2026-03"', "as_of: [2026]"), "as_of must be text, not [2026]"),
])
def test_a_bad_file_names_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "prices.yaml"
    path.write_text(text)
    with pytest.raises(PriceFileError) as caught:
        load_prices(path)
    assert caught.value.message == f"{path}: {message}"
    assert caught.value.status_code == 400


def test_yaml_errors_give_the_line(tmp_path: Path) -> None:
    path = tmp_path / "prices.yaml"
    path.write_text("region: x\nlambda: [\n")
    with pytest.raises(PriceFileError, match=rf"^{path}:3: is not valid YAML"):
        load_prices(path)


def test_an_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(PriceFileError, match="cannot read the price file"):
        load_prices(tmp_path / "missing.yaml")
