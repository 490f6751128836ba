"""``backend: official``: the regions of MACCO's released training file (``pipeline.macco_tsv``), not a model.

The official loader masks the patches of **one phrase** of ``relation_attribute_phrase_bbox_list``, drawn at random
among the phrases (``random.choice`` over the dict's values), its boxes clipped to the (cropped) image. So every
phrase of the file is a region of its own here — the training's candidates are the (concept, phrase) groups of
``regions`` (``model.data.build_samples``) — with its boxes clamped to the image:

- a phrase holding a masked word of the caption is the region of that word's concept (a relation word first, else
  an attribute word); two phrases sharing one word ("white dog", "white snow") stay two candidates;
- a phrase holding none (its word a lemma absent from the caption, "graze") has no concept (``concept_id`` -1):
  the loader draws it all the same, so it is kept; two such phrases of a caption share the concept -1 but stay two
  candidates (the phrase is part of the candidate's key), never their union;
- a phrase with no box (``[]``) cannot be a region: an ``official_phrase_no_box`` error row (the loader draws it
  with the others, uniformly, and masks nothing);
- a box is clamped to the image (a box starting 1.7 px left of it starts at 0, as the loader's crop clipping
  does); a box not finite, inverted or empty once clamped is an error row (the loader would fail on a non-finite
  one and mark nothing, or its out-of-crop edge patch, for the others: ``docs/official-implementation.md``).
"""
from __future__ import annotations

import json

from data_schemas.errors import error_row

from .plan import box_problem

NAME = "official"
NO_CONCEPT = -1  # a phrase of the file holding none of its caption's masked words


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
        count: dict[int, int] = {}
        for n, (phrase, boxes) in enumerate(json.loads(o["phrase_boxes"]).items()):
            owner = next((k["concept_id"] for kind in ("relation", "attribute") for k in concepts
                          if k["kind"] == kind and _in(k["text"], phrase)), NO_CONCEPT)
            if not boxes:  # nothing to write to regions: the loader's 1-in-n empty mask is lost, so say so
                errors.append(error_row("ground", f"{cid}:{owner}:{n}", "official_phrase_no_box",
                                        f"caption {cid}, phrase {phrase!r}: no box (the official loader can draw it "
                                        "and mask nothing; here it is no candidate)"))
            for j, b in enumerate(boxes):
                box = clamp(b, row)
                problem = box_problem(box, row)
                if problem is not None:
                    errors.append(error_row("ground", f"{cid}:{owner}:{n}:{j}", problem[0],
                                            f"caption {cid}, phrase {phrase!r}: {problem[1]}"))
                    continue
                k = count[owner] = count.get(owner, -1) + 1
                regions.append({"caption_id": cid, "concept_id": owner, "box_id": k, "image_id": row["image_id"],
                                "phrase": phrase, "box_xyxy": box, "score": 1.0, "label": phrase, "backend": NAME})
    return regions, errors


def clamp(box, row: dict) -> list[float]:
    """``box`` [x1, y1, x2, y2] clamped to the image (``row``'s width and height); a non-finite value kept (then
    refused by ``box_problem``)."""
    x1, y1, x2, y2 = (float(v) for v in box)
    w, h = float(row["width"]), float(row["height"])
    return [min(max(x1, 0.0), w), min(max(y1, 0.0), h), min(max(x2, 0.0), w), min(max(y2, 0.0), h)]
