"""MACCO's released training file, ``mscoco_object_relation_attribute_with_phrase_bbox.tsv``, as a data source.

The format, as the official loader parses it (``docs/official-implementation.md`` §1): tab-separated with a header
row, columns by name. ``filepath`` is the image path under the datasets folder (our ``image_root``), ``title`` the
caption; the other columns hold Python literals (read with ``ast.literal_eval``):

- ``object_list``, ``relation_list``, ``attribute_list``: the caption's words; every relation and attribute word is
  masked in the text (its first occurrence, ``the`` skipped), objects are not;
- ``relation_phrase_list``, ``attribute_phrase_list``: the phrases ("man riding horse", "brown horse");
- ``relation_attribute_phrase_bbox_list``: ``[]`` or ``[{phrase: [[x1, y1, x2, y2], ...]}]``, boxes in pixels of the
  original image; training masks the patches of one phrase's boxes, drawn at random;
- ``neg_caption``: hard-negative captions (used only with the reference's ``add_neg_sample``, off in the paper);
  ``neg_image`` (row indices) is not read.

``read_macco_tsv`` gives the captions rows (image sizes read from the images), the ``official`` rows (every list
as the file gives it) and error rows for bad lines. ``official_graphs`` builds the ``scene_graphs`` concepts from
the lists by the loader's own rule (``docs/official-implementation.md``): each word BPE-encoded alone and its
**first** id-sequence match among the caption's tokens marked (a piece of an earlier word included: the loader's
quirk), ``the`` skipped (its one skip), a word with no match an error row (the loader masks nothing for it,
silently); heads from the phrases where they name them, else the nearest objects. ``grounding.official`` turns the
phrase boxes into ``regions``: every phrase a candidate of the image mask, as the loader draws one phrase.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

from data_schemas.errors import error_row
from pipeline.captions import STAGE, CaptionRead
from pipeline.concepts import Concept

LIST_COLUMNS = ("object_list", "relation_list", "attribute_list", "relation_phrase_list", "attribute_phrase_list",
                "neg_caption")
BOX_COLUMN = "relation_attribute_phrase_bbox_list"
REQUIRED = ("filepath", "title", "object_list", "relation_list", "attribute_list", BOX_COLUMN, "neg_caption")
SKIPPED = ("the",)  # the reference's text mask skips this word (and only this one)
PARSER = "official"


def _literal(value: str | None, column: str, where: str):
    """A cell's Python literal; an empty or malformed cell raises ValueError naming the column."""
    if value is None or not value.strip():
        raise ValueError(f"{column}: empty cell (the official loader's literal_eval fails on it; [] for none)")
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
        raise ValueError(f"{column}: not a Python literal ({type(exc).__name__}): {value[:60]!r}") from None


def _words(value, column: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(w, str) for w in value):
        raise ValueError(f"{column}: a list of strings expected, got {str(value)[:60]!r}")
    return value


def _boxes(value) -> dict[str, list[list[float]]]:
    """The phrase -> boxes dict of ``relation_attribute_phrase_bbox_list`` (``[]``: none)."""
    if value == []:
        return {}
    if not (isinstance(value, list) and len(value) >= 1 and isinstance(value[0], dict)):
        raise ValueError(f"{BOX_COLUMN}: [] or [{{phrase: [[x1, y1, x2, y2], ...]}}] expected, got {str(value)[:60]!r}")
    out = {}
    for phrase, boxes in value[0].items():
        if not isinstance(phrase, str) or not isinstance(boxes, list) or not all(
                isinstance(b, (list, tuple)) and len(b) == 4 and all(isinstance(v, (int, float)) for v in b)
                for b in boxes):
            raise ValueError(f"{BOX_COLUMN}: phrase {phrase!r}: a list of [x1, y1, x2, y2] boxes expected")
        out[phrase] = [[float(v) for v in b] for b in boxes]
    return out


def read_macco_tsv(path: str | Path, image_root: str | Path | None = None, split: str = "train"
                   ) -> tuple[CaptionRead, list[dict]]:
    """(captions rows + error rows, ``official`` rows) of the released training file; ``caption_id`` is the data
    row's index (0-based). A line whose literals do not parse is a ``bad_official_row`` error row naming file, line
    and column."""
    import json

    from pipeline.images import ImageSizes
    from pipeline.sources import add_tsv_row, csv_records

    path = Path(path)
    root = Path(image_root) if image_root else path.parent
    images, out, official = ImageSizes(root), CaptionRead(), []
    for i, where, rec in csv_records(path, "\t", REQUIRED, out.errors):
        try:
            lists = {c: _words(_literal(rec.get(c), c, where), c) if c in REQUIRED or rec.get(c) else []
                     for c in LIST_COLUMNS}
            boxes = _boxes(_literal(rec[BOX_COLUMN], BOX_COLUMN, where))
        except ValueError as exc:
            out.errors.append(error_row(STAGE, i, "bad_official_row", f"{where}: {exc}"))
            continue
        if add_tsv_row(out, images, i, rec, root, split, where):  # its annotations go with its caption row
            official.append({"caption_id": i, "objects": lists["object_list"], "relations": lists["relation_list"],
                             "attributes": lists["attribute_list"],
                             "relation_phrases": lists["relation_phrase_list"],
                             "attribute_phrases": lists["attribute_phrase_list"],
                             "phrase_boxes": json.dumps(boxes, sort_keys=True), "neg_captions": lists["neg_caption"]})
    return out, official


def _first(caption: str, word: str) -> tuple[int, int] | None:
    """The first whole-word, case-insensitive occurrence of ``word`` in ``caption``, any run of whitespace matching
    any other (as the tokenizer collapses it): which phrase holds a word, where an object sits in a phrase."""
    pattern = r"\s+".join(re.escape(part) for part in word.split())
    m = re.search(rf"(?<!\w){pattern}(?!\w)", caption, flags=re.IGNORECASE) if pattern else None
    return (m.start(), m.end()) if m else None


def _in(word: str, phrase: str) -> bool:
    return _first(phrase, word) is not None


def official_graphs(captions: list[dict], official: dict[int, dict], model: str = "ViT-B-32"
                    ) -> tuple[list[dict], list[dict], dict]:
    """(``scene_graphs`` rows, ``errors`` rows, {caption_id: [Concept]}) from the file's word lists, by the official
    loader's rule: each word (objects, relations, then attributes; ``the`` skipped for the masked kinds) encoded
    alone with the CLIP BPE, its **first** id-sequence match in the caption's 77 token ids marked — a piece of an
    earlier word whose id equals the word's included, a multiword word matched as tokens (whitespace collapsed). The
    concept's span is the characters of the matched pieces. A word with no match is an error row (the loader masks
    nothing for it, silently)."""
    from pipeline.tokens import _is_bpe, align_caption, get_tokenizer

    tok = get_tokenizer(model)
    if not _is_bpe(tok):
        raise ValueError(f"parse.parser 'official' matches words the official loader's way, in the CLIP BPE: "
                         f"{model!r} has another tokenizer")
    rows, errors, graphs = [], [], {}
    for c in captions:
        o = official.get(c["caption_id"])
        if o is None:
            continue
        try:
            al = align_caption(tok, c["caption"])
        except ValueError as exc:
            errors.append(error_row("parse", c["caption_id"], "token_alignment", f"caption {c['caption_id']}: {exc}"))
            continue
        span_of = {pos: (s, e) for pos, s, e in al.pieces}
        concepts: list[Concept] = []
        for kind, words in (("object", o["objects"]), ("relation", o["relations"]), ("attribute", o["attributes"])):
            for w in words:
                item = f"{c['caption_id']}:{kind}:{w}"
                if w.lower() in SKIPPED:
                    errors.append(error_row("parse", item, "official_skipped_word",
                                            f"caption {c['caption_id']}: {kind} {w!r} is not masked (the official "
                                            "loader skips it)"))
                    continue
                span = _first_ids(al.token_ids, tok.encode(w), span_of)
                if span is None:
                    errors.append(error_row("parse", item, "official_word_not_found",
                                            f"caption {c['caption_id']}: {kind} {w!r} does not occur in the tokens of "
                                            f"{c['caption']!r} (the official loader masks nothing for it)"))
                    continue
                concepts.append(Concept(len(concepts), kind, c["caption"][span[0]:span[1]], *span))
        _heads(concepts, o)
        graphs[c["caption_id"]] = concepts
        rows += [{"caption_id": c["caption_id"], "concept_id": k.concept_id, "kind": k.kind, "text": k.text,
                  "char_start": k.char_start, "char_end": k.char_end, "subject_id": k.subject_id,
                  "object_id": k.object_id, "phrase": k.phrase or k.text, "parser": PARSER} for k in concepts]
    return rows, errors, graphs


def _first_ids(tokens: list[int], ids: list[int], span_of: dict[int, tuple[int, int]]) -> tuple[int, int] | None:
    """The characters of the first run of ``tokens`` equal to ``ids`` (the official loader's scan over the whole
    token sequence); None without a match, or for a match that is not caption text (start/end token, padding)."""
    n = len(ids)
    for s in range(len(tokens) - n + 1) if n else ():
        if tokens[s:s + n] == ids:
            if not all(p in span_of for p in range(s, s + n)):
                return None
            return span_of[s][0], span_of[s + n - 1][1]
    return None


def _heads(concepts: list[Concept], official: dict) -> None:
    """Heads and phrases of the attributes and relations: from the file's phrase that holds the word (its object
    words before / after it), else the nearest objects in the caption (an attribute: the next one)."""
    objects = [k for k in concepts if k.kind == "object"]

    def near(pos: int, after: bool) -> Concept | None:
        side = [k for k in objects if (k.char_start > pos if after else k.char_end <= pos)]
        return (min if after else max)(side, key=lambda k: k.char_start) if side else None

    for k in concepts:
        if k.kind == "object":
            continue
        phrases = official["relation_phrases" if k.kind == "relation" else "attribute_phrases"]
        phrase = next((p for p in phrases if _in(k.text, p)), None)
        if phrase is not None:
            at = _first(phrase, k.text)[0]
            in_phrase = [(o, _first(phrase, o.text)) for o in objects if _first(phrase, o.text)]
            before = [o for o, sp in in_phrase if sp[0] < at]
            after = [o for o, sp in in_phrase if sp[0] > at]
        else:
            before, after = [], []
        if k.kind == "attribute":
            obj = (after or before or [near(k.char_start, True) or near(k.char_start, False)])[0]
            k.object_id = obj.concept_id if obj else None
        else:
            subj = (before[-1:] or [near(k.char_start, False)])[0]
            obj = (after or [near(k.char_end, True)])[0]
            k.subject_id = subj.concept_id if subj else None
            k.object_id = obj.concept_id if obj else None
        k.phrase = phrase or k.text
