"""NegCLIP's training file (``temp_data/valid_neg_clip.tsv`` of mertyg/vision-language-models-are-bows; their COCO
train file has the same columns) as a data source, read as given.

The format: tab-separated with a header row (its first column, unnamed, the pandas index they wrote), columns by
name: ``title`` the caption, ``filepath`` the image path under the datasets folder (our ``image_root``),
``neg_caption`` a Python list of perturbed captions, ``neg_image`` a Python list of row indices (0-based data rows
of the same file: the rows whose images are the row's nearest neighbours; their loader takes one at random with
that row's caption and one of its negatives). A CSV-quoted cell (``"[""A ..."", ...]"``) is read as CSV quotes it.

``read_negclip_tsv`` gives the captions rows (``caption_id`` the data row's index, so the indices meet them), the
``negative_captions`` rows (the list as given; an empty list a caption without a negative) and the
``image_neighbours`` rows (per row, its neighbours in the file's order, each with the caption of the row it names),
and an error row for each bad line (naming file, line and column) and for each index that names no caption row of
the file (out of range, a bad line, or the row's own image: named with its value, that neighbour left out).
"""
from __future__ import annotations

import ast
from pathlib import Path

from data_schemas.errors import error_row
from pipeline.captions import STAGE, CaptionRead

REQUIRED = ("title", "filepath", "neg_caption", "neg_image")


def _list_cell(value: str | None, column: str, kind: type):
    """A cell's Python list of ``kind`` values; an empty, malformed or wrongly typed cell raises ValueError."""
    if value is None or not value.strip():
        raise ValueError(f"{column}: empty cell (their loader's literal_eval fails on it; [] for none)")
    try:
        got = ast.literal_eval(value)
    except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
        raise ValueError(f"{column}: not a Python literal ({type(exc).__name__}): {value[:60]!r}") from None
    if not isinstance(got, list) or not all(isinstance(v, kind) and not isinstance(v, bool) for v in got):
        raise ValueError(f"{column}: a list of {kind.__name__} expected, got {value[:60]!r}")
    return got


def read_negclip_tsv(path: str | Path, image_root: str | Path | None = None, split: str = "train") -> CaptionRead:
    """The file as a ``CaptionRead`` whose ``tables`` hold ``negative_captions`` and ``image_neighbours``."""
    from pipeline.images import ImageSizes
    from pipeline.sources import add_tsv_row, csv_records

    path = Path(path)
    root = Path(image_root) if image_root else path.parent
    images, out = ImageSizes(root), CaptionRead()
    given: dict[int, tuple[str, list[str], list[int]]] = {}  # caption_id -> (where, negatives, neighbour rows)
    for i, where, rec in csv_records(path, "\t", REQUIRED, out.errors):
        try:
            negs = _list_cell(rec["neg_caption"], "neg_caption", str)
            near = _list_cell(rec["neg_image"], "neg_image", int)
        except ValueError as exc:
            out.errors.append(error_row(STAGE, i, "bad_negclip_row", f"{where}: {exc}"))
            continue
        if add_tsv_row(out, images, i, rec, root, split, where):
            given[i] = (where, negs, near)
    image_of = {r["caption_id"]: r["image_id"] for r in out.rows}
    neighbours = []
    for cid, (where, _, near) in given.items():
        rank = 0
        for j in near:
            if image_of.get(j, image_of[cid]) == image_of[cid]:
                why = "the row's own image" if j in image_of else "no caption row of the file (out of range or bad)"
                out.errors.append(error_row(STAGE, f"{cid}:neg_image:{j}", "negclip_neighbour_missing",
                                            f"{where}: neg_image {j}: {why}; that neighbour is left out"))
                continue
            neighbours.append({"image_id": image_of[cid], "caption_id": cid, "rank": rank,
                               "neighbour_image_id": image_of[j], "neighbour_caption_id": j, "similarity": None})
            rank += 1
    out.tables = {"negative_captions": [{"caption_id": c, "negatives": g[1]} for c, g in given.items()],
                  "image_neighbours": neighbours}
    return out
