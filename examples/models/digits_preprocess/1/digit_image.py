"""An image of one handwritten digit -> the ``digits`` model's input row.

sklearn's 8×8 digits (UCI optdigits) were made from scanned forms: each digit's bitmap was
fitted into a 32×32 box, then every 4×4 block's count of inked pixels (0 to 16) became one
of the 64 values. ``to_row`` does the same to any picture of a digit, of any size, dark
ink on light paper or light on dark: greyscale, ink as the bright side, crop to the ink,
centre it in a square, scale to 32×32, then average each 4×4 block, which gives the
values in [0, 1] that ``digits`` takes (sklearn's counts divided by 16).

Plain numpy and Pillow, so ``make_digits_image.py`` and ``model.py`` share it.
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image, UnidentifiedImageError

#: the box a digit is fitted into before its 4×4 blocks are counted
BOX = 32
#: the side of the model's input image
SIDE = 8
#: a pixel is ink when it is at least this share of the way from the paper to the darkest
#: (after inversion: brightest) pixel; the crop keeps every such pixel
INK = 0.15
#: Pillow refuses images of more pixels than this (its decompression-bomb guard)
MAX_PIXELS = 4096 * 4096


class NotAnImage(Exception):
    """The bytes are no image Pillow can decode."""


def decode(data: bytes) -> np.ndarray:
    """The image's grey levels in [0, 1] (FP32, height × width)."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            if image.width * image.height > MAX_PIXELS:
                raise NotAnImage(f"a {image.width}×{image.height} image: more than "
                                 f"{MAX_PIXELS} pixels (4096×4096)")
            grey = image.convert("L")
    except UnidentifiedImageError:
        raise NotAnImage(f"{len(data)} bytes in no image format Pillow reads (PNG, JPEG, "
                         "...)") from None
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise NotAnImage(f"{len(data)} bytes of a broken image: {exc}") from None
    return np.asarray(grey, dtype=np.float32) / 255.0


def ink(grey: np.ndarray) -> np.ndarray:
    """The ink in [0, 1]: the paper (the border's median) at 0, the strongest ink at 1."""
    border = np.concatenate([grey[0], grey[-1], grey[:, 0], grey[:, -1]])
    paper = float(np.median(border))
    amount = grey - paper if paper < 0.5 else paper - grey
    np.clip(amount, 0.0, None, out=amount)
    top = float(amount.max())
    return amount / top if top > 0 else amount


def centred(amount: np.ndarray) -> np.ndarray:
    """The ink cropped to its bounding box, centred in a square of the longer side."""
    rows = np.flatnonzero((amount >= INK).any(axis=1))
    cols = np.flatnonzero((amount >= INK).any(axis=0))
    crop = amount[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1]
    side = max(crop.shape)
    square = np.zeros((side, side), np.float32)
    top, left = (side - crop.shape[0]) // 2, (side - crop.shape[1]) // 2
    square[top:top + crop.shape[0], left:left + crop.shape[1]] = crop
    return square


def to_row(data: bytes) -> np.ndarray:
    """The ``digits`` input (FP32 [64], row by row, in [0, 1]) for an encoded image; a
    blank image (no ink) gives zeros."""
    amount = ink(decode(data))
    if not (amount >= INK).any():
        return np.zeros(SIDE * SIDE, np.float32)
    square = Image.fromarray(centred(amount), mode="F").resize((BOX, BOX), Image.BILINEAR)
    box = np.clip(np.asarray(square, dtype=np.float32), 0.0, 1.0)
    blocks = box.reshape(SIDE, BOX // SIDE, SIDE, BOX // SIDE).mean(axis=(1, 3))
    return blocks.reshape(-1).astype(np.float32)
