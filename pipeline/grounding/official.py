"""``backend: official``: the regions of MACCO's released training file (``pipeline.macco_tsv``), not a model.

Each phrase of the file's ``relation_attribute_phrase_bbox_list`` keeps its boxes (original-image pixels); it is
the region of the concept whose word it holds (a relation word first, else an attribute word, as
``official_graphs`` built them), so training masks one phrase's boxes drawn at random, as the reference does. A
phrase holding no masked word, and a box that is not finite or not inside the image, are error rows."""
from __future__ import annotations

import json

from data_schemas.errors import error_row

from .plan import box_problem

NAME = "official"


def official_regions(row: dict, captions: list[dict], by_caption: dict[int, list[dict]],
                     official: dict[int, dict]) -> tuple[list[dict], list[dict]]:
    """The ``regions`` and ``errors`` rows of one image (``row``: its captions-table row) from the file."""
    from pipeline.macco_tsv import _in

    regions, errors = [], []
    for cap in captions:
        cid, o = cap["caption_id"], official.get(cap["caption_id"])
        if o is None:
            continue
        concepts = by_caption.get(cid, [])
        for n, (phrase, boxes) in enumerate(json.loads(o["phrase_boxes"]).items()):
            owner = next((k for kind in ("relation", "attribute") for k in concepts
                          if k["kind"] == kind and _in(k["text"], phrase)), None)
            if owner is None:
                errors.append(error_row("ground", f"{cid}:{phrase}", "official_phrase_without_word",
                                        f"caption {cid}: phrase {phrase!r} holds none of its masked words"))
                continue
            kept = [b for j, b in enumerate(boxes) if not _bad(row, f"{cid}:{owner['concept_id']}:{n}:{j}", b, errors)]
            start = sum(1 for r in regions if r["caption_id"] == cid and r["concept_id"] == owner["concept_id"])
            regions += [{"caption_id": cid, "concept_id": owner["concept_id"], "box_id": start + k,
                         "image_id": row["image_id"], "phrase": phrase, "box_xyxy": [float(v) for v in b],
                         "score": 1.0, "label": phrase, "backend": NAME} for k, b in enumerate(kept)]
    return regions, errors


def _bad(row: dict, item: str, box, errors: list) -> bool:
    """Whether ``box`` is not finite or not inside the image (then an error row for ``item``)."""
    problem = box_problem(box, row)
    if problem is not None:
        errors.append(error_row("ground", item, *problem))
    return problem is not None
