"""Map modelfn errors to CLI exit codes: the message on stderr, no traceback."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import click

from modelfn.runtime.errors import ModelfnError

if TYPE_CHECKING:
    from collections.abc import Iterator

#: HTTP status of the error -> exit code (anything else exits 1)
EXIT_CODES = {400: 2, 413: 2, 422: 2, 404: 3, 409: 4, 503: 5, 504: 5, 401: 6, 403: 7, 429: 8}


@contextlib.contextmanager
def exit_on_error() -> Iterator[None]:
    try:
        yield
    except ModelfnError as exc:
        click.echo(f"Error: {exc.message}", err=True)
        raise SystemExit(EXIT_CODES.get(exc.status_code, 1)) from exc
