"""What stops ``modelfn tune`` before it measures anything, with the status it maps to."""

from __future__ import annotations

from modelfn.runtime.errors import ModelfnError


class TuneError(ModelfnError):
    """The command line asks for something tune cannot do (exit code 2)."""

    status_code = 400


class ModelDirNotFound(ModelfnError):
    """REPO/NAME, given on the command line, is not a model directory: a usage error (exit
    code 2, as click gives a missing path)."""

    status_code = 400

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}; expected a model directory REPO/NAME with a "
                         "config.pbtxt or version folders (1/model.onnx), as modelfn init "
                         "writes")
        self.path = path


class BaselineFailed(ModelfnError):
    """The model's current config could not be served, so there is nothing to compare to."""

    status_code = 503

    def __init__(self, problem: str) -> None:
        super().__init__(f"the current config could not be measured: {problem}")
