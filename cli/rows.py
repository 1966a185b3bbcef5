"""``-b/--rows-per-request``, shared by ``modelfn bench`` and ``modelfn tune``: the rows
each request of random inputs carries, as perf_analyzer's ``-b``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path


def rows_per_request_option(purpose: str) -> Callable[[Any], Any]:
    """The option, its help saying what the rows are for in this command (``purpose``)."""
    return click.option(
        "--rows-per-request", "-b", type=click.IntRange(min=1), default=None, metavar="N",
        help=f"Rows in each request of random inputs, as perf_analyzer's -b: {purpose} "
             "[default: 1; with --input, the file's first dimension].")


def check_rows_source(rows_per_request: int | None, input_path: Path | None) -> None:
    """An input file carries its own rows: refuse a second, conflicting source."""
    if rows_per_request is not None and input_path is not None:
        raise click.BadParameter("the --input file's first dimension sets the rows per "
                                 "request; give one or the other",
                                 param_hint="'--rows-per-request'")
