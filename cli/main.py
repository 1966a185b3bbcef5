"""The ``modelfn`` command: a thin click group whose subcommands load on demand.

Subcommands are imported only when invoked, so ``modelfn serve`` pays no
import cost for boto3, aiohttp or the image builder on a cold start.
"""

from __future__ import annotations

import importlib
from typing import Any

import click

from modelfn.cli.errors import INTERRUPTED

#: command name -> ("module:attribute" of its click command, its one-line help). ``--help``
#: lists the commands from this table, so it imports none of them (nor what they need).
COMMANDS: dict[str, tuple[str, str]] = {
    "init": ("modelfn.cli.store:init", "Scaffold a model from an ONNX file, or a Python one."),
    "push": ("modelfn.cli.store:push", "Push a model version to the model store."),
    "versions": ("modelfn.cli.store:versions", "List a model's versions in the store."),
    "pull": ("modelfn.cli.store:pull", "Check a version out of the store as a repository."),
    "serve": ("modelfn.cli.serve:serve", "Serve a repository (or store versions) over V2."),
    "bench": ("modelfn.cli.bench:bench_command", "Load a V2 endpoint; throughput, latency."),
    "tune": ("modelfn.cli.tune:tune", "Measure configs on this machine; pick the fastest."),
    "invoke": ("modelfn.cli.invoke:invoke", "One V2 inference against any URL; print outputs."),
    "build": ("modelfn.cli.build:build", "Build a function image for a model version."),
    "deploy": ("modelfn.cli.deploy:deploy", "Deploy a version as a scale-to-zero function."),
    "traffic": ("modelfn.cli.manage:traffic", "Set a deployed model's split (2=100 promotes)."),
    "rollback": ("modelfn.cli.manage:rollback", "Restore a deployed model's previous split."),
    "status": ("modelfn.cli.manage:status", "Versions, URLs, split and Ready of a deployment."),
    "undeploy": ("modelfn.cli.manage:undeploy", "Remove a deployed model or one version."),
    "gateway": ("modelfn.cli.gateway:gateway", "One V2 endpoint for every deployed model."),
    "dev": ("modelfn.cli.dev:dev", "Run the local platform (S3, Lambda, Knative, gateway)."),
}


def _show_envvars(command: click.Command) -> None:
    """Every option of every command can come from an environment variable (its own, or
    ``MODELFN_<COMMAND>_<OPTION>`` from the group's prefix): ``--help`` names it."""
    commands = [command]
    while commands:
        current = commands.pop()
        for param in current.params:
            if isinstance(param, click.Option) and param.allow_from_autoenv:
                param.show_envvar = True
        if isinstance(current, click.Group):
            commands.extend(current.commands.values())


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in COMMANDS:
            module, attr = COMMANDS[cmd_name][0].split(":")
            command: Any = getattr(importlib.import_module(module), attr)
            _show_envvars(command)
            return command  # type: ignore[no-any-return]
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        """Ctrl-C that reaches here (a command with no handler of its own) exits 130, as a
        shell reports a command stopped by SIGINT, where click would say "Aborted!" and
        exit 1."""
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            raise SystemExit(INTERRUPTED) from None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)
                if name in COMMANDS]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"auto_envvar_prefix": "MODELFN",
                                               "help_option_names": ["-h", "--help"]})
@click.version_option(package_name="modelfn")
def cli() -> None:
    """modelfn: ONNX and TensorRT models as fast, scale-to-zero KServe V2 endpoints."""


if __name__ == "__main__":
    cli()
