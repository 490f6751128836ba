"""The reconstruction probe's breakdown: which masked words the text predictor gets right — direction words (left,
right, above, below; synonyms merged) apart from the filler around them ("to", "the", "of", "side", "on", ...),
relation apart from attribute — each beside **the captions' image-free baseline**.

That baseline is a frequency estimate from the training captions (no predictor is trained): at each masked position,
the training captions' most frequent word in the same context — its kind, the length of its masked span and its
place in it, the unmasked word before and after the span — backing off to less context where a context was never
seen. It is a baseline, not a bound: a text predictor that reads no image can exceed it (R4's trained image-free
control did on direction, filler and relation words), so accuracy above it is not by itself evidence of reading the
image; the comparison for that is the trained image-free control (``withhold_image``, the experiment log's R4).
"""
from __future__ import annotations

from collections import Counter

# the world's direction words by direction (pipeline.world.RELATION_WORDS: "to the left of", "over", "beneath")
DIRECTIONS = {"left": ("left",), "right": ("right",), "above": ("above", "over"), "below": ("below", "under", "beneath")}
KINDS = ("relation", "attribute")


def direction_classes(encode) -> dict[int, str]:
    """{token id: direction} of the direction words (``encode``: the model's tokenizer's ``encode``, words of one
    BPE piece only: the world's are)."""
    out = {}
    for direction, words in DIRECTIONS.items():
        for w in words:
            ids = encode(w)
            if len(ids) == 1:
                out[ids[0]] = direction
    return out


def masked_positions(row: dict) -> list[tuple[str, int, int, int, int | None, int | None]]:
    """(kind, position, span length, place in span, word before the span, word after it) of every masked token of a
    token-mask row: a span is a run of consecutive masked positions of one kind."""
    out = []
    ids = row["token_ids"]
    for kind in KINDS:
        pos = sorted(row[f"{kind}_idx"])
        spans: list[list[int]] = []
        for p in pos:
            if spans and p == spans[-1][-1] + 1:
                spans[-1].append(p)
            else:
                spans.append([p])
        for span in spans:
            before = ids[span[0] - 1] if span[0] > 0 else None
            after = ids[span[-1] + 1] if span[-1] + 1 < len(ids) else None
            out += [(kind, p, len(span), k, before, after) for k, p in enumerate(span)]
    return out


def _contexts(kind, n, k, before, after) -> list[tuple]:
    """From the most specific context to the least (the back-off order)."""
    return [(kind, n, k, before, after), (kind, n, k, before), (kind, k, before), (kind, n, k), (kind,)]


def caption_baseline(train_rows: list[dict], rows: list[dict]) -> list[tuple[str, int, int]]:
    """(kind, true token, predicted token) at every masked position of ``rows``, the prediction being the training
    captions' most frequent token in the same context (``_contexts``, backing off)."""
    counts: dict[tuple, Counter] = {}
    for r in train_rows:
        for kind, p, n, k, before, after in masked_positions(r):
            for ctx in _contexts(kind, n, k, before, after):
                counts.setdefault(ctx, Counter())[r["token_ids"][p]] += 1
    out = []
    for r in rows:
        for kind, p, n, k, before, after in masked_positions(r):
            guess = next((counts[c].most_common(1)[0][0] for c in _contexts(kind, n, k, before, after) if c in counts),
                         -1)
            out.append((kind, r["token_ids"][p], guess))
    return out


def breakdown(records: list[tuple[str, int, int]], classes: dict[int, str]) -> dict:
    """Accuracies of (kind, true token, predicted token) records: ``relation`` and ``attribute`` (the token
    exactly), ``direction`` (relation tokens that are direction words: the predicted token's direction, synonyms
    merged) and ``filler`` (the other relation tokens, exactly); each with its count."""
    hits: dict[str, list[int]] = {k: [0, 0] for k in ("relation", "attribute", "direction", "filler")}
    for kind, true, pred in records:
        hits[kind][0] += int(pred == true)
        hits[kind][1] += 1
        if kind == "relation":
            group = "direction" if true in classes else "filler"
            right = classes.get(pred) == classes[true] if group == "direction" else pred == true
            hits[group][0] += int(right)
            hits[group][1] += 1
    return {**{f"{k}_acc": (c / n if n else None) for k, (c, n) in hits.items()},
            **{f"{k}_n": n for k, (_, n) in hits.items()}}
