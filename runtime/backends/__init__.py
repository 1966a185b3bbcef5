"""Backends by platform name. Importing this package registers the built-in ones."""

from modelfn.runtime.backends import onnxruntime as _onnxruntime  # noqa: F401
from modelfn.runtime.backends import tensorrt as _tensorrt  # noqa: F401
from modelfn.runtime.backends.base import BACKENDS, Backend, Signature, TensorSpec
from modelfn.runtime.backends.python import backend as _python  # noqa: F401

__all__ = ["BACKENDS", "Backend", "Signature", "TensorSpec"]
