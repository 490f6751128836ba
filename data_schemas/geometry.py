"""The patch-index contract of ``patch_masks``: boxes (original pixels) -> ViT patch indices, for the
evaluation preprocessing and for training crops (used by the pipeline and by the training data alike).

A crop is ``(top, left, height, width)`` in original pixels, resized to ``image_size`` x ``image_size``
(anisotropically, as torchvision's RandomResizedCrop does). A patch (row-major index r * grid + c, no CLS
offset) is masked iff the box overlaps it with positive area *after* the crop; boxes outside the visible crop
mark nothing (the official code marks border patches for them).
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Iterable

PREPROCESS = "resize-center-crop"
# the paper's backbone: the default architecture of every stage (tokenizer, patch grid, training, evaluation)
DEFAULT_ARCH = "ViT-B-32"


@dataclass(frozen=True)
class Geometry:
    image_size: int
    patch_size: int

    @property
    def grid(self) -> int:
        return self.image_size // self.patch_size

    def __post_init__(self):
        if self.patch_size <= 0 or self.image_size % self.patch_size:
            raise ValueError(f"image_size {self.image_size} is not a multiple of patch_size {self.patch_size}")


def eval_crop(width: int, height: int, size: int) -> tuple[float, float, float, float]:
    """The region of the original image that Resize(size) + CenterCrop(size) keeps, as (top, left, h, w).

    Follows torchvision: the short side becomes ``size``, the long side ``int(size * long / short)``, and the
    centre crop offset is ``int(round((resized - size) / 2))``.
    """
    if width <= 0 or height <= 0:
        raise ValueError(f"image size must be positive, got {width}x{height}")
    if width <= height:
        new_w, new_h = size, int(size * height / width)
    else:
        new_w, new_h = int(size * width / height), size
    sx, sy = new_w / width, new_h / height
    top = int(round((new_h - size) / 2.0))
    left = int(round((new_w - size) / 2.0))
    return top / sy, left / sx, size / sy, size / sx


def box_in_crop(box: Iterable[float], crop: tuple[float, float, float, float], size: int
                ) -> tuple[float, float, float, float] | None:
    """The box in output pixels after the crop, clipped to the output; None if no positive area remains."""
    x1, y1, x2, y2 = box
    top, left, h, w = crop
    sx, sy = size / w, size / h
    nx1, ny1 = max((x1 - left) * sx, 0.0), max((y1 - top) * sy, 0.0)
    nx2, ny2 = min((x2 - left) * sx, float(size)), min((y2 - top) * sy, float(size))
    if nx2 <= nx1 or ny2 <= ny1:
        return None
    return nx1, ny1, nx2, ny2


def box_patches(box: Iterable[float], crop: tuple[float, float, float, float], geo: Geometry) -> list[int]:
    """Row-major patch indices that the box overlaps with positive area after the crop."""
    b = box_in_crop(box, crop, geo.image_size)
    if b is None:
        return []
    p, g = geo.patch_size, geo.grid
    c0, r0 = int(b[0] // p), int(b[1] // p)
    c1, r1 = min(math.ceil(b[2] / p), g) - 1, min(math.ceil(b[3] / p), g) - 1
    return [r * g + c for r in range(r0, r1 + 1) for c in range(c0, c1 + 1)]


def boxes_patches(boxes: Iterable[Iterable[float]], crop, geo: Geometry) -> list[int]:
    out: set[int] = set()
    for b in boxes:
        out.update(box_patches(b, crop, geo))
    return sorted(out)


def eval_patches(boxes, width: int, height: int, geo: Geometry) -> list[int]:
    """Patch indices under the deterministic evaluation preprocessing (resize shorter side + centre crop)."""
    return boxes_patches(boxes, eval_crop(width, height, geo.image_size), geo)


def random_rectangle(grid: int, ratio: float, rng: random.Random) -> list[int]:
    """A random rectangle of about ``ratio`` of the grid (the reference's rule, on the *correct* grid).

    target = round(n * ratio) clamped to [1, n]; h, w drawn uniformly from 1..grid until
    |h*w - target| <= max(1, 0.25 * target); placed uniformly at random. ratio <= 0 masks nothing.
    """
    n = grid * grid
    if ratio <= 0:
        return []
    if ratio >= 1:
        return list(range(n))
    target = min(max(round(n * ratio), 1), n)
    tol = max(1.0, 0.25 * target)
    while True:
        h, w = rng.randint(1, grid), rng.randint(1, grid)
        if abs(h * w - target) <= tol:
            break
    top, left = rng.randint(0, grid - h), rng.randint(0, grid - w)
    return [r * grid + c for r in range(top, top + h) for c in range(left, left + w)]


EXIF_ORIENTATION = 0x0112


def displayed_size(image) -> tuple[int, int]:
    """(width, height) of a PIL image as displayed: EXIF orientations 5-8 turn it by 90 degrees. Annotations,
    boxes, patch masks and training crops all live in this frame (every stage loads images through
    ``ImageOps.exif_transpose``), so a phone photo's boxes and pixels agree."""
    w, h = image.size
    return (h, w) if image.getexif().get(EXIF_ORIENTATION, 1) in (5, 6, 7, 8) else (w, h)


def to_rgb(img):
    """``img`` as 8-bit RGB. A 16-bit grayscale PNG opens as ``I;16`` (or ``I``) and Pillow's ``convert("RGB")``
    clips each 0-65535 value at 255: the image trained as pure white. Those modes are scaled by 1/257 (65535 -> 255);
    an ``I`` image outside 0-65535 (a 32-bit TIFF) is stretched from its minimum to its maximum. Every stage that
    reads pixels (training, grounding, the benchmarks, the probes) loads through here."""
    if img.mode not in ("I", "I;16", "I;16L", "I;16B", "I;16N"):
        return img.convert("RGB")
    import numpy as np
    from PIL import Image

    a = np.asarray(img).astype(np.float64)
    low, high = (float(a.min()), float(a.max())) if a.size else (0.0, 0.0)
    if img.mode == "I" and (low < 0 or high > 65535):
        a = (a - low) * (255 / (high - low)) if high > low else np.zeros_like(a)
    else:
        a = a / 257
    return Image.fromarray(np.clip(np.rint(a), 0, 255).astype(np.uint8)).convert("RGB")  # mode L


def preprocessed(preprocess, paths) -> list:
    """Each image of ``paths`` opened, made RGB (``to_rgb``) and put through ``preprocess`` (a model's transform),
    in order: what the probes and the neighbour embeddings stack into a batch."""
    from PIL import Image

    out = []
    for path in paths:
        with Image.open(path) as im:
            out.append(preprocess(to_rgb(im)))
    return out
