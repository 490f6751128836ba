"""Word-level precision/recall/F1 of a parser against hand-annotated captions.

Gold file lines: ``caption | objects | attr>object, ... | subject:relation:object, ...``. Units:
objects = object words; attributes = (attribute word, object word); relations = (subject, relation word,
object) for each word of the relation phrase, so a partly right multiword relation gets partial credit.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path


def load_gold(path: str | Path) -> list[dict]:
    out = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split("|")]
        if len(parts) != 4:
            raise ValueError(f"{path}: line {n}: expected 4 '|'-separated fields, got {len(parts)}")
        cap, objs, atts, rels = parts
        out.append({
            "caption": cap,
            "objects": objs.split(),
            "attributes": [tuple(a.strip().split(">")) for a in atts.split(",") if a.strip()],
            "relations": [tuple(r.strip().split(":")) for r in rels.split(",") if r.strip()],
        })
    return out


def units(objects, attributes, relations) -> dict[str, Counter]:
    low = str.lower
    return {
        "object": Counter(low(o) for o in objects),
        "attribute": Counter((low(a), low(o)) for a, o in attributes),
        "relation": Counter((low(s), w, low(o)) for s, r, o in relations for w in r.lower().split()),
    }


def concept_units(concepts) -> dict[str, Counter]:
    by = {c.concept_id: c for c in concepts}
    return units([c.text for c in concepts if c.kind == "object"],
                 [(c.text, by[c.object_id].text) for c in concepts if c.kind == "attribute"],
                 [(by[c.subject_id].text, c.text, by[c.object_id].text) for c in concepts if c.kind == "relation"])


def f1_scores(gold: list[dict], predicted: list[list]) -> dict[str, dict[str, float]]:
    tp: Counter = Counter()
    n_pred: Counter = Counter()
    n_gold: Counter = Counter()
    for g, concepts in zip(gold, predicted):
        gu = units(g["objects"], g["attributes"], g["relations"])
        pu = concept_units(concepts)
        for k in gu:
            tp[k] += sum((gu[k] & pu[k]).values())
            n_pred[k] += sum(pu[k].values())
            n_gold[k] += sum(gu[k].values())
    out = {}
    for k in ("object", "attribute", "relation"):
        p = tp[k] / n_pred[k] if n_pred[k] else 0.0
        r = tp[k] / n_gold[k] if n_gold[k] else 0.0
        out[k] = {"precision": p, "recall": r, "f1": 2 * p * r / (p + r) if p + r else 0.0}
    return out


def errors(gold: list[dict], predicted: list[list]) -> list[str]:
    lines = []
    for g, concepts in zip(gold, predicted):
        gu, pu = units(g["objects"], g["attributes"], g["relations"]), concept_units(concepts)
        for k in gu:
            miss, extra = gu[k] - pu[k], pu[k] - gu[k]
            if miss or extra:
                lines.append(f"{g['caption']!r} {k}: missing {sorted(miss)} extra {sorted(extra)}")
    return lines
