"""Text -> token ids for the ``snippet_classifier`` model.

Lower-cased, then split by one regular expression into words (``[a-z_][a-z0-9_]*``),
numbers and single symbols (every other non-space character: ``$``, ``(``, ``|``, ``:``,
which tell code from prose as much as words do). Each token's id is its line in
``vocab.txt`` (beside this file, written by ``make_snippet.py``), counted from 0: line 0 is
the padding token, line 1 the one for tokens the vocabulary lacks. A text gives ``LENGTH``
ids: its first ``LENGTH`` tokens, padded with 0, whose weights in the classifier are 0.

Plain Python and numpy, so ``make_snippet.py`` and ``model.py`` share it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Iterable
    from pathlib import Path

TOKEN = re.compile(r"[a-z_][a-z0-9_]*|[0-9]+|[^\sa-z0-9_]")
PAD, UNKNOWN = "<pad>", "<unk>"
#: the ids a text gives (the classifier's input size)
LENGTH = 64


def tokens(text: str) -> list[str]:
    return TOKEN.findall(text.lower())


def read_vocabulary(path: Path) -> dict[str, int]:
    """token -> id, from a file of one token a line (line N is id N)."""
    words = path.read_text(encoding="utf-8").split("\n")
    if words[-1] == "":
        words.pop()
    if words[:2] != [PAD, UNKNOWN]:
        raise ValueError(f"{path}: the first two lines must be {PAD} and {UNKNOWN}")
    return {word: index for index, word in enumerate(words)}


def ids(texts: Iterable[str], vocabulary: dict[str, int]) -> np.ndarray:
    """INT64 [len(texts), LENGTH]: each text's first LENGTH token ids, padded with 0."""
    texts = list(texts)
    out = np.zeros((len(texts), LENGTH), np.int64)
    unknown = vocabulary[UNKNOWN]
    for row, text in enumerate(texts):
        found = [vocabulary.get(token, unknown) for token in tokens(text)[:LENGTH]]
        out[row, :len(found)] = found
    return out
