"""The config contract stands on the ground floor: it loads without the engine.

``config.pbtxt`` (``config``, ``config_file``, ``pbtxt``), the datatypes, the names and the
error tree are read by the store, deploy, the gateway and tune. Importing any of them, or
those readers' entry modules, must not load ONNX Runtime nor the engine's modules (the
batcher, the backends, the repository). Each module is imported in a fresh interpreter,
so what it pulls in is its own; a lazy import inside a function does not count until it
runs, and nothing here runs one.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

CONTRACT = (
    "modelfn.runtime.config",
    "modelfn.runtime.config_file",
    "modelfn.runtime.pbtxt",
    "modelfn.runtime.datatypes",
    "modelfn.runtime.names",
    "modelfn.runtime.errors",
)
#: the contract's readers, through the modules they enter by
READERS = (
    "modelfn.model_store.base",
    "modelfn.gateway.router",
    "modelfn.tune.search",
)
ENGINE = (
    "onnxruntime",
    "modelfn.runtime.batching",
    "modelfn.runtime.backends",
    "modelfn.runtime.repository",
)

PROBE = """
import importlib, sys
importlib.import_module(sys.argv[1])
print(" ".join(m for m in sys.argv[2:] if m in sys.modules))
"""


@pytest.mark.parametrize("module", CONTRACT + READERS)
def test_importing_it_leaves_the_engine_unloaded(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, module, *ENGINE],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 0, done.stderr
    loaded = done.stdout.split()
    assert not loaded, f"importing {module} loads the engine: {', '.join(loaded)}"
