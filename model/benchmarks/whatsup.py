"""What's Up (Kamath et al., EMNLP 2023): Controlled A/B (4 options, truth first), COCO-QA and VG-QA one/two
(``[image_id, correct, wrong]``). Image paths may carry the release's ``data/`` prefix. VG-QA two is VG-QA
two (the MACCO script re-ran COCO-QA two instead)."""
from __future__ import annotations

import json
from pathlib import Path

from .scoring import Case, mean

CONTROLLED = {"controlled_a": "controlled_images_dataset.json", "controlled_b": "controlled_clevr_dataset.json"}
QA = {"coco_qa_one": ("coco_qa_one_obj.json", "val2017/{id:012d}.jpg"),
      "coco_qa_two": ("coco_qa_two_obj.json", "val2017/{id:012d}.jpg"),
      "vg_qa_one": ("vg_qa_one_obj.json", "vg_images/{id}.jpg"),
      "vg_qa_two": ("vg_qa_two_obj.json", "vg_images/{id}.jpg")}


def _image(root: Path, rel: str) -> str:
    p = root / rel
    if not p.exists() and rel.startswith("data/"):
        p = root / rel[len("data/"):]
    return str(p)


def load(root: str | Path, subsets=None) -> list[Case]:
    root = Path(root)
    cases = []
    for s, fname in CONTROLLED.items():
        path = root / fname
        if (subsets and s not in subsets) or not path.exists():
            continue
        for i, r in enumerate(json.loads(path.read_text())):
            if "image_path" not in r or "caption_options" not in r:
                raise ValueError(f"{path}: record {i}: needs image_path and caption_options")
            cases.append(Case(_image(root, r["image_path"]), list(r["caption_options"]), 0, s))
    for s, (fname, pattern) in QA.items():
        path = root / fname
        if (subsets and s not in subsets) or not path.exists():
            continue
        for i, r in enumerate(json.loads(path.read_text())):
            if not isinstance(r, list) or len(r) != 3:
                raise ValueError(f"{path}: record {i}: expected [image_id, correct, wrong]")
            cases.append(Case(str(root / pattern.format(id=r[0])), [r[1], r[2]], 0, s))
    if not cases:
        raise FileNotFoundError(f"{root}: no What's Up annotation file found ({', '.join(CONTROLLED.values())}, ...)")
    return cases


def groups(results: dict) -> dict:
    acc = {s: r.accuracy for s, r in results.items()}
    return {"whatsup_macro": mean([acc.get("controlled_a"), acc.get("controlled_b")]),
            "coco_spatial_macro": mean([acc.get("coco_qa_one"), acc.get("coco_qa_two")]),
            "gqa_spatial_macro": mean([acc.get("vg_qa_one"), acc.get("vg_qa_two")])}
