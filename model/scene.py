"""Scene supervision for the image tower: the first stage of the synthetic world's stand-in for pretrained CLIP.

Pretrained CLIP's image side already carries compositional structure (where things are, which colour goes
with which shape) that its text side fails to use (Kamath et al., EMNLP 2023; Yuksekgonul et al., ICLR 2023).
A tiny tower trained contrastively from scratch on the world learns none of it (a linear probe from its image
embedding to a shape's position scores R^2 ~ 0), so the demo's base image tower is first trained on the
world's scene truth (training split only): from the global image embedding, for every colour, whether a shape
of that colour is present and, where exactly one is, its centre (x, y), kind and size. The heads are
training-only; the export is the plain CLIP. ``SceneTask`` is the training task of ``mode: scene``.

The scene truth is the world's ``scenes_<split>.json`` (shapes with kind, colour, size and box in pixels) and
its vocabulary ``world.json`` beside it; ``model`` reads the files and never imports ``pipeline``.
"""
from __future__ import annotations

import math
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from .losses import SCENE_WEIGHTS, scene_terms, total_loss
from .masked import tower_shapes

# per colour slot: present, unique, centre x, centre y (in [0, 1] of the image), kind index, size index
SLOT_FIELDS = ("present", "unique", "cx", "cy", "kind", "size")


@dataclass(frozen=True)
class SceneVocab:
    colours: tuple[str, ...]
    kinds: tuple[str, ...]
    sizes: tuple[str, ...]

    @classmethod
    def from_world(cls, world_json: str | Path) -> "SceneVocab":
        path = Path(world_json)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: the world's vocabulary file is missing (scene supervision needs it)")
        w = json.loads(path.read_text())
        return cls(tuple(w["colours"]), tuple(w["kinds"]), tuple(w["sizes"]))


def scene_targets(scenes_json: str | Path, vocab: SceneVocab | None = None) -> tuple[dict[str, torch.Tensor],
                                                                                     SceneVocab]:
    """{file_name: [C, 6] float tensor of SLOT_FIELDS per colour} from a world's ``scenes_<split>.json`` (the
    vocabulary from ``world.json`` beside it unless given). A colour that occurs twice is present but not
    unique: its position, kind and size are not supervised. A shape whose colour, kind or size is not in the
    vocabulary, or whose box is not inside the image, is an error naming the file and the image."""
    path = Path(scenes_json)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: scene truth not found (mode 'scene' needs the world's scenes_<split>.json)")
    world_json = path.parent / "world.json"
    vocab = vocab or SceneVocab.from_world(world_json)
    size_px = json.loads(world_json.read_text())["config"]["size"]
    col = {c: i for i, c in enumerate(vocab.colours)}
    kind = {k: i for i, k in enumerate(vocab.kinds)}
    size = {s: i for i, s in enumerate(vocab.sizes)}
    out: dict[str, torch.Tensor] = {}
    for scene in json.loads(path.read_text()):
        t = torch.zeros(len(vocab.colours), len(SLOT_FIELDS))
        counts = [0] * len(vocab.colours)
        for s in scene["shapes"]:
            for name, table in (("colour", col), ("kind", kind), ("size", size)):
                if s[name] not in table:
                    raise ValueError(f"{path}: image {scene['file_name']}: {name} {s[name]!r} not in the vocabulary")
            x1, y1, x2, y2 = s["box"]
            if not (0 <= x1 < x2 <= size_px and 0 <= y1 < y2 <= size_px):
                raise ValueError(f"{path}: image {scene['file_name']}: box {s['box']} outside {size_px}x{size_px}")
            c = col[s["colour"]]
            counts[c] += 1
            t[c] = torch.tensor([1.0, 1.0, (x1 + x2) / 2 / size_px, (y1 + y2) / 2 / size_px, kind[s["kind"]],
                                 size[s["size"]]])
        for c, n in enumerate(counts):
            if n > 1:
                t[c, 1:] = 0.0
                t[c, 0] = 1.0
        out[scene["file_name"]] = t
    return out, vocab


def crop_targets(t: torch.Tensor, crop: tuple[int, int, int, int], width: int, height: int) -> torch.Tensor:
    """The targets after a (top, left, h, w) crop of a ``width`` x ``height`` image: centres move with the crop;
    a centre that leaves the crop is no longer supervised (unique cleared)."""
    top, left, h, w = crop
    t = t.clone()
    cx = (t[:, 2] * width - left) / w
    cy = (t[:, 3] * height - top) / h
    inside = (cx >= 0) & (cx <= 1) & (cy >= 0) & (cy <= 1)
    t[:, 2], t[:, 3] = cx.clamp(0, 1), cy.clamp(0, 1)
    t[:, 1] = t[:, 1] * inside.float()
    return t


class SceneTask(nn.Module):
    """CLIP + training-only linear heads on the global image embedding; the loss is ``losses.scene_terms``
    (presence, and for colours that occur once centre, kind and size; weights ``losses.SCENE_WEIGHTS``). Only the
    image tower is trained."""
    masks_text = masks_image = reads_text = False  # model.training_task.TrainingTask
    logit_scale_max = math.log(100)


    def __init__(self, clip: nn.Module, vocab: SceneVocab, weights: dict[str, float] | None = None):
        super().__init__()
        self.clip, self.vocab, self.weights = clip, vocab, dict(weights or SCENE_WEIGHTS)
        dim = tower_shapes(clip)["embed"]  # what encode_image returns (CLIP: visual.proj's; SigLIP: the MAP head's)
        C, K, S = len(vocab.colours), len(vocab.kinds), len(vocab.sizes)
        self.sizes = (C, K, S)
        self.scene_head = nn.Linear(dim, C * (1 + 2 + K + S))
        for p in clip.parameters():
            p.requires_grad_(False)
        for p in clip.visual.parameters():
            p.requires_grad_(True)

    def sizes_for(self, batch: dict) -> None:
        return None  # no shapes to precompute (``MaccoTask.sizes_for``)

    def forward(self, batch: dict[str, torch.Tensor], stats: bool = True, sizes=None) -> dict[str, torch.Tensor]:
        """The training tasks' signature: the batch's ``image`` and its ``scene`` targets -> the named terms."""
        images, targets = batch["image"], batch["scene"]
        C, K, S = self.sizes
        z = self.clip.encode_image(images)
        out = self.scene_head(z).float().view(-1, C, 1 + 2 + K + S)
        present, unique = targets[..., 0], targets[..., 1] > 0
        terms = scene_terms(out, targets, K)
        terms["total_loss"] = total_loss(terms, self.weights)
        if stats:
            with torch.no_grad():
                terms["presence_acc"] = ((out[..., 0] > 0).float() == present).float().mean()
                if unique.any():
                    terms["kind_acc"] = (out[unique][:, 3:3 + K].argmax(-1) == targets[unique][:, 4]).float().mean()
        return terms
