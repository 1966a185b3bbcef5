"""The ``modelfn`` command: a thin click group whose subcommands load on demand.

Subcommands are imported only when invoked, so ``modelfn serve`` pays no
import cost for boto3, aiohttp or the image builder on a cold start.
"""

from __future__ import annotations

import importlib
from typing import Any

import click

#: command name -> "module:attribute" of its click command
COMMANDS: dict[str, str] = {
    "serve": "modelfn.cli.serve:serve",
    "init": "modelfn.cli.store:init",
    "push": "modelfn.cli.store:push",
    "versions": "modelfn.cli.store:versions",
    "pull": "modelfn.cli.store:pull",
    "bench": "modelfn.cli.bench:bench_command",
    "build": "modelfn.cli.build:build",
    "gateway": "modelfn.cli.gateway:gateway",
    "deploy": "modelfn.cli.deploy:deploy",
    "status": "modelfn.cli.deploy:status",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in COMMANDS:
            module, attr = COMMANDS[cmd_name].split(":")
            command: Any = getattr(importlib.import_module(module), attr)
            return command  # type: ignore[no-any-return]
        return super().get_command(ctx, cmd_name)


@click.group(cls=LazyGroup, context_settings={"auto_envvar_prefix": "MODELFN",
                                               "help_option_names": ["-h", "--help"]})
@click.version_option(package_name="modelfn")
def cli() -> None:
    """modelfn: ONNX and TensorRT models as fast, scale-to-zero KServe V2 endpoints."""


if __name__ == "__main__":
    cli()
