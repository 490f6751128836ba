"""Faults in the grounding stage (pipeline/grounding): non-finite and rejected boxes, images of the wrong size or
orientation, a failing image, a lone tiny image: error rows, never a crashed or silently wrong stage."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from PIL import Image

from data_schemas import TABLES, read_table
from pipeline.grounding.base import Box, GroundingConfig
from pipeline.grounding.stage import ground_stage


def concepts(cid: int) -> list[dict]:
    """'a red dog on a cat': two objects, an attribute and a relation (as the parser writes them)."""
    base = dict(caption_id=cid, char_start=0, char_end=3, subject_id=None, object_id=None, parser="rules")
    return [{**base, "concept_id": 0, "kind": "object", "text": "dog", "phrase": "dog"},
            {**base, "concept_id": 1, "kind": "object", "text": "cat", "phrase": "cat"},
            {**base, "concept_id": 2, "kind": "attribute", "text": "red", "object_id": 0, "phrase": "red dog"},
            {**base, "concept_id": 3, "kind": "relation", "text": "on", "subject_id": 0, "object_id": 1,
             "phrase": "dog on cat"}]


def caption(cid: int, iid: int, file_name: str, w: int = 64, h: int = 48) -> dict:
    return {"caption_id": cid, "image_id": iid, "file_name": file_name, "width": w, "height": h,
            "caption": "a red dog on a cat", "split": "train"}


class FixedGrounder:
    """Returns the given boxes for every phrase; fails on images whose width is in ``fail_widths``."""
    name, needs_images = "fixed", True

    def __init__(self, boxes: list[tuple], fail_widths=()):
        self.boxes, self.fail_widths, self.calls = boxes, set(fail_widths), 0

    def ground(self, items):
        self.calls += 1
        out = []
        for it in items:
            if it.width in self.fail_widths:
                raise RuntimeError(f"mean must have 1 elements (image {it.image_id})")
            out.append([[Box(b, 0.9, p) for b in self.boxes] for p in it.phrases])
        return out


def errors_of(out: Path) -> list[dict]:
    return read_table(TABLES["errors"], out / "errors").to_pylist()


def test_non_finite_and_rejected_boxes_are_error_rows_with_unique_ids(tmp_path):
    Image.new("RGB", (64, 48)).save(tmp_path / "a.png")
    g = FixedGrounder([(float("nan"), 0, 10, 10), (-5, 0, 10, 10), (0, 0, 100, 10), (1, 1, 20, 20)])
    ground_stage(GroundingConfig(), [caption(1, 1, "a.png")], concepts(1), tmp_path, tmp_path / "o", grounder=g)
    errs = errors_of(tmp_path / "o")
    reasons = [e["reason"] for e in errs]
    assert reasons.count("box_not_finite") == 3  # one NaN box per object of the attribute (1) and relation (2)
    assert reasons.count("box_outside_image") == 6
    ids = [(e["stage"], e["item_id"], e["reason"]) for e in errs]
    assert len(ids) == len(set(ids))  # errors.key_unique holds by construction
    regions = read_table(TABLES["regions"], tmp_path / "o" / "regions").to_pylist()
    assert regions and all(all(math.isfinite(v) for v in r["box_xyxy"]) for r in regions)


def test_image_size_and_exif_orientation_checked_against_the_annotation(tmp_path):
    Image.new("RGB", (1, 1)).save(tmp_path / "tiny.png")
    Image.new("RGB", (200, 150)).save(tmp_path / "big.png")
    # stored 64x48 with EXIF orientation 6 (rotate 90): displayed 48x64
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.new("RGB", (64, 48), (255, 0, 0)).save(tmp_path / "turned.jpg", exif=exif)
    caps = [caption(1, 1, "tiny.png"), caption(2, 2, "big.png"), caption(3, 3, "turned.jpg", 48, 64),
            caption(4, 4, "turned.jpg", 64, 48)]
    caps[3]["image_id"] = 5  # another row claiming the stored (unturned) size
    sg = [c for cid in (1, 2, 3, 4) for c in concepts(cid)]
    seen = []

    class Recorder(FixedGrounder):
        def ground(self, items):
            seen.extend((it.image_id, it.image.size) for it in items)
            return super().ground(items)

    ground_stage(GroundingConfig(), caps, sg, tmp_path, tmp_path / "o", grounder=Recorder([(1, 1, 20, 20)]))
    errs = {e["item_id"]: e for e in errors_of(tmp_path / "o")}
    assert errs["image:1"]["reason"] == "image_size_mismatch" and "1x1" in errs["image:1"]["message"]
    assert errs["image:2"]["reason"] == "image_size_mismatch" and "200x150" in errs["image:2"]["message"]
    assert errs["image:5"]["reason"] == "image_size_mismatch" and "48x64" in errs["image:5"]["message"]
    assert seen == [(3, (48, 64))]  # the grounder sees the image as displayed
    from pipeline.sources import read_folder_source

    (tmp_path / "c.jsonl").write_text(json.dumps({"file_name": "turned.jpg", "caption": "x"}) + "\n")
    row = read_folder_source(tmp_path / "c.jsonl").rows[0]
    assert (row["width"], row["height"]) == (48, 64)


def test_one_failing_image_is_an_error_row_not_a_crashed_stage(tmp_path):
    for name, size in (("a.png", (64, 48)), ("b.png", (32, 48)), ("c.png", (64, 48))):
        Image.new("RGB", size).save(tmp_path / name)
    caps = [caption(1, 1, "a.png"), caption(2, 2, "b.png", 32, 48), caption(3, 3, "c.png")]
    sg = [c for cid in (1, 2, 3) for c in concepts(cid)]
    ground_stage(GroundingConfig(), caps, sg, tmp_path, tmp_path / "o", grounder=FixedGrounder([(1, 1, 20, 20)], {32}))
    errs = errors_of(tmp_path / "o")
    assert [(e["item_id"], e["reason"]) for e in errs] == [("image:2", "grounding_failed")]
    assert "mean must have 1 elements" in errs[0]["message"]
    regions = read_table(TABLES["regions"], tmp_path / "o" / "regions").to_pylist()
    assert {r["caption_id"] for r in regions} == {1, 3}
    # every image failing while the model grounds a plain 256 x 256 image too is a broken model: the stage fails
    with pytest.raises(RuntimeError, match="mean must have 1 elements"):
        ground_stage(GroundingConfig(), caps[1:2], concepts(2), tmp_path, tmp_path / "o2",
                     grounder=FixedGrounder([(1, 1, 20, 20)], {32, 256}))


def test_a_lone_tiny_image_in_its_shard_is_an_error_row(tmp_path):
    """#28: a 1x1 image alone in its grounding shard aborted the stage (the real transformers GroundingDINO:
    'mean must have 1 elements'); the model still grounds a plain image, so the image is bad, not the model: an
    error row, and the stage completes."""
    from tests_support import build_tiny_hf_groundingdino

    model = build_tiny_hf_groundingdino(tmp_path / "m")
    Image.new("RGB", (1, 1)).save(tmp_path / "tiny.png")
    m = ground_stage(GroundingConfig(backend="hf", model_dir=str(model)), [caption(1, 1, "tiny.png", 1, 1)],
                     concepts(1), tmp_path, tmp_path / "o")
    errs = errors_of(tmp_path / "o")
    assert [(e["item_id"], e["reason"]) for e in errs] == [("image:1", "grounding_failed")]
    assert "mean must have 1 elements" in errs[0]["message"] and m["regions"]["rows"] == 0


def test_a_16_bit_png_reaches_the_grounder_as_its_image_not_white(tmp_path):
    """#48 item 10: grounding loaded images with Pillow's convert("RGB"), which clips a 16-bit PNG's every value
    at 255: the grounder saw a white image. It sees the 8-bit image (1/257), as training does."""
    import numpy as np

    wide = (np.arange(64 * 48).reshape(48, 64) * 20).astype(np.uint16)  # 0 .. 61420
    Image.fromarray(wide).save(tmp_path / "g16.png")
    seen = []

    class Recorder(FixedGrounder):
        def ground(self, items):
            seen.extend(np.asarray(it.image) for it in items)
            return super().ground(items)

    ground_stage(GroundingConfig(), [caption(1, 1, "g16.png")], concepts(1), tmp_path, tmp_path / "o",
                 grounder=Recorder([(1, 1, 20, 20)]))
    assert len(seen) == 1 and seen[0].shape == (48, 64, 3)
    np.testing.assert_array_equal(seen[0][..., 0], np.rint(wide / 257).astype(np.uint8))
