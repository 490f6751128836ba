import json

from PIL import Image

from model.benchmarks.registry import world_sets
from pipeline.captions import read_coco_instances, read_karpathy, read_coco_root
from pipeline.world import (COLOURS, KINDS, SIZES, WorldConfig, generate_world, load_scenes, preview,
                            relation_between)


def _digest(root):
    from pipeline.shards import tree_hash

    return tree_hash(root)


def test_same_seed_same_bytes_and_different_seed_differs(tmp_path):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    cfg = WorldConfig(seed=11, images=12, size=48)
    generate_world(a, cfg, world_sets())
    generate_world(b, cfg, world_sets())
    generate_world(c, WorldConfig(seed=12, images=12, size=48), world_sets())
    assert _digest(a) == _digest(b)
    assert _digest(a) != _digest(c)


def test_world_reads_back_through_coco_readers_with_zero_errors(world):
    read = read_coco_root(world)
    assert read.errors == []
    assert {r["split"] for r in read.rows} == {"train", "val", "test"}
    n_images = {r["image_id"] for r in read.rows}
    assert len(read.rows) == 5 * len(n_images)
    for split in ("train", "val", "test"):
        inst = read_coco_instances(world / "annotations" / f"instances_{split}2014.json")
        for boxes in inst.values():
            assert 2 <= len(boxes) <= 3
            for b in boxes:
                x1, y1, x2, y2 = b["box_xyxy"]
                assert 0 <= x1 < x2 <= 64 and 0 <= y1 < y2 <= 64
                assert b["category"] in KINDS and b["attributes"]["colour"] in COLOURS
    sizes = {r["image_id"]: (r["width"], r["height"]) for r in read.rows}
    kp = read_karpathy(world / "dataset_coco.json", sizes=sizes)
    assert kp.errors == [] and len(kp.rows) == len(read.rows)
    assert {r["caption"] for r in kp.rows} == {r["caption"] for r in read.rows}


def test_images_are_jpegs_and_captions_name_scene_objects(world):
    scenes = {s.image_id: s for s in load_scenes(world, "train")}
    caps = json.loads((world / "annotations" / "captions_train2014.json").read_text())
    im = caps["images"][0]
    with Image.open(world / "train2014" / im["file_name"]) as img:
        assert img.format == "JPEG" and img.size == (64, 64)
    for ann in caps["annotations"]:
        scene = scenes[ann["image_id"]]
        text = ann["caption"].lower()
        named = [f"{s.colour} {s.kind}" for s in scene.shapes if f"{s.colour} {s.kind}" in text]
        assert len(named) >= 2, text


def test_scene_relations_match_geometry(world):
    for split in ("train", "test"):
        for scene in load_scenes(world, split):
            assert scene.relations
            for r in scene.relations:
                assert relation_between(scene.shapes[r.subject], scene.shapes[r.object]) == r.relation


def test_world_has_the_combinatorics_the_issue_asks_for():
    assert len(KINDS) >= 4 and len(COLOURS) >= 6 and len(SIZES) >= 2


def test_preview_png(world, tmp_path):
    out = preview(world, tmp_path / "p.png", n=4)
    with Image.open(out) as img:
        assert img.format == "PNG" and img.size[0] > 64


def test_world_preview_shows_every_caption_whole_with_the_image_id():
    from pipeline.world import preview_lines

    caps = ["a small red circle sitting to the left side of a large blue hexagon inside a green square", "x"]
    lines = preview_lines(17, caps, wrap=30)
    assert lines[0] == "image 17"
    joined = " ".join(ln.strip() for ln in lines[1:])
    assert joined == "- " + caps[0] + " - x" and all(len(ln) <= 30 for ln in lines)


def test_benchmark_sets_asked_for_but_not_handed_are_refused_before_any_file(tmp_path):
    """pipeline imports no model: the sets come from the registry through the caller (the world stage's record)."""
    import pytest

    with pytest.raises(ValueError, match="world_sets"):
        generate_world(tmp_path / "w", WorldConfig(seed=1, images=4, size=32))
    assert not (tmp_path / "w").exists()
