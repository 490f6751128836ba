"""Image sizes as the sources record them: read from each image's header once, as displayed (EXIF orientation
applied); a missing, unreadable or too large file is remembered as the problem that says so (the caller's error
row, ``ImageProblem.reason``).

An image whose header claims more pixels than Pillow's decompression-bomb limit (``2 * Image.MAX_IMAGE_PIXELS``,
178,956,970 pixels by default, e.g. 13,377 x 13,377; Pillow refuses to open it) is ``image_too_large``: a 69-byte
file can claim 30,000 x 30,000 pixels, and decoding it would take gigabytes.
"""
from __future__ import annotations

import re
from pathlib import Path

from data_schemas.geometry import displayed_size


class ImageProblem(str):
    """Why an image cannot be used (the message); ``reason`` is the error row's reason code."""

    def __new__(cls, message: str, reason: str):
        obj = super().__new__(cls, message)
        obj.reason = reason
        return obj


def too_large(path: Path, exc: Exception) -> ImageProblem:
    """The problem of an image Pillow refused as a decompression bomb, with the pixel count its header claims."""
    m = re.search(r"\((\d+) pixels\)", str(exc))
    claimed = f"{int(m.group(1)):,} pixels" if m else "more pixels than Pillow's limit"
    return ImageProblem(f"{path}: image too large: its header claims {claimed} (the limit is Pillow's "
                        f"decompression-bomb limit)", "image_too_large")


class ImageSizes:
    """Image sizes read from the files once each (header only); failures are remembered as ``ImageProblem``s."""

    def __init__(self, root: Path):
        self.root = root
        self.sizes: dict[str, tuple[int, int] | ImageProblem] = {}

    def size(self, file_name: str) -> tuple[int, int] | ImageProblem:
        if file_name not in self.sizes:
            from PIL import Image, UnidentifiedImageError

            path = self.root / file_name
            if not path.is_file():
                self.sizes[file_name] = ImageProblem(f"{path}: image file not found", "missing_image")
            else:
                try:
                    with Image.open(path) as im:
                        self.sizes[file_name] = displayed_size(im)
                except Image.DecompressionBombError as exc:
                    self.sizes[file_name] = too_large(path, exc)
                except (OSError, UnidentifiedImageError, ValueError) as exc:
                    self.sizes[file_name] = ImageProblem(f"{path}: unreadable image ({exc})", "unreadable_image")
        return self.sizes[file_name]
