"""H3 (docs/experiments.md): how often an image mask of the reference's rule can be filled by elimination.

Under the reference's rule a training step masks the boxes of one phrase of the caption drawn at random (or, with
probability rect_prob, a random rectangle). An attribute phrase's boxes cover one object: the caption names it and
every other object it names stays visible, so "the named object that is not visible" fills the hole without reading
any relation. A relation phrase's boxes cover its subject and its object: both named objects are hidden, and which
goes in which box is what the relation says. This script counts, over the training split of a parse + ground
output, the share of phrase masks that cover one object (elimination suffices) under the reference's rule and
under ``mask_phrases: relation``.

    python docs/experiments/h3_elimination.py PARSE_DIR GROUND_DIR CAPTIONS_DIR
"""
import sys
from pathlib import Path

from data_schemas import TABLES, read_table


def shares(parse: Path, ground: Path, captions: Path, rect_prob: float = 0.1) -> dict:
    train = {r["caption_id"] for r in read_table(TABLES["captions"], captions / "captions").to_pylist()
             if r["split"] == "train"}
    kind = {(r["caption_id"], r["concept_id"]): r["kind"]
            for r in read_table(TABLES["scene_graphs"], parse / "scene_graphs").to_pylist()}
    boxes: dict[int, dict[int, int]] = {}
    for r in read_table(TABLES["regions"], ground / "regions").to_pylist():
        if r["caption_id"] in train:
            boxes.setdefault(r["caption_id"], {}).setdefault(r["concept_id"], 0)
            boxes[r["caption_id"]][r["concept_id"]] += 1
    single_any, single_rel, with_rel = [], [], 0
    for cid, per in boxes.items():
        kinds = [kind[(cid, k)] for k in per]
        single = [n == 1 for n in per.values()]
        single_any.append(sum(single) / len(single))  # the chance that the drawn phrase covers one object
        rel = [s for s, k in zip(single, kinds) if k == "relation"]
        with_rel += bool(rel)
        single_rel.append(sum(rel) / len(rel) if rel else sum(single) / len(single))
    n = len(single_any)
    return {"captions": n, "with_a_relation_phrase": with_rel / n,
            "one_object_masks_any": (1 - rect_prob) * sum(single_any) / n,
            "one_object_masks_relation": (1 - rect_prob) * sum(single_rel) / n, "rectangles": rect_prob}


if __name__ == "__main__":
    print(shares(*(Path(a) for a in sys.argv[1:4])))
