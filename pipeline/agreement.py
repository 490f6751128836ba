"""``macco agreement``: how our preprocessing differs from the paper's, on the same captions and images.

The official side is MACCO's released file (the ``official`` table: its masked relation and attribute words and
its phrase boxes); ours is what our parser (``scene_graphs``) and our grounding (``regions``) made of the same
captions. Words: per caption, the multiset of masked relation (attribute) words, lower-cased, ``the`` left out as
the reference does; micro precision / recall / F1 of ours against the file's. Boxes: each phrase of the file is
matched to our concept of the word it holds (a relation word first, else an attribute word, as
``grounding.official``); the IoU of the two box sets is the area of their pixel unions' intersection over their
union's (original-image pixels). A phrase whose word we did not find, or whose concept we could not ground, counts
as unmatched (IoU 0 in ``mean_iou_all``).
"""
from __future__ import annotations

import json
from collections import Counter

import numpy as np

from pipeline.macco_tsv import SKIPPED, _in


def word_agreement(official: dict[int, dict], ours: dict[int, list[dict]]) -> dict:
    """{relation, attribute}: {official, ours, both, precision, recall, f1} over the captions of ``official``."""
    out = {}
    for kind, column in (("relation", "relations"), ("attribute", "attributes")):
        n_off = n_ours = both = 0
        for cid, o in official.items():
            a = Counter(w.strip().lower() for w in o[column] if w.strip().lower() not in SKIPPED)
            b = Counter(c["text"].lower() for c in ours.get(cid, []) if c["kind"] == kind)
            n_off, n_ours, both = n_off + sum(a.values()), n_ours + sum(b.values()), both + sum((a & b).values())
        p = both / n_ours if n_ours else None
        r = both / n_off if n_off else None
        out[kind] = {"official": n_off, "ours": n_ours, "both": both, "precision": p, "recall": r,
                     "f1": 2 * p * r / (p + r) if p and r else (0.0 if p is not None and r is not None else None)}
    return out


def _mask(boxes: list[list[float]], width: int, height: int) -> np.ndarray:
    m = np.zeros((height, width), dtype=bool)
    for x1, y1, x2, y2 in boxes:
        rows = slice(max(int(np.floor(y1)), 0), min(int(np.ceil(y2)), height))
        m[rows, max(int(np.floor(x1)), 0):min(int(np.ceil(x2)), width)] = True
    return m


def box_iou(a: list[list[float]], b: list[list[float]], width: int, height: int) -> float:
    """IoU of the pixel unions of two box sets in a ``width`` x ``height`` image."""
    ma, mb = _mask(a, width, height), _mask(b, width, height)
    union = np.logical_or(ma, mb).sum()
    return float(np.logical_and(ma, mb).sum() / union) if union else 0.0


def box_agreement(official: dict[int, dict], ours: dict[int, list[dict]], regions: dict[tuple[int, int], list],
                  sizes: dict[int, tuple[int, int]]) -> dict:
    """{phrases, matched, no_word, no_box, mean_iou (matched), mean_iou_all, iou_at_0.5} over the file's phrases."""
    ious, no_word, no_box, total = [], 0, 0, 0
    for cid, o in official.items():
        for phrase, boxes in json.loads(o["phrase_boxes"]).items():
            total += 1
            word = next((w for column in ("relations", "attributes") for w in o[column] if _in(w, phrase)), None)
            kind = "relation" if word in o["relations"] else "attribute"
            concept = next((c for c in ours.get(cid, []) if word and c["kind"] == kind
                            and c["text"].lower() == word.strip().lower()), None)
            if concept is None:
                no_word += 1
                continue
            mine = regions.get((cid, concept["concept_id"]), [])
            if not mine:
                no_box += 1
                continue
            ious.append(box_iou(boxes, mine, *sizes[cid]))
    matched = len(ious)
    return {"phrases": total, "matched": matched, "no_word": no_word, "no_box": no_box,
            "mean_iou": float(np.mean(ious)) if ious else None,
            "mean_iou_all": float(np.sum(ious) / total) if total else None,
            "iou_at_0.5": float(np.mean([v >= 0.5 for v in ious])) if ious else None}


def agreement(official_rows: list[dict], captions: list[dict], scene_graphs: list[dict],
              regions: list[dict] | None) -> dict:
    """Words (and with ``regions``, boxes) of ours against the file's, over the captions both have."""
    official = {r["caption_id"]: r for r in official_rows}
    ours: dict[int, list[dict]] = {}
    for c in scene_graphs:
        ours.setdefault(c["caption_id"], []).append(c)
    official = {cid: o for cid, o in official.items() if cid in ours}
    out = {"captions": len(official), "words": word_agreement(official, ours)}
    if regions is not None:
        boxes: dict[tuple[int, int], list] = {}
        for r in regions:
            boxes.setdefault((r["caption_id"], r["concept_id"]), []).append(list(r["box_xyxy"]))
        sizes = {c["caption_id"]: (c["width"], c["height"]) for c in captions}
        out["boxes"] = box_agreement(official, ours, boxes, sizes)
    return out


def format_agreement(a: dict) -> str:
    pct = lambda v: "-" if v is None else f"{100 * v:.1f}"  # noqa: E731
    iou = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    lines = [f"captions compared: {a['captions']}", "",
             "| masked words | file | ours | both | precision % | recall % | F1 % |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for kind, w in a["words"].items():
        lines.append(f"| {kind} | {w['official']} | {w['ours']} | {w['both']} | {pct(w['precision'])} | "
                     f"{pct(w['recall'])} | {pct(w['f1'])} |")
    if "boxes" in a:
        b = a["boxes"]
        lines += ["", "| phrase boxes | phrases | matched | our word missing | our box missing | mean IoU (matched) | "
                      "mean IoU (all) | IoU >= 0.5 % |", "|---|---:|---:|---:|---:|---:|---:|---:|",
                  f"| regions | {b['phrases']} | {b['matched']} | {b['no_word']} | {b['no_box']} | "
                  f"{iou(b['mean_iou'])} | {iou(b['mean_iou_all'])} | {pct(b['iou_at_0.5'])} |"]
    return "\n".join(lines)
