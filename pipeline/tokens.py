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
from data_schemas.geometry import DEFAULT_ARCH

STAGE = "parse"


# the repo's tiny architectures (model/configs) use the OpenAI CLIP BPE tokenizer, like ViT-B-32
TINY_ARCHS = ("macco-tiny", "macco-micro")


@lru_cache(maxsize=1)
def _open_clip_dir() -> str:
    """open_clip's install directory, located without executing the package."""
    import importlib.util

    spec = importlib.util.find_spec("open_clip")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("open_clip_torch is not installed")
    return spec.submodule_search_locations[0]


def _bpe_module():
    """open_clip's ``tokenizer`` module loaded on its own, without importing the open_clip package.

    ``import open_clip`` pulls in its model zoo (transformers, torchvision, torch._dynamo: seconds of start-up);
    the tokenizer module has no intra-package imports, so it is executed from its file in open_clip's install.
    """
    import importlib.util
    import os
    import sys

    name = "_macco_open_clip_tokenizer"
    if name not in sys.modules:
        mod_spec = importlib.util.spec_from_file_location(name, os.path.join(_open_clip_dir(), "tokenizer.py"))
        mod = importlib.util.module_from_spec(mod_spec)
        mod_spec.loader.exec_module(mod)
        sys.modules[name] = mod
    return sys.modules[name]


def _builtin_text_cfg(model: str) -> dict | None:
    """``text_cfg`` of an open_clip built-in architecture read from its JSON; None if there is no such file."""
    import json
    import os

    if ":" in model or "/" in model:
        return None
    path = os.path.join(_open_clip_dir(), "model_configs", f"{model}.json")
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f).get("text_cfg", {})


@lru_cache(maxsize=4)
def get_tokenizer(model: str = DEFAULT_ARCH):
    """The CLIP BPE tokenizer ``open_clip.get_tokenizer(model)`` returns, built the way it builds it.

    Built-in architectures whose text config names no Hugging Face tokenizer (every OpenAI CLIP, the repo's
    tiny configs) get ``SimpleTokenizer(context_length, **tokenizer_kwargs)`` straight from open_clip's
    tokenizer module; anything else goes through ``open_clip.get_tokenizer``.
    """
    arch = "ViT-B-32" if model in TINY_ARCHS else model
    text_cfg = _builtin_text_cfg(arch)
    if text_cfg is not None and not text_cfg.get("hf_tokenizer_name") and "siglip" not in arch.lower():
        tok = _bpe_module().SimpleTokenizer(context_length=text_cfg.get("context_length", 77),
                                            **text_cfg.get("tokenizer_kwargs", {}))
    else:
        import open_clip

        tok = open_clip.get_tokenizer(arch)
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


@lru_cache(maxsize=1 << 16)
def _word_pieces(tok, word: str) -> tuple[tuple[int, int], ...]:
    """(token id, characters covered) of each BPE piece of one pre-token, as ``tok.encode`` encodes it."""
    encoded = "".join(tok.byte_encoder[b] for b in word.encode("utf-8"))
    out = []
    for p in tok.bpe(encoded).split(" "):
        out.append((tok.encoder[p], len(p[:-4] if p.endswith("</w>") else p)))  # byte chars == chars (ASCII)
    return tuple(out)


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
        pos, end = m.span()
        for token_id, n in _word_pieces(tok, m.group(0)):
            ids.append(token_id)
            spans.append((pos, min(pos + n, end)))
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


def token_mask_rows(captions: list[dict], graphs: dict[int, list], model: str = DEFAULT_ARCH,
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
