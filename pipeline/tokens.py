"""Align concept character spans to positions in the token sequence of their caption.

CLIP BPE (open_clip's ``SimpleTokenizer``): the caption is split with the tokenizer's regex into pre-tokens whose
character offsets we keep, each pre-token is BPE-encoded exactly as ``encode`` does, and the concatenation is
checked against ``tokenizer.encode(caption)``. Position 0 is SOT; captions longer than the context are truncated
as open_clip does (last kept token forced to EOT).
Hugging Face tokenizers (open_clip's ``HFTokenizer``: SigLIP's SentencePiece, loaded from a ``local-dir:``
folder): the caption is cleaned the tokenizer's way with a map from each kept character to its place in the
caption, the fast tokenizer's own offsets give each token's characters, and the ids are checked against the
tokenizer's output; no start token, the end token at ``eot_idx``.
Either way a concept gets every piece whose character span overlaps its own (its *own* occurrence, never the first
string match), and a concept whose pieces fall past the cut is listed in ``unmatched``.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import lru_cache

from data_schemas.errors import error_row
from data_schemas.geometry import DEFAULT_ARCH

STAGE = "parse"
_HF_LOCK = threading.Lock()


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
    """The tokenizer ``open_clip.get_tokenizer(model)`` returns, built the way it builds it, from local files only.

    Built-in architectures whose text config names no Hugging Face tokenizer (every OpenAI CLIP, the repo's
    tiny configs) get ``SimpleTokenizer(context_length, **tokenizer_kwargs)`` straight from open_clip's
    tokenizer module. A ``local-dir:FOLDER`` (open_clip_config.json + the tokenizer files, e.g. a downloaded
    ``timm/ViT-B-16-SigLIP``) goes through ``open_clip.get_tokenizer``. Hub names are refused: nothing is
    downloaded here.
    """
    arch = "ViT-B-32" if model in TINY_ARCHS else model
    if arch.endswith("-gelu") and not arch.endswith("-quickgelu"):  # model.factory.resolve_arch's alias: same tokenizer
        arch = arch.removesuffix("-gelu")
    text_cfg = None if arch.startswith("local-dir:") else _builtin_text_cfg(arch)
    hub = arch.removeprefix("hf-hub:") if arch.startswith("hf-hub:") else (text_cfg or {}).get("hf_tokenizer_name")
    if hub or (text_cfg is not None and "siglip" in arch.lower()):
        raise ValueError(f"model {model!r} loads its tokenizer from the Hugging Face hub ({hub or arch}), and this "
                         f"runs offline: download that repository (open_clip_config.json, the weights and the "
                         f"tokenizer files) to a folder and pass local-dir:/that/folder")
    if text_cfg is not None:
        return _bpe_module().SimpleTokenizer(context_length=text_cfg.get("context_length", 77),
                                             **text_cfg.get("tokenizer_kwargs", {}))
    if not arch.startswith("local-dir:"):  # open_clip would fall back to the CLIP BPE, with only a log warning
        raise ValueError(f"model {model!r}: no open_clip architecture of that name and not a local-dir: folder "
                         "(a repo SigLIP architecture's tokenizer is its folder's: local-dir:PATH, or "
                         "built:tokenizer in the flow)")
    import open_clip

    tok = open_clip.get_tokenizer(arch)
    if not (_is_bpe(tok) or _is_hf(tok)):
        raise ValueError(f"model {model!r}: token alignment supports CLIP BPE and Hugging Face fast tokenizers, "
                         f"not {type(tok).__name__}")
    return tok


def _is_bpe(tok) -> bool:
    return hasattr(tok, "bpe") and hasattr(tok, "pat")


def _is_hf(tok) -> bool:
    return hasattr(tok, "tokenizer") and getattr(tok.tokenizer, "is_fast", False)


def tokenizer_name(model: str) -> str:
    """The ``token_masks`` key of a model's tokenizer: ``clip-bpe`` for every OpenAI ViT and tiny config (one
    49408 BPE vocabulary), ``hf:<folder>-<sha256 of its tokenizer files, 8 hex>`` for a local Hugging Face
    tokenizer (two folders of the same name are two keys)."""
    if model.startswith("local-dir:") and _is_hf(get_tokenizer(model)):
        import hashlib
        from pathlib import Path

        folder = Path(model.removeprefix("local-dir:"))
        h = hashlib.sha256()
        for f in sorted(folder.glob("*token*")) + sorted(folder.glob("*.model")):  # tokenizer.json, spiece.model
            h.update(f.name.encode() + b"\0" + f.read_bytes())
        return f"hf:{folder.resolve().name}-{h.hexdigest()[:8]}"
    return "clip-bpe"


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


def align_caption(tok, caption: str, context_length: int | None = None) -> Alignment:
    """Tokenize ``caption`` keeping each piece's character span in the original string (``context_length``
    None: the tokenizer's own)."""
    context_length = context_length or tok.context_length
    if _is_hf(tok):
        return _align_hf(tok, caption, context_length)
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


def _cleaned_with_map(tok, caption: str) -> tuple[str, list[int]]:
    """``tok.clean_fn(caption)`` built character by character, with each kept character's index in ``caption``
    (open_clip's whitespace / lower / canonicalize cleaning: ``_`` to space and punctuation removed for
    canonicalize, lowercase, whitespace runs to one space, stripped). Refused when ftfy/html cleaning changes
    the caption (the offsets would not hold)."""
    import string

    name = getattr(tok.clean_fn, "__name__", "")
    chars = list(enumerate(caption))
    if name == "_clean_canonicalize":
        chars = [(i, " " if c == "_" else c) for i, c in chars]
        chars = [(i, c) for i, c in chars if c not in string.punctuation]
    if name in ("_clean_canonicalize", "_clean_lower"):
        chars = [(i, c.lower()) if len(c.lower()) == 1 else (i, c) for i, c in chars]
    out, where = [], []
    for i, c in chars:
        if c.isspace():
            if out and out[-1] != " ":
                out.append(" ")
                where.append(i)
        else:
            out.append(c)
            where.append(i)
    if out and out[-1] == " ":
        out.pop()
        where.pop()
    text = "".join(out)
    if text != tok.clean_fn(caption):
        raise ValueError("caption changes under the tokenizer's cleaning (ftfy/html/unicode); "
                         "character offsets cannot be kept")
    return text, where


def _align_hf(tok, caption: str, context_length: int) -> Alignment:
    """A Hugging Face fast tokenizer's ids with each token's character span in ``caption`` (from the tokenizer's
    offsets in the cleaned text, mapped back); checked against ``tok(caption)``, the ids open_clip gives."""
    text, where = _cleaned_with_map(tok, caption)
    hf = tok.tokenizer
    # a fast tokenizer sets its padding/truncation state on every call: two threads (the flow maps parse shards
    # over a thread pool) using the one cached instance fail with "Already borrowed"
    with _HF_LOCK:
        enc = hf(text, max_length=context_length, padding="max_length", truncation=True,
                 return_offsets_mapping=True)
        expected = tok([caption], context_length)[0].tolist()
        full_length = len(hf(text)["input_ids"])
    ids = list(enc["input_ids"])
    if ids != expected:
        raise ValueError("the tokenizer's ids differ from open_clip's for this caption; offsets cannot be kept")
    # the structural tokens are no caption piece; <unk> is (a masked concept hides its unknown characters too)
    frame = {t for t in (hf.pad_token_id, hf.eos_token_id, hf.bos_token_id, hf.cls_token_id, hf.sep_token_id)
             if t is not None}
    pieces = [(pos, where[s], where[e - 1] + 1) for pos, (s, e) in enumerate(enc["offset_mapping"])
              if e > s and ids[pos] not in frame]
    # a SentencePiece word-start marker on its own ("\u2581") belongs to the word it starts: the next piece's span
    tokens = hf.convert_ids_to_tokens([ids[p] for p, _, _ in pieces])
    for k in range(len(pieces) - 2, -1, -1):
        if tokens[k].replace("\u2581", "") == "":
            pieces[k] = (pieces[k][0], *pieces[k + 1][1:])
    eos = hf.eos_token_id
    eot_idx = ids.index(eos) if eos is not None and eos in ids else \
        max((k for k, t in enumerate(ids) if t != hf.pad_token_id), default=0)
    return Alignment(ids, eot_idx, pieces, full_length > context_length)


def positions_for_span(al: Alignment, start: int, end: int) -> list[int]:
    return [p for p, s, e in al.pieces if s < end and e > start]


def token_mask_rows(captions: list[dict], graphs: dict[int, list], model: str = DEFAULT_ARCH,
                    context_length: int | None = None) -> tuple[list[dict], list[dict]]:
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
