"""The synthetic world's scene model: what a scene is made of (shape kinds, colours, sizes, relations), the
``Shape`` / ``Relation`` / ``Scene`` records and ``load_scenes``, which reads a world's ``scenes_<split>.json``.

Both the world generator (``pipeline/world.py``) and its benchmark sets (``pipeline/world_benchmarks.py``) build
on it; it imports neither.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

KINDS = ("circle", "square", "triangle", "diamond", "cross", "hexagon")
COLOURS = {
    "red": (220, 30, 30), "green": (30, 170, 40), "blue": (30, 60, 220), "yellow": (240, 220, 30),
    "purple": (140, 40, 180), "orange": (250, 140, 20), "white": (250, 250, 250), "black": (15, 15, 15),
}
SIZES = {"small": 0.17, "large": 0.32}  # shape side as a fraction of the image side
RELATIONS = ("left of", "right of", "above", "below", "inside")
INVERSE = {"left of": "right of", "right of": "left of", "above": "below", "below": "above"}


@dataclass(frozen=True)
class Shape:
    kind: str
    colour: str
    size: str
    box: tuple[float, float, float, float]  # x1, y1, x2, y2 in pixels (x2/y2 exclusive)

    @property
    def centre(self) -> tuple[float, float]:
        return (self.box[0] + self.box[2]) / 2, (self.box[1] + self.box[3]) / 2


@dataclass(frozen=True)
class Relation:
    subject: int
    relation: str
    object: int


@dataclass
class Scene:
    image_id: int
    shapes: list[Shape]
    relations: list[Relation]


def load_scenes(root: str | Path, split: str) -> list[Scene]:
    """The scene truth of a world's split (``scenes_<split>.json``)."""
    data = json.loads((Path(root) / f"scenes_{split}.json").read_text())
    return [Scene(d["image_id"], [Shape(s["kind"], s["colour"], s["size"], tuple(s["box"])) for s in d["shapes"]],
                  [Relation(**r) for r in d["relations"]]) for d in data]


def world_identity(root: str | Path) -> str | None:
    """A synthetic world's identity: sha256 of its ``world.json`` (its settings, the seed among them) and its caption
    files, so a world regenerated into the same folder with another seed or size differs; None for a folder that is
    not a world. What a captions table made from it records (``inputs.world``) and the verbs check it against."""
    import hashlib

    root = Path(root)
    if not (root / "world.json").is_file():
        return None
    h = hashlib.sha256()
    for p in [root / "world.json", *sorted((root / "annotations").glob("captions_*.json"))]:
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    return h.hexdigest()
