"""Where the commands print their tables."""

from __future__ import annotations

from rich.console import Console

#: the width a log or a pipe gets: a table is not squeezed into 80 columns there
UNBOUNDED_WIDTH = 160


def table_console() -> Console:
    """The terminal's console, or, when stdout is a log or a pipe, one UNBOUNDED_WIDTH wide."""
    console = Console()
    return console if console.is_terminal else Console(width=UNBOUNDED_WIDTH)
