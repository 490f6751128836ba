"""model/data.py: image masks drawn from relation phrases only (``mask_phrases: relation``, H3)."""
from __future__ import annotations

from pathlib import Path


def test_relation_masks_draw_from_relation_phrases_only(world, world_tables):
    from data_schemas.geometry import Geometry
    from model.data import DataConfig, MaccoDataset, build_samples

    tables = {k: Path(v) for k, v in world_tables.items() if k != "root"}
    samples, _ = build_samples(tables, "train")
    s = next(x for x in samples if "relation" in x.phrase_kinds and "attribute" in x.phrase_kinds)
    rel = [b for b, k in zip(s.phrase_boxes, s.phrase_kinds) if k == "relation"]
    for mode, allowed in (("relation", rel), ("any", s.phrase_boxes)):
        ds = MaccoDataset([s], DataConfig(image_root=str(world), rect_prob=0.0, mask_phrases=mode), Geometry(32, 8))
        assert ds._phrases(s) == allowed
    assert all(len(b) == 2 for b in rel)  # a relation phrase's boxes: its subject's and its object's
    only_attr = next(x for x in samples if x.phrase_kinds and "relation" not in x.phrase_kinds) \
        if any(x.phrase_kinds and "relation" not in x.phrase_kinds for x in samples) else None
    if only_attr is not None:  # no relation phrase: every phrase, as the reference
        ds = MaccoDataset([only_attr], DataConfig(mask_phrases="relation"), Geometry(32, 8))
        assert ds._phrases(only_attr) == only_attr.phrase_boxes


def test_grounder_candidates_are_the_per_concept_groups(world_tables):
    """Keying the candidates by (concept, phrase), which keeps each phrase of MACCO's file apart, changes nothing for
    the grounders (the synthetic world, GroundingDINO): they give one phrase per concept, so the candidates are still
    each concept's boxes, in concept order."""
    from data_schemas import TABLES, read_table
    from model.data import build_samples

    tables = {k: Path(v) for k, v in world_tables.items() if k != "root"}
    regions = read_table(TABLES["regions"], tables["regions"]).to_pylist()
    phrases, per_concept = {}, {}
    for r in regions:
        phrases.setdefault((r["caption_id"], r["concept_id"]), set()).add(r["phrase"])
        per_concept.setdefault(r["caption_id"], {}).setdefault(r["concept_id"], []).append(list(r["box_xyxy"]))
    assert all(len(p) == 1 for p in phrases.values())
    samples, _ = build_samples(tables, "train")
    assert sum(len(s.phrase_boxes) for s in samples) > 0
    for s in samples:
        assert s.phrase_boxes == [b for _, b in sorted(per_concept.get(s.caption_id, {}).items())], s.caption_id
