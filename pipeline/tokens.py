"""Align concept character spans to positions in the CLIP BPE token sequence of their caption.

Uses open_clip's own tokenizer (``SimpleTokenizer``): the caption is split with the tokenizer's regex into
pre-tokens whose character offsets we keep, each pre-token is BPE-encoded exactly as ``encode`` does, and
the concatenation is checked against ``tokenizer.encode(caption)``. A concept gets every BPE piece whose
character span overlaps its own (its *own* occurrence, never the first string match). Position 0 is SOT;
captions longer than the context are truncated as open_clip does (last kept token forced to EOT), and a
concept whose pieces fall past the cut is listed in ``unmatched``.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from data_schemas.errors import error_row

STAGE = "parse"


# the repo's tiny architectures (model/configs) use the OpenAI CLIP BPE tokenizer, like ViT-B-32
TINY_ARCHS = ("macco-tiny", "macco-micro")


@lru_cache(maxsize=4)
def get_tokenizer(model: str = "ViT-B-32"):
    import open_clip

    tok = open_clip.get_tokenizer("ViT-B-32" if model in TINY_ARCHS else model)
    if not hasattr(tok, "bpe") or not hasattr(tok, "pat"):
        raise ValueError(f"model {model!r} does not use the CLIP BPE tokenizer; token alignment needs it")
    return tok


def tokenizer_name(model: str) -> str:
    return "clip-bpe"  # every supported architecture (OpenAI ViTs, tiny configs) shares the 49408 BPE vocab


@dataclass
class Alignment:
    token_ids: list[int]  # full context_length sequence (SOT ... EOT, zero padded)
    eot_idx: int
    pieces: list[tuple[int, int, int]]  # (position, char_start, char_end) per kept BPE piece
    truncated: bool


def align_caption(tok, caption: str, context_length: int = 77) -> Alignment:
    """Tokenize ``caption`` keeping each BPE piece's character span in the original string."""
    low = caption.lower()
    # ftfy/html cleaning is the identity on plain ASCII without entities or escapes (the common case); only
    # other captions pay for running the tokenizer's own cleaning to prove nothing changes
    plain = caption.isascii() and "&" not in caption and "\x1b" not in caption
    if not plain and (tok.clean_fn(caption) != " ".join(low.split()) or len(low) != len(caption)):
        raise ValueError("caption changes under the tokenizer's cleaning (ftfy/html/unicode); "
                         "character offsets cannot be kept")
    ids: list[int] = []
    spans: list[tuple[int, int]] = []
    for m in tok.pat.finditer(low):
        word = m.group(0)
        encoded = "".join(tok.byte_encoder[b] for b in word.encode("utf-8"))
        pieces = tok.bpe(encoded).split(" ")
        pos = m.start()
        for p in pieces:
            n = len(p[:-4] if p.endswith("</w>") else p)  # byte-level chars == chars for ASCII
            ids.append(tok.encoder[p])
            spans.append((pos, min(pos + n, m.end())))
            pos += n
    # the loop above is tokenizer.encode step by step (same cleaning, regex and BPE), so ids equal
    # tokenizer.encode(caption); tests assert it against open_clip's own tokenizer
    truncated = len(ids) + 2 > context_length
    keep = context_length - 2 if truncated else len(ids)
    seq = [tok.sot_token_id] + ids[:keep] + [tok.eot_token_id]
    eot_idx = len(seq) - 1
    seq = seq + [0] * (context_length - len(seq))
    pieces = [(1 + k, s, e) for k, (s, e) in enumerate(spans[:keep])]
    return Alignment(seq, eot_idx, pieces, truncated)


def positions_for_span(al: Alignment, start: int, end: int) -> list[int]:
    return [p for p, s, e in al.pieces if s < end and e > start]


def token_mask_rows(captions: list[dict], graphs: dict[int, list], model: str = "ViT-B-32",
                    context_length: int = 77) -> tuple[list[dict], list[dict]]:
    """``token_masks`` rows (one per caption) and ``errors`` rows (captions the tokenizer cannot align)."""
    tok = get_tokenizer(model)
    name = tokenizer_name(model)
    rows, errors = [], []
    for c in captions:
        cid = c["caption_id"]
        if cid not in graphs:
            continue
        try:
            al = align_caption(tok, c["caption"], context_length)
        except ValueError as exc:
            errors.append(error_row(STAGE, cid, "token_alignment", f"caption {cid}: {exc}"))
            continue
        idx = {"relation": set(), "attribute": set(), "object": set()}
        unmatched = []
        for k in graphs[cid]:
            pos = positions_for_span(al, k.char_start, k.char_end)
            if not pos:
                unmatched.append(f"{k.kind}:{k.text}")
            else:
                idx[k.kind].update(pos)
        rows.append({"caption_id": cid, "tokenizer": name, "token_ids": al.token_ids, "eot_idx": al.eot_idx,
                     "relation_idx": sorted(idx["relation"]), "attribute_idx": sorted(idx["attribute"]),
                     "object_idx": sorted(idx["object"]), "unmatched": unmatched, "truncated": al.truncated})
    return rows, errors
