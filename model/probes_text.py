"""The probes of the text side: what the text tower reads of word order and relations (swap sensitivity, the
relation-direction probe, BigramShift on its word tokens and its EOT). ``model.probes`` runs them with the rest."""
from __future__ import annotations

import random

import numpy as np
import torch


def _np(colour: str, kind: str) -> str:
    return f"{'an' if colour[0] in 'aeiou' else 'a'} {colour} {kind}"


# ---- text side -------------------------------------------------------------------------------------------
def swap_captions(meta: dict, scenes: list[dict]) -> list[tuple[str, str, str | None]]:
    """(caption, subject/object swap, attribute swap or None) for each spatial relation of ``scenes``."""
    words = meta["relation_words"]
    out = []
    for sc in scenes:
        for r in sc["relations"]:
            if r["relation"] not in ("left of", "right of", "above", "below"):
                continue
            a, b = sc["shapes"][r["subject"]], sc["shapes"][r["object"]]
            w = words[r["relation"]]
            cap = f"{_np(a['colour'], a['kind'])} {w} {_np(b['colour'], b['kind'])}"
            rel = f"{_np(b['colour'], b['kind'])} {w} {_np(a['colour'], a['kind'])}"
            att = None
            if a["colour"] != b["colour"] and a["kind"] != b["kind"]:
                att = f"{_np(b['colour'], a['kind'])} {w} {_np(a['colour'], b['kind'])}"
            out.append((cap, rel, att))
    return out


def direction_captions(meta: dict, n: int, seed: int = 0) -> tuple[list[str], np.ndarray]:
    """``n`` generated captions "X rel Y" over random pairs of object types, and for each whether it puts the
    pair's alphabetically first type first on the relation's axis (left of / above it)."""
    rng = random.Random(seed)
    types = [(c, k) for c in meta["colours"] for k in meta["kinds"]]
    words = meta["relation_words"]
    texts, labels = [], []
    for _ in range(n):
        p, q = sorted(rng.sample(types, 2))
        rel = rng.choice(["left of", "right of", "above", "below"])
        first, second = (p, q) if rng.random() < 0.5 else (q, p)
        texts.append(f"{_np(*first)} {words[rel]} {_np(*second)}")
        before = rel in ("left of", "above")  # the caption's first shape comes first on the axis
        labels.append(int(before == (first == p)))
    return texts, np.array(labels)


def text_direction_probe(T: np.ndarray, labels: np.ndarray, folds: int = 5, seed: int = 0) -> float:
    """Out-of-fold accuracy of a logistic probe from text embeddings to the direction labels."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_predict
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    est = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=2000))
    pred = cross_val_predict(est, T, labels, cv=StratifiedKFold(folds, shuffle=True, random_state=seed))
    return float((pred == labels).mean())


def bigram_shift(caption: str, rng) -> str | None:
    """SentEval's BigramShift perturbation: two adjacent words swapped at a random place (None if every swap
    leaves the caption unchanged)."""
    words = caption.split()
    spots = [i for i in range(len(words) - 1) if words[i].lower() != words[i + 1].lower()]
    if not spots:
        return None
    i = spots[rng.randrange(len(spots))]
    return " ".join(words[:i] + [words[i + 1], words[i]] + words[i + 2:])


@torch.no_grad()
def token_and_eot_features(model, tokenizer, texts: list[str], batch_size: int = 256,
                           device: str = "cpu") -> tuple[np.ndarray, np.ndarray]:
    """(the mean of each caption's word-token features, its normalised EOT feature), from the text tower."""
    from .masked import encode_text_tokens
    from .siglip import is_siglip_text

    # CLIP's BPE: the words sit between the start token and the EOT (the largest id). A SigLIP tokenizer has no
    # start token, and its end and padding ids are small: the words are the ids an empty caption does not have
    special = None if not is_siglip_text(model) else tokenizer([""]).to(device).unique()
    toks, eots = [], []
    for i in range(0, len(texts), batch_size):
        t = tokenizer(texts[i:i + batch_size]).to(device)
        x, g = encode_text_tokens(model, t)
        if special is None:
            pos = torch.arange(t.shape[1], device=device)
            words = (pos > 0) & (pos.unsqueeze(0) < t.argmax(dim=-1).unsqueeze(1))
        else:
            words = ~torch.isin(t, special)
        words = words.float().unsqueeze(-1)
        toks.append(((x.float() * words).sum(1) / words.sum(1).clamp(min=1)).cpu().numpy())
        eots.append(torch.nn.functional.normalize(g.float(), dim=-1).cpu().numpy())
    return np.concatenate(toks), np.concatenate(eots)


def bigram_shift_probe(model, tokenizer, captions: list[str], cfg) -> dict:
    """Does the text tower know word order? Out-of-fold accuracy (50 % chance) of a logistic probe telling a
    held-out caption from its BigramShift, from (a) the mean of its word-token features, (b) its EOT feature; a
    caption and its shift are always in the same fold, as are the copies of a repeated caption. ``cfg``: a
    ``model.probes.ProbeConfig`` (seed, folds, batch size, device)."""
    import random

    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GroupKFold, cross_val_predict
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rng = random.Random(cfg.seed)
    pairs = [(c, s) for c in captions if (s := bigram_shift(c, rng)) is not None]
    texts = [t for p in pairs for t in p]
    labels = np.tile([0, 1], len(pairs))
    # one group per caption text (the world's captions repeat): a text and its shift never straddle two folds
    index: dict[str, int] = {}
    groups = np.repeat([index.setdefault(c, len(index)) for c, _ in pairs], 2)
    tok, eot = token_and_eot_features(model, tokenizer, texts, cfg.batch_size, cfg.device)
    out = {"bigram_shift_n": len(pairs)}
    for name, X in (("tokens", tok), ("eot", eot)):
        est = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=2000))
        pred = cross_val_predict(est, X, labels, cv=GroupKFold(cfg.folds), groups=groups)
        out[f"bigram_shift_{name}_acc"] = float((pred == labels).mean())
    return out
