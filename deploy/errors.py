"""Errors of image builds and deploys, in modelfn's one hierarchy (status code included)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from modelfn.runtime.errors import ModelfnError

if TYPE_CHECKING:
    from collections.abc import Sequence


class BuildError(ModelfnError):
    """An image build or push failed; carries the command and the tail of its output."""

    status_code = 500

    def __init__(
        self,
        message: str,
        *,
        command: Sequence[str] = (),
        returncode: int | None = None,
        output_tail: Sequence[str] = (),
    ) -> None:
        text = message
        if returncode is not None:
            text += f" (exit status {returncode})"
        if output_tail:
            text += "\n" + "\n".join(output_tail)
        super().__init__(text)
        self.command = list(command)
        self.returncode = returncode
        self.output_tail = list(output_tail)


class DeployError(ModelfnError):
    """A platform refused or failed a deploy step; the message names the step."""

    status_code = 500
