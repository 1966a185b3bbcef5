"""``modelfn init --python NAME``: a model for Triton's Python backend, rendered from the
package's templates (``python_config.pbtxt.j2``, ``python_model.py.j2``).

The model it writes serves as written (OUTPUT = INPUT * 2, FP32 rows of any length), so
``modelfn serve`` answers it at once; its comments say when Triton calls each method.
"""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING

from modelfn.model_store import names
from modelfn.model_store.base import CONFIG_NAME
from modelfn.runtime.errors import InvalidInput

if TYPE_CHECKING:
    from pathlib import Path

#: the scaffold's max_batch_size: the rows one execute() call may get in all
MAX_BATCH_SIZE = 8
#: the file the Python backend loads from a version folder (its default_model_filename)
MODEL_FILE = "model.py"


def scaffold_python(name: str, repo: Path, *, force: bool = False) -> Path:
    """``<repo>/<name>/config.pbtxt`` and ``<repo>/<name>/1/model.py``; returns the latter.
    An existing model folder is replaced only with ``force``."""
    from modelfn.templates import render

    name = names.model_name(name)
    model_dir = repo / name
    if model_dir.exists() and not force and (not model_dir.is_dir() or any(model_dir.iterdir())):
        raise InvalidInput(f"{model_dir} already exists; pass --force to replace it with a "
                           "new Python model")
    variables = {"name": name, "max_batch_size": MAX_BATCH_SIZE}
    config = render("python_config.pbtxt.j2", variables)
    source = render("python_model.py.j2", variables)
    model_file = model_dir / "1" / MODEL_FILE
    try:
        if model_dir.exists():  # --force: the model as init makes it, nothing left over
            shutil.rmtree(model_dir) if model_dir.is_dir() else model_dir.unlink()
        model_file.parent.mkdir(parents=True)
        model_file.write_text(source, encoding="utf-8")
        (model_dir / CONFIG_NAME).write_text(config, encoding="utf-8")
    except OSError as exc:
        raise InvalidInput(f"cannot write the model into {repo}: {exc.strerror or exc}"
                           + (f": {exc.filename}" if exc.filename else "")) from None
    return model_file
