"""Grounding without the model: which phrase to ask for in an image, and which boxes become region rows.

Pure functions over the scene-graph rows; ``pipeline.stages.ground_stage`` runs them around the grounder in a
thin loop over each shard's images. An attribute takes its object's boxes, a relation its subject's and object's;
an object is asked for once per image, by its text with its attributes in caption order (``red circle``).
"""
from __future__ import annotations

import math

from data_schemas.errors import error_row


def object_queries(concepts: list[dict]) -> tuple[dict[int, str], dict[int, list[int]]]:
    """For one caption's concept rows: the query phrase of each object that a phrase needs, and for each
    attribute/relation concept the objects whose boxes it takes (its object; subject and object)."""
    by_id = {c["concept_id"]: c for c in concepts}
    attrs: dict[int, list[dict]] = {}
    for c in concepts:
        if c["kind"] == "attribute":
            attrs.setdefault(c["object_id"], []).append(c)
    needs: dict[int, list[int]] = {}
    for c in concepts:
        if c["kind"] == "attribute":
            needs[c["concept_id"]] = [c["object_id"]]
        elif c["kind"] == "relation":
            needs[c["concept_id"]] = [c["subject_id"], c["object_id"]]
    queries = {}
    for objs in needs.values():
        for o in objs:
            words = [a["text"] for a in sorted(attrs.get(o, []), key=lambda a: a["char_start"])]
            queries[o] = " ".join(words + [by_id[o]["text"]]).lower()
    return queries, needs


def plan_queries(captions: list[dict], by_caption: dict[int, list[dict]]) -> tuple[list[tuple], dict[str, int]]:
    """One image's plan: per caption (caption row, its object queries, the objects each concept needs) and the
    image's distinct query phrases with their index in the grounder's phrase list (empty: nothing to ground)."""
    per_caption, phrases = [], {}
    for cap in captions:
        q, needs = object_queries(by_caption[cap["caption_id"]])
        for text in q.values():
            phrases.setdefault(text, len(phrases))
        per_caption.append((cap, q, needs))
    return per_caption, phrases


def box_problem(xyxy, row: dict):
    """(reason, message) for a box that is not finite or not inside the image with positive area, else None."""
    if not all(math.isfinite(v) for v in xyxy):
        return "box_not_finite", f"image {row['image_id']}: box {list(xyxy)} has a non-finite coordinate"
    x1, y1, x2, y2 = xyxy
    if x1 < 0 or y1 < 0 or x2 > row["width"] or y2 > row["height"] or x2 <= x1 or y2 <= y1:
        return "box_outside_image", f"image {row['image_id']}: box {list(xyxy)} outside {row['width']}x{row['height']}"
    return None


def regions_from_boxes(row: dict, per_caption: list[tuple], phrases: dict[str, int], boxes: list[list],
                       by_caption: dict[int, list[dict]], backend: str) -> tuple[list[dict], list[dict]]:
    """The ``regions`` rows and ``errors`` rows of one image from the grounder's boxes per phrase: each
    concept's boxes are its objects' (deduplicated at 1e-3 px); a bad box is an error row (id: caption, concept,
    object, box — unique by construction), a concept with no box left is a ``no_box`` error row."""
    regions, errors = [], []
    for cap, q, needs in per_caption:
        for concept_id, objs in needs.items():
            uniq: dict[tuple, object] = {}
            for o in objs:
                for j, b in enumerate(boxes[phrases[q[o]]]):
                    problem = box_problem(b.xyxy, row)
                    if problem is not None:
                        errors.append(error_row("ground", f"{cap['caption_id']}:{concept_id}:{o}:{j}", *problem))
                        continue
                    uniq.setdefault(tuple(round(v, 3) for v in b.xyxy), b)
            concept = next(c for c in by_caption[cap["caption_id"]] if c["concept_id"] == concept_id)
            if not uniq:
                errors.append(error_row("ground", f"{cap['caption_id']}:{concept_id}", "no_box",
                                        f"caption {cap['caption_id']}: no box for {concept['phrase']!r}"))
            for k, b in enumerate(uniq.values()):
                regions.append({"caption_id": cap["caption_id"], "concept_id": concept_id, "box_id": k,
                                "image_id": row["image_id"], "phrase": concept["phrase"],
                                "box_xyxy": [float(v) for v in b.xyxy], "score": min(max(b.score, 0.0), 1.0),
                                "label": b.label, "backend": backend})
    return regions, errors
