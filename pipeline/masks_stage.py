"""The masks stage: per grounded phrase and per model patch grid, the patches its boxes cover under the evaluation
preprocessing (``patch_masks``, ``errors``)."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from data_schemas import TABLES, write_table
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


def masks_stage(cfg: MasksConfig, captions: list[dict], regions: list[dict], out: Path) -> dict[str, dict]:
    """``out/patch_masks``: per phrase and per model grid, the patches of its boxes (evaluation preprocessing);
    ``out/errors`` (stage ``masks``): a box that is not finite, not inside its image with positive area, or of a
    caption the captions table lacks is an error row, never a crash or a silently empty mask."""
    from pipeline.grounding.plan import box_problem
    from pipeline.patches import PREPROCESS, eval_patches, geometry_for

    models = list(cfg.models)
    geos = sorted({geometry_for(m) for m in models}, key=lambda g: (g.image_size, g.patch_size))
    size = {c["caption_id"]: c for c in captions}
    boxes: dict[tuple[int, int], list] = {}
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
        boxes.setdefault((r["caption_id"], r["concept_id"]), []).append(r["box_xyxy"])
    rows = []
    for (cid, kid), bs in sorted(boxes.items()):
        c = size[cid]
        for g in geos:
            rows.append({"caption_id": cid, "concept_id": kid, "grid": g.grid, "image_id": c["image_id"],
                         "patch_idx": eval_patches(bs, c["width"], c["height"], g), "image_size": g.image_size,
                         "patch_size": g.patch_size, "preprocess": PREPROCESS})
    conf = {"models": sorted(models), "geometries": [asdict(g) for g in geos]}
    ver = closure_version(__name__)
    return {"patch_masks": write_table(TABLES["patch_masks"], out / "patch_masks",
                                       TABLES["patch_masks"].from_rows(rows), config=conf, code_version=ver),
            "errors": write_table(TABLES["errors"], out / "errors", TABLES["errors"].from_rows(errors), config=conf,
                                  code_version=ver, replaces=only_stage("masks"))}
