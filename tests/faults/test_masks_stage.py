"""Faults in the masks stage (pipeline/masks_stage.py): NaN and inverted boxes are error rows."""
from __future__ import annotations

import shutil

from data_schemas import TABLES, read_table, write_table
from macco.cli import main
from tests_support import read_errors as errors


def test_masks_nan_and_inverted_boxes_are_error_rows(world_tables, tmp_path, capsys):
    """The issue: a NaN box was a traceback ('cannot convert float NaN to integer'), an inverted box silently an
    empty mask."""
    t = tmp_path / "T"
    shutil.copytree(world_tables["captions"], t / "captions")
    regions = read_table(TABLES["regions"], world_tables["regions"]).to_pylist()
    regions[0]["box_xyxy"] = [float("nan"), 1.0, 5.0, 5.0]
    x1, y1, x2, y2 = regions[1]["box_xyxy"]
    regions[1]["box_xyxy"] = [x2, y1, x1, y2]  # inverted
    write_table(TABLES["regions"], t / "regions", TABLES["regions"].from_rows(regions))
    assert main(["masks", str(t), "--model", "macco-micro", "--out", str(t / "m")]) == 0
    errs = errors(t / "m")
    assert sorted(e["reason"] for e in errs) == ["box_not_finite", "box_outside_image"]
    assert {e["stage"] for e in errs} == {"masks"}
    bad = {(r["caption_id"], r["concept_id"]) for r in regions[:2]}
    masks = read_table(TABLES["patch_masks"], t / "m" / "patch_masks").to_pylist()
    assert all(m["patch_idx"] for m in masks)  # no silently empty mask
    assert {(m["caption_id"], m["concept_id"]) for m in masks} >= {
        (r["caption_id"], r["concept_id"]) for r in regions[2:]}
    out = capsys.readouterr().out
    assert "masks/box_not_finite=1" in out and f"wrote {t / 'm' / 'patch_masks'}" in out
    assert bad  # the two phrases lost a box each; their other boxes (if any) still make masks
