"""Map modelfn errors to CLI exit codes: the message on stderr, no traceback."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import click

from modelfn.runtime.errors import ModelfnError

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

#: HTTP status of the error -> exit code (anything else exits 1): 2 the request is wrong,
#: 3 not found, 4 conflict, 5 unavailable or a bad answer from behind a proxy (502: a
#: function's error through its URL, or an answer that is not V2), 6 and 7 auth, 8 throttled
EXIT_CODES = {400: 2, 413: 2, 422: 2, 404: 3, 409: 4, 502: 5, 503: 5, 504: 5, 401: 6, 403: 7,
              429: 8}
#: exit code after Ctrl-C, as a shell reports a command stopped by SIGINT
INTERRUPTED = 130


class MissingExtra(ModelfnError):
    """A command needs packages of an extra the user did not install: one line says which."""

    status_code = 400

    def __init__(self, what: str, modules: Sequence[str], extra: str) -> None:
        super().__init__(f"{what} needs {', '.join(modules)}: install the {extra} extra, "
                         f"pip install 'modelfn[{extra}]'")


def require(what: str, extra: str, *modules: str) -> None:
    """``MissingExtra`` unless every module can be imported."""
    import importlib.util

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise MissingExtra(what, missing, extra)


@contextlib.contextmanager
def exit_on_error() -> Iterator[None]:
    try:
        yield
    except ModelfnError as exc:
        click.echo(f"Error: {exc.message}", err=True)
        raise SystemExit(EXIT_CODES.get(exc.status_code, 1)) from exc
