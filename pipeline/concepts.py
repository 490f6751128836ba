"""``Concept``: one object, attribute or relation of a caption's scene graph, with its character span (what
both parsers, the rule parser ``pipeline.scene_graph`` and the SceneGraphParser adapter ``pipeline.sng``, return)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Concept:
    concept_id: int
    kind: str
    text: str
    char_start: int
    char_end: int
    subject_id: int | None = None
    object_id: int | None = None
    phrase: str = ""
    tokens: tuple[int, ...] = field(default=(), repr=False)
