"""Validation of everything that becomes part of a store key or a local path.

Model names and file paths come from users, from local directories and from
manifests read back from a store that someone else may have written, so every
one of them is checked before it is joined to a prefix or a directory.
"""

from __future__ import annotations

import re

from modelfn.model_store.errors import InvalidName
from modelfn.runtime.errors import InvalidInput
from modelfn.runtime.names import VERSION_DIGITS_MAX, check_model_name, short_text

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

#: where the files of the model directory that a config names (label files) are kept in
#: a version (``<model>/<version>/.model/<file>``), apart from the version's own files
MODEL_FILES_DIR = ".model"
#: names a pushed file may not have at the top of a version directory
RESERVED_IN_VERSION: frozenset[str] = frozenset(
    {"MANIFEST.json", ".claim.json", "engines", MODEL_FILES_DIR})
#: the routing tables' directory at the root of a store (``routes``)
ROUTES_DIR = "_routes"
#: the TensorRT engines' directory at the root of the local cache (``cache``)
ENGINES_DIR = "engines"
#: names beside the models that the store or its local cache keep for themselves
RESERVED_MODELS: dict[str, str] = {
    ROUTES_DIR: "the model store keeps its routing tables there",
    ENGINES_DIR: "the local cache keeps TensorRT engines there",
}


def _check_segment(what: str, value: str, segment: str) -> None:
    if segment == "":
        raise InvalidName(what, value, "empty path segment (leading, trailing or double '/')")
    if segment in (".", ".."):
        raise InvalidName(what, value, f"'{segment}' segments are not allowed")


def _check_common(what: str, value: str) -> None:
    if value == "":
        raise InvalidName(what, value, "must not be empty")
    if _CONTROL.search(value):
        raise InvalidName(what, value, "control characters are not allowed")
    if "\\" in value:
        raise InvalidName(what, value, "backslashes are not allowed; use '/'")
    if value.startswith("/"):
        raise InvalidName(what, value, "absolute paths are not allowed")


def model_name(name: str) -> str:
    """A model name: one path segment, as Triton's repository layout needs, and within
    the runtime's rule (``check_model_name``) so whatever is pushed can be served."""
    _check_common("model name", name)
    for segment in name.split("/"):
        _check_segment("model name", name, segment)
    if "/" in name:
        raise InvalidName("model name", name, "'/' is not allowed in a model name")
    if name in RESERVED_MODELS:
        raise InvalidName("model name", name, f"the name is reserved: {RESERVED_MODELS[name]}")
    return check_model_name(name)


def model_file_name(name: str) -> str:
    """A file of the model directory that a config names (``label_filename``): a plain file
    name beside config.pbtxt, as Triton has it."""
    relative_path(name)
    if "/" in name:
        raise InvalidName("file name", name, "must be a file name in the model directory")
    return name


def relative_path(path: str) -> str:
    """A '/'-separated path inside a version directory; no way out of it."""
    _check_common("file path", path)
    for segment in path.split("/"):
        _check_segment("file path", path, segment)
    return path


def version_number(version: int | str) -> int:
    """A positive integer version from an int or its decimal string."""
    if isinstance(version, str):
        if not (version.isascii() and version.isdecimal()) or len(version) > \
                VERSION_DIGITS_MAX:
            raise InvalidInput(f"invalid version {short_text(version)!r}: expected a "
                               "positive integer (64-bit)")
        version = int(version)
    if isinstance(version, bool) or version < 1:
        raise InvalidInput(f"invalid version {version!r}: expected a positive integer")
    return version


def parse_version_dir(name: str) -> int | None:
    """The version a store directory name denotes, or None for other directories."""
    if name.isdecimal() and not name.startswith("0"):
        return int(name)
    return None


def version_key(name: str, version: int, path: str) -> str:
    """The store key of a version's own file."""
    return f"{name}/{version}/{path}"


def model_file_key(name: str, version: int, path: str) -> str:
    """The store key of a model file (one its config names) kept with a version."""
    return f"{name}/{version}/{MODEL_FILES_DIR}/{path}"
