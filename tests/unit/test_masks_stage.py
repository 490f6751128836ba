"""The masks stage (pipeline/masks_stage.py): regions streamed, rows written part by part in (caption, concept)
order, whatever order the regions come in."""
from __future__ import annotations

import random

from data_schemas import TABLES, read_table
from pipeline.masks_stage import MasksConfig, masks_stage
from pipeline.patches import eval_patches, geometry_for


def test_masks_are_the_same_rows_in_caption_concept_order_whatever_the_region_order_and_part_size(
        world_tables, tmp_path, monkeypatch):
    import pipeline.masks_stage as stage

    caps = read_table(TABLES["captions"], world_tables["captions"]).to_pylist()
    regions = read_table(TABLES["regions"], world_tables["regions"]).to_pylist()
    shuffled = regions[:]
    random.Random(0).shuffle(shuffled)
    shuffled[3] = {**shuffled[3], "box_xyxy": [float("nan"), 0.0, 1.0, 1.0]}  # an error row, in the input's order
    shuffled[7] = {**shuffled[7], "caption_id": 10 ** 9}
    cfg = MasksConfig(["macco-micro"])
    monkeypatch.setattr(stage, "ROWS_PER_PART", 17)
    m = masks_stage(cfg, caps, iter(shuffled), tmp_path / "small")
    got = read_table(TABLES["patch_masks"], tmp_path / "small" / "patch_masks").to_pylist()
    assert len(list((tmp_path / "small" / "patch_masks").glob("part-*.parquet"))) == -(-m["patch_masks"]["rows"] // 17)
    errs = read_table(TABLES["errors"], tmp_path / "small" / "errors").to_pylist()
    assert [e["reason"] for e in errs] == ["box_not_finite", "unknown_caption"]

    # the reference: every phrase's boxes in the input's order, phrases sorted
    kept = [r for k, r in enumerate(shuffled) if k not in (3, 7)]
    size = {c["caption_id"]: c for c in caps}
    phrases: dict[tuple[int, int], list] = {}
    for r in kept:
        phrases.setdefault((r["caption_id"], r["concept_id"]), []).append(r["box_xyxy"])
    geo = geometry_for("macco-micro")
    want = [(cid, kid, eval_patches(bs, size[cid]["width"], size[cid]["height"], geo))
            for (cid, kid), bs in sorted(phrases.items())]
    assert [(r["caption_id"], r["concept_id"], r["patch_idx"]) for r in got] == want

    monkeypatch.setattr(stage, "ROWS_PER_PART", 500_000)
    masks_stage(cfg, caps, shuffled, tmp_path / "one")
    assert read_table(TABLES["patch_masks"], tmp_path / "one" / "patch_masks").to_pylist() == got
