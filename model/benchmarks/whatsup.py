"""What's Up (Kamath et al., EMNLP 2023): Controlled A/B (4 options, truth first), COCO-QA and VG-QA one/two
(``[image_id, correct, wrong]``). Image paths may carry the release's ``data/`` prefix. VG-QA two is VG-QA
two (the MACCO script re-ran COCO-QA two instead).

Besides the individual accuracy, ``details`` gives the paper's Table 3 metrics as ``dataset_zoo/aro_datasets.py``
(amitakamath/whatsup_vlms) computes them: per-preposition accuracy for every subset, and for Controlled A/B the
pair accuracy (left/right both right, and on/under resp. in-front/behind both right, over N/2 pairs) and set
accuracy (all four images of an object pair right, over N/4 sets). The object pair and preposition come from
the file name ``<object>_<preposition>_<object>.<ext>``.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from data_schemas import InputFileError

from .records import record, record_list, texts
from .scoring import Case, mean

CONTROLLED = {"controlled_a": "controlled_images_dataset.json", "controlled_b": "controlled_clevr_dataset.json"}
QA = {"coco_qa_one": ("coco_qa_one_obj.json", "val2017/{id:012d}.jpg"),
      "coco_qa_two": ("coco_qa_two_obj.json", "val2017/{id:012d}.jpg"),
      "vg_qa_one": ("vg_qa_one_obj.json", "vg_images/{id}.jpg"),
      "vg_qa_two": ("vg_qa_two_obj.json", "vg_images/{id}.jpg")}
# aro_datasets.py:385-394 (A), :406-414 (B); the pairs of :489-496
PREPOSITIONS = {"controlled_a": ("on", "under", "left_of", "right_of"),
                "controlled_b": ("in-front_of", "behind", "left_of", "right_of")}
PAIRS = {"controlled_a": (("left_of", "right_of"), ("on", "under")),
         "controlled_b": (("left_of", "right_of"), ("in-front_of", "behind"))}
GROUP_FILES = {"whatsup_macro": ("controlled_a", "controlled_b"), "coco_spatial_macro": ("coco_qa_one", "coco_qa_two"),
               "gqa_spatial_macro": ("vg_qa_one", "vg_qa_two")}
_NAME = re.compile(r"^(?P<a>.+?)_(?P<prep>on|under|left_of|right_of|in-front_of|behind)_(?P<b>.+)\.[A-Za-z]+$")


def _image(root: Path, rel: str) -> str:
    p = root / rel
    if not p.exists() and rel.startswith("data/"):
        p = root / rel[len("data/"):]
    return str(p)


def qa_preposition(subset: str, correct: str) -> str:
    """The gold preposition of a QA case: aro_datasets.py:547 / :649 (one object: the caption's last word),
    :549-557 (COCO two), :651-661 (VG two)."""
    if subset.endswith("_one"):
        return correct.split()[-1]
    rules = (("left of", "left"), ("right of", "right"), ("above", "above")) if subset == "coco_qa_two" else \
        (("left of", "left"), ("right of", "right"), ("front of", "front"), ("behind", "behind"))
    for needle, prep in rules:
        if needle in correct:
            return prep
    return "below" if subset == "coco_qa_two" else "top"


def _controlled_meta(cases: list[Case], subset: str, path: Path) -> None:
    """Object pair and preposition from the file names, when the file follows the release's naming; a file
    that mixes named and unnamed images, or an object pair without its 4 prepositions, is an error."""
    parsed = [_NAME.match(Path(c.image).name) for c in cases]
    if not any(parsed):
        return
    units: dict[tuple[str, str], list[str]] = {}
    for i, (c, m) in enumerate(zip(cases, parsed)):
        if m is None or m["prep"] not in PREPOSITIONS[subset]:
            raise InputFileError(f"{path}: record {i}: image {Path(c.image).name!r} is not "
                             f"<object>_<{'|'.join(PREPOSITIONS[subset])}>_<object>.<ext>")
        c.meta.update(prep=m["prep"], unit=f"{m['a']}|{m['b']}")
        units.setdefault((m["a"], m["b"]), []).append(m["prep"])
    for (a, b), preps in units.items():
        if sorted(preps) != sorted(PREPOSITIONS[subset]):
            raise InputFileError(f"{path}: object pair {a}/{b} has prepositions {sorted(preps)}, expected one image "
                             f"each for {sorted(PREPOSITIONS[subset])}")


def load(root: str | Path, subsets=None) -> list[Case]:
    root = Path(root)
    cases = []
    for s, fname in CONTROLLED.items():
        path = root / fname
        if (subsets and s not in subsets) or not path.exists():
            continue
        sub = []
        for i, rec in enumerate(record_list(path)):
            r = record(rec, path, f"record {i}", text=("image_path",), texts=("caption_options",))
            sub.append(Case(_image(root, r["image_path"]), list(r["caption_options"]), 0, s))
        _controlled_meta(sub, s, path)
        cases += sub
    for s, (fname, pattern) in QA.items():
        path = root / fname
        if (subsets and s not in subsets) or not path.exists():
            continue
        for i, r in enumerate(record_list(path)):
            if not isinstance(r, list) or len(r) != 3 or not isinstance(r[0], (int, str)) or isinstance(r[0], bool):
                raise InputFileError(f"{path}: record {i}: expected [image_id, correct, wrong]")
            texts(r[1:], path, f"record {i}: [correct, wrong]")
            cases.append(Case(str(root / pattern.format(id=r[0])), [r[1], r[2]], 0, s,
                              meta={"prep": qa_preposition(s, r[1])}))
    if not cases:
        raise FileNotFoundError(f"{root}: no What's Up annotation file found ({', '.join(CONTROLLED.values())}, ...)")
    return cases


def groups(results: dict) -> dict:
    acc = {s: r.accuracy for s, r in results.items()}
    return {g: mean([acc.get(s) for s in subs]) for g, subs in GROUP_FILES.items()}


def details(cases, scores) -> dict:
    """{subset: {per_preposition: {prep: {n, accuracy}}, and for Controlled pair_/set_ accuracy with counts}}.
    Cases with a missing image are left out; a pair or set holding one is not counted (``*_incomplete``)."""
    out: dict[str, dict] = {}
    units: dict[str, dict[str, dict[str, bool | None]]] = {}
    for c, s in zip(cases, scores):
        d = out.setdefault(c.subset, {"per_preposition": {}})
        ok = None if s is None else bool(int(np.argmax(s)) == c.true_index)
        if "prep" in c.meta and ok is not None:
            p = d["per_preposition"].setdefault(c.meta["prep"], {"n": 0, "correct": 0})
            p["n"] += 1
            p["correct"] += ok
        if "unit" in c.meta:
            units.setdefault(c.subset, {}).setdefault(c.meta["unit"], {})[c.meta["prep"]] = ok
    for d in out.values():
        for p in d["per_preposition"].values():
            p["accuracy"] = p.pop("correct") / p["n"]
    for subset in CONTROLLED:
        if subset not in out:
            continue
        d = out[subset]
        if subset not in units:
            d["pair_accuracy"] = d["set_accuracy"] = None
            d["pair_set_note"] = "image names are not <object>_<preposition>_<object>.<ext>: no pairs or sets"
            continue
        pairs = [[u[a], u[b]] for u in units[subset].values() for a, b in PAIRS[subset]]
        sets = [list(u.values()) for u in units[subset].values()]
        for name, items in (("pair", pairs), ("set", sets)):
            full = [x for x in items if None not in x]
            d[f"{name}s"], d[f"{name}s_incomplete"] = len(full), len(items) - len(full)
            d[f"{name}_accuracy"] = sum(all(x) for x in full) / len(full) if full else None
    return out
