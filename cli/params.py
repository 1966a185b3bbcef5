"""The click types and options every command shares, so one value reads the same in each: a
duration is ``500ms``, ``5s``, ``3m45s``, ``1h`` or bare seconds everywhere, a size is
``512M`` or ``2G`` everywhere, ``--endpoint-url`` reads the same variables everywhere, and a
command without a model store says the same thing.

Only click and ``tune.units`` (no third-party import) load here, so ``--help`` stays fast.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import click

from modelfn.runtime.errors import InvalidInput
from modelfn.tune.units import parse_duration, parse_levels, parse_size

if TYPE_CHECKING:
    from collections.abc import Callable


class _Parsed(click.ParamType[Any]):
    """A click type from one of ``tune.units``' parsers (a ValueError is a usage error)."""

    def __init__(self, name: str, parse: Callable[[str], Any]) -> None:
        self.name = name
        self._parse = parse

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return self._parse(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


#: seconds, from ``500ms``, ``5s``, ``3m45s``, ``1h`` or a bare number of seconds (> 0)
DURATION = _Parsed("duration", parse_duration)
#: the same, where 0 means "none" (no warm-up, no wait)
DURATION_OR_ZERO = _Parsed("duration", functools.partial(parse_duration, allow_zero=True))
SIZE = _Parsed("size", parse_size)
LEVELS = _Parsed("levels", parse_levels)


#: the variables ``--endpoint-url`` reads, first set first: ours, boto3's own, and the one the
#: functions' runtime reads (``model_store.s3``), kept so an older env file still works
ENDPOINT_URL_ENVVARS = ["MODELFN_ENDPOINT_URL", "AWS_ENDPOINT_URL", "MODELFN_S3_ENDPOINT"]

#: one ``--endpoint-url`` for every command that reaches AWS or an S3-compatible store
endpoint_url_option = click.option(
    "--endpoint-url", envvar=ENDPOINT_URL_ENVVARS, show_envvar=True, default=None,
    metavar="URL",
    help="The AWS endpoint (S3 for the model store, Lambda, ECR): an emulated AWS such as the "
         "local platform's, LocalStack or MinIO.")

#: ``--store`` of the store commands (``push``, ``versions``, ``pull``)
store_option = click.option(
    "--store", "store_uri", envvar="MODELFN_STORE", show_envvar=True, metavar="URI",
    help="The model store: s3://bucket/prefix, file:///path or a directory.")


class NoStore(InvalidInput):
    """A command that needs a model store was given none: the usual cause is a shell
    without the local platform's env, so the message says how to source it."""

    def __init__(self, alternative: str = "") -> None:
        from pathlib import Path

        from modelfn.localstack.state import ENV_FILE, default_state_dir

        env = default_state_dir() / ENV_FILE
        home = Path.home()
        shown = f"~/{env.relative_to(home)}" if env.is_relative_to(home) else str(env)
        other = f", or {alternative}" if alternative else ""
        super().__init__(
            f"no model store: give it with --store URI (or MODELFN_STORE){other}; for the "
            f"local platform, source its env first: set -a; . {shown}; set +a "
            "(MODELFN_DEV_DIR: another state dir)")


def require_store(store: str | None, alternative: str = "") -> str:
    """``store``, or ``NoStore`` when there is none."""
    if not store:
        raise NoStore(alternative)
    return store
