"""A module that fails while it is imported: an init error."""

from __future__ import annotations

from typing import Any


def _load_model() -> None:
    raise RuntimeError("model file is missing: /opt/ml/model.onnx")


_load_model()


def handler(event: Any, context: Any) -> None:
    return None
