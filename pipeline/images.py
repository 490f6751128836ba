"""Image sizes as the sources record them: read from each image's header once, as displayed (EXIF orientation
applied); a missing or unreadable file is remembered as the message that says so (the caller's error row)."""
from __future__ import annotations

from pathlib import Path

from data_schemas.geometry import displayed_size


class ImageSizes:
    """Image sizes read from the files once each (header only); failures are remembered as error messages."""

    def __init__(self, root: Path):
        self.root = root
        self.sizes: dict[str, tuple[int, int] | str] = {}

    def size(self, file_name: str) -> tuple[int, int] | str:
        if file_name not in self.sizes:
            from PIL import Image, UnidentifiedImageError

            path = self.root / file_name
            if not path.is_file():
                self.sizes[file_name] = f"{path}: image file not found"
            else:
                try:
                    with Image.open(path) as im:
                        self.sizes[file_name] = displayed_size(im)
                except (OSError, UnidentifiedImageError, ValueError) as exc:
                    self.sizes[file_name] = f"{path}: unreadable image ({exc})"
        return self.sizes[file_name]
