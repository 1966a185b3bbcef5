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
