"""The modelfn command group: every command is reachable, and --help imports none of them."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from modelfn.cli.main import COMMANDS, cli

HEAVY = ("aiohttp", "boto3", "onnxruntime", "numpy", "kubernetes", "moto", "uvicorn")


def test_help_lists_every_command_without_importing_them() -> None:
    code = ("import sys; from modelfn.cli.main import cli\n"
            "try:\n    cli(['--help'])\nexcept SystemExit:\n    pass\n"
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    for name in COMMANDS:
        assert f"  {name} " in out
    assert out.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_loads_and_has_help(name: str) -> None:
    command = cli.get_command(click.Context(cli), name)
    assert isinstance(command, click.Command)
    result = CliRunner().invoke(cli, [name, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output


def _options(name: str) -> list[tuple[str, click.Option]]:
    """Every option of the command ``name`` and its subcommands, with the path to it."""
    found = []
    commands: list[tuple[str, click.Command]] = [
        (name, cli.get_command(click.Context(cli), name))]  # type: ignore[list-item]
    while commands:
        path, command = commands.pop()
        found += [(path, p) for p in command.params if isinstance(p, click.Option)]
        if isinstance(command, click.Group):
            commands += [(f"{path} {sub}", c) for sub, c in command.commands.items()]
    return found


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_option_says_what_it_does_and_its_environment_variable(name: str) -> None:
    top = click.Context(cli, info_name="modelfn", auto_envvar_prefix="MODELFN")
    for path, option in _options(name):
        assert option.help, f"{path} {option.opts[0]} has no help"
        if option.hidden:  # a deprecated alias: not shown, so no help record
            continue
        ctx = top
        for part in path.split():
            ctx = click.Context(cli, info_name=part, parent=ctx)
        record = option.get_help_record(ctx)
        assert record is not None and "env var:" in record[1], f"{path} {option.opts[0]}"


def test_durations_read_the_same_in_every_command() -> None:
    """``5s``, ``500ms``, ``1m`` and bare seconds are one type: bench once refused ``2s``
    where tune and dev took it."""
    from modelfn.cli.params import DURATION

    for path, option in [o for name in COMMANDS for o in _options(name)]:
        if option.opts[0] in {"--duration", "--warmup", "--timeout", "--wait", "--idle",
                              "--drain", "--cold-budget", "--reload", "--time-budget"}:
            assert option.type.name == DURATION.name, f"{path} {option.opts[0]}"
    result = CliRunner().invoke(cli, ["bench", "http://127.0.0.1:9", "--model", "m",
                                      "--duration", "2x"])
    assert result.exit_code == 2
    assert "'2x' is not a duration" in result.output
