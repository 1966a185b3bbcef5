"""Model names and references: the one rule for what a model may be called.

A model name becomes a directory in a repository and a key segment in a store,
so it is an allowlist (letters, digits, ``_``, ``-``, ``.``; not starting with
``.``), which rules out ``../x``, ``a/b``, hidden files and control characters. It is
also one file name on disk (``<repo>/<model>``, ``<cache>/<model>``, a routing table's
``.<model>.json.tmp``), so it is capped well under the usual 255-byte limit.
"""

from __future__ import annotations

import re

from modelfn.runtime.errors import InvalidInput

VERSION_DIR = re.compile(r"[1-9][0-9]*")
#: a version is an int64 (Triton's): no more digits than 2**63 - 1 has. Longer strings are
#: refused before ``int()``, which raises ValueError past 4,300 digits
VERSION_DIGITS_MAX = 19
#: the longest model name: what is left of a 255-byte file name once the store has added
#: its temporary prefixes and suffixes
MAX_MODEL_NAME = 200
MODEL_NAME = re.compile(rf"[A-Za-z0-9_][A-Za-z0-9_.\-]{{0,{MAX_MODEL_NAME - 1}}}")


def check_model_name(name: str) -> str:
    if len(name) > MAX_MODEL_NAME:
        raise InvalidInput(f"invalid model name '{name[:32]}...': {len(name)} characters, "
                           f"at most {MAX_MODEL_NAME} are allowed")
    if not MODEL_NAME.fullmatch(name):
        raise InvalidInput(
            f"invalid model name '{name}': use letters, digits, '_', '-' and '.', "
            "not starting with '.' or '-'"
        )
    return name


def parse_model_ref(ref: str) -> tuple[str, int | None]:
    """``name``, ``name:latest`` (version None) or ``name:version`` (a pinned version)."""
    name, _, version = ref.partition(":")
    check_model_name(name)
    if not version or version == "latest":
        return name, None
    number = version_of(version)
    if number is None:
        raise InvalidInput(f"invalid version '{short_text(version)}' in '{short_text(ref)}': "
                           "versions are positive 64-bit integers (or 'latest')")
    return name, number


def version_of(text: str) -> int | None:
    """The version ``text`` spells as a REST path or a ref does (``[1-9][0-9]*``, within an
    int64), or None."""
    if len(text) > VERSION_DIGITS_MAX or not VERSION_DIR.fullmatch(text):
        return None
    return int(text)


def short_text(text: str, most: int = 64) -> str:
    """``text`` for a message: at most ``most`` characters, the rest elided."""
    return text if len(text) <= most else f"{text[:most]}... ({len(text)} characters)"
