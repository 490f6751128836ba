"""The masks stage: per grounded phrase and per model patch grid, the patches its boxes cover under the evaluation
preprocessing (``patch_masks``, ``errors``)."""
from __future__ import annotations

from array import array
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from data_schemas import ROWS_PER_PART, TABLES, write_table
from data_schemas.errors import error_row
from data_schemas.geometry import DEFAULT_ARCH
from data_schemas.provenance import closure_version
from pipeline.shards import only_stage


@dataclass
class MasksConfig:
    models: tuple[str, ...] = (DEFAULT_ARCH,)  # the architectures whose patch grids to write (open_clip names)

    def __post_init__(self):
        from data_schemas.config import ConfigError

        self.models = tuple(self.models)
        if not self.models:
            raise ConfigError("masks models: at least one architecture")


def masks_stage(cfg: MasksConfig, captions: Iterable[dict], regions: Iterable[dict], out: Path) -> dict[str, dict]:
    """``out/patch_masks``: per phrase and per model grid, the patches of its boxes (evaluation preprocessing);
    ``out/errors`` (stage ``masks``): a box that is not finite, not inside its image with positive area, or of a
    caption the captions table lacks is an error row, never a crash or a silently empty mask.

    Memory: the regions stream through once (``regions`` may be an iterator), their boxes kept as numbers (48 bytes
    a box), and the mask rows are written part by part as they are made, in (caption, concept) order."""
    from pipeline.grounding.plan import box_problem

    models = list(cfg.models)
    size = {c["caption_id"]: {"image_id": c["image_id"], "width": c["width"], "height": c["height"]}
            for c in captions}
    caption_ids, concept_ids, boxes = array("q"), array("q"), array("d")
    errors = []
    for r in regions:
        item = f"{r['caption_id']}:{r['concept_id']}:{r['box_id']}"
        cap = size.get(r["caption_id"])
        problem = ("unknown_caption", f"region {item}: caption {r['caption_id']} is not in the captions table") \
            if cap is None else box_problem(r["box_xyxy"], cap)
        if problem is not None:
            errors.append(error_row("masks", item, problem[0], f"region {item} (caption {r['caption_id']}, "
                                                               f"concept {r['concept_id']}): {problem[1]}"))
            continue
        caption_ids.append(r["caption_id"])
        concept_ids.append(r["concept_id"])
        boxes.extend(r["box_xyxy"])
    conf = {"models": sorted(models), "geometries": [asdict(g) for g in _geometries(models)]}
    ver = closure_version(__name__)
    rows = _mask_parts(models, size, np.frombuffer(caption_ids, dtype=np.int64),
                       np.frombuffer(concept_ids, dtype=np.int64),
                       np.frombuffer(boxes, dtype=np.float64).reshape(-1, 4))
    return {"patch_masks": write_table(TABLES["patch_masks"], out / "patch_masks", rows, config=conf,
                                       code_version=ver),
            "errors": write_table(TABLES["errors"], out / "errors", TABLES["errors"].from_rows(errors), config=conf,
                                  code_version=ver, replaces=only_stage("masks"))}


def _geometries(models: list[str]) -> list:
    from pipeline.patches import geometry_for

    return sorted({geometry_for(m) for m in models}, key=lambda g: (g.image_size, g.patch_size))


def _mask_parts(models: list[str], size: dict, caption_ids: np.ndarray, concept_ids: np.ndarray,
                boxes: np.ndarray) -> Iterator:
    """The ``patch_masks`` rows in (caption, concept) order, a phrase's boxes in the regions' order, as tables of
    ``ROWS_PER_PART`` rows (the parts one table of every row would be written as)."""
    from pipeline.patches import PREPROCESS, eval_patches

    geos = _geometries(models)
    order = np.lexsort((concept_ids, caption_ids))  # stable: a phrase's boxes keep their order
    starts = np.flatnonzero(np.r_[True, (np.diff(caption_ids[order]) != 0) | (np.diff(concept_ids[order]) != 0)]) \
        if len(order) else np.array([], dtype=np.int64)
    ends = np.r_[starts[1:], len(order)]
    part: list[dict] = []
    for a, b in zip(starts.tolist(), ends.tolist()):
        first = order[a]
        cid, kid = int(caption_ids[first]), int(concept_ids[first])
        c = size[cid]
        bs = boxes[order[a:b]].tolist()
        for g in geos:
            part.append({"caption_id": cid, "concept_id": kid, "grid": g.grid, "image_id": c["image_id"],
                         "patch_idx": eval_patches(bs, c["width"], c["height"], g), "image_size": g.image_size,
                         "patch_size": g.patch_size, "preprocess": PREPROCESS})
            if len(part) == ROWS_PER_PART:
                yield TABLES["patch_masks"].from_rows(part)
                part = []
    if part:
        yield TABLES["patch_masks"].from_rows(part)
