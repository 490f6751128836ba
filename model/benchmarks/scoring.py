"""The shared scoring core: every unique image and caption encoded once, batched; cosine scores per case.

A ``Case`` has one image (optionally cropped to a bbox), K caption options and the index of the true one, in
the order the benchmark's own scripts use, so ``np.argmax``'s first-index rule gives each benchmark its
authors' tie behaviour (truth at 0: a tie counts as correct; truth at 1: as wrong). Exact ties are counted.
Missing image files are an error (``MissingImages``) unless allowed; allowed, they are counted per subset and left
out of ``n``.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from data_schemas import InputFileError
from data_schemas.geometry import to_rgb


@dataclass
class Case:
    image: str  # absolute path
    options: list[str]
    true_index: int
    subset: str
    crop: tuple[float, float, float, float] | None = None  # x, y, w, h (ARO bbox fields)
    group: str = ""  # e.g. relation name, attribute pair
    meta: dict = field(default_factory=dict)


@dataclass
class SubsetResult:
    n: int = 0
    correct: int = 0
    ties: int = 0
    missing_images: int = 0

    @property
    def accuracy(self) -> float | None:
        return self.correct / self.n if self.n else None

    def as_dict(self) -> dict:
        return {"n": self.n, "correct": self.correct, "accuracy": self.accuracy, "ties": self.ties,
                "missing_images": self.missing_images}


class MissingImages(InputFileError):
    """A benchmark whose image files are partly missing (without ``allow_missing``)."""


def check_missing(name: str, missing: list[str], total: int, allow: bool) -> None:
    """Raise ``MissingImages`` naming the count and examples unless ``allow`` (``--allow-missing``)."""
    if missing and not allow:
        uniq = list(dict.fromkeys(missing))
        raise MissingImages(f"{name}: {len(missing)} of {total} case(s) have no image file ({len(uniq)} distinct, "
                            f"e.g. {uniq[:3]}): fix the image root, or pass --allow-missing to score the rest "
                            "(recorded in results.json and marked in the report)")


def activation_of(model) -> str:
    """The MLP activation the built towers actually use: ``quickgelu``, ``gelu``, a mix, or another class name."""
    from open_clip.transformer import QuickGELU

    found = set()
    for m in model.modules():
        if isinstance(m, QuickGELU):
            found.add("quickgelu")
        elif isinstance(m, torch.nn.GELU):
            found.add("gelu")
    return "+".join(sorted(found)) if found else "unknown"


class Encoder:
    """Wraps an open_clip model + preprocess + tokenizer; encodes with caching of normalised features."""

    def __init__(self, model, preprocess, tokenizer, device: str = "cpu", batch_size: int = 64,
                 autocast: bool = False):
        self.model, self.preprocess, self.tokenizer = model.eval(), preprocess, tokenizer
        self.device, self.batch_size, self.autocast = device, batch_size, autocast
        self.activation = activation_of(model)

    def _ctx(self):
        dev = torch.device(self.device).type
        return torch.autocast(dev, enabled=self.autocast, dtype=torch.bfloat16 if dev == "cpu" else torch.float16)

    @torch.no_grad()
    def texts(self, texts: Sequence[str]) -> np.ndarray:
        """Normalised text features in input order. Texts with equal token ids are encoded once and share one
        bit-identical row (a batch's padding and position change the last bits, and the benchmarks' tie rules need
        equal options to score equal). Causal CLIP text towers run on length-sorted batches trimmed to their
        longest caption (``encode_text_trimmed``: the same features, a fraction of the cost)."""
        from ..masked import encode_text_trimmed, supports_trimmed_text

        if not len(texts):
            return np.zeros((0, 1), np.float32)
        tokens, back = torch.unique(self.tokenizer(list(texts)), dim=0, return_inverse=True)
        trim = supports_trimmed_text(self.model)
        order = torch.argsort(tokens.argmax(dim=-1), stable=True) if trim else torch.arange(len(tokens))
        out = torch.empty(0)
        for i in range(0, len(tokens), self.batch_size):
            idx = order[i:i + self.batch_size]
            tok = tokens[idx].to(self.device)
            with self._ctx():
                f = encode_text_trimmed(self.model, tok) if trim else self.model.encode_text(tok)
            f = torch.nn.functional.normalize(f.float(), dim=-1).cpu()
            if not out.numel():
                out = torch.empty(len(tokens), f.shape[1])
            out[idx] = f
        return out[back].numpy()

    @torch.no_grad()
    def images(self, keys: Sequence[tuple[str, tuple | None]]) -> np.ndarray:
        from PIL import Image, UnidentifiedImageError

        out = []
        for i in range(0, len(keys), self.batch_size):
            ims = []
            for path, crop in keys[i:i + self.batch_size]:
                try:
                    with Image.open(path) as im:
                        im = to_rgb(im)
                        if crop is not None:
                            x, y, w, h = crop
                            im = im.crop((x, y, x + w, y + h))
                        ims.append(self.preprocess(im))
                except (OSError, UnidentifiedImageError, Image.DecompressionBombError) as exc:
                    raise InputFileError(f"{path}: a benchmark image that cannot be read ({exc})") from exc
            with self._ctx():
                f = self.model.encode_image(torch.stack(ims).to(self.device))
            out.append(torch.nn.functional.normalize(f.float(), dim=-1).cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, 1), np.float32)


def score_cases(enc: Encoder, cases: Sequence[Case]) -> list[np.ndarray]:
    """Cosine scores per case (a K-vector each); cases whose image file is missing get None.

    Options with equal features (equal token ids: ``Encoder.texts``) score exactly equal, as in the authors'
    einsum: each distinct feature row of a case is scored once and the score copied to its positions (a matrix
    product gives equal rows at different positions different last bits, which would break exact ties)."""
    img_keys = list(OrderedDict.fromkeys((c.image, c.crop) for c in cases if Path(c.image).is_file()))
    img_index = {k: i for i, k in enumerate(img_keys)}
    texts = list(OrderedDict.fromkeys(t for c in cases for t in c.options))
    I, T = enc.images(img_keys), np.ascontiguousarray(enc.texts(texts))
    rows = T.view(np.dtype((np.void, T.dtype.itemsize * T.shape[1]))).ravel()  # one bytes key per feature row
    _, first, row_of = np.unique(rows, return_index=True, return_inverse=True)
    U, txt_row = T[first], dict(zip(texts, row_of.tolist()))
    out = []
    for c in cases:
        k = img_index.get((c.image, c.crop))
        if k is None:
            out.append(None)
            continue
        distinct, at = np.unique([txt_row[t] for t in c.options], return_inverse=True)
        out.append((U[distinct] @ I[k])[at])
    return out


def tally(cases: Sequence[Case], scores: Sequence[np.ndarray | None], allow_missing: bool = False,
          name: str = "benchmark") -> dict[str, SubsetResult]:
    """Per subset: cases scored, right, ties, and images missing (an error unless ``allow_missing``)."""
    res: dict[str, SubsetResult] = {}
    missing = []
    for c, s in zip(cases, scores):
        r = res.setdefault(c.subset, SubsetResult())
        if s is None:
            r.missing_images += 1
            missing.append(c.image)
            continue
        r.n += 1
        r.correct += int(np.argmax(s) == c.true_index)
        r.ties += int(np.sum(s == s[c.true_index]) > 1)
    check_missing(name, missing, len(cases), allow_missing)
    return res


def group_accuracy(cases: Sequence[Case], scores: Sequence[np.ndarray | None]) -> dict[str, tuple[int, int]]:
    """{group: (correct, n)} over cases with images."""
    out: dict[str, list[int]] = {}
    for c, s in zip(cases, scores):
        if s is None:
            continue
        g = out.setdefault(c.group, [0, 0])
        g[0] += int(np.argmax(s) == c.true_index)
        g[1] += 1
    return {k: (v[0], v[1]) for k, v in out.items()}


def mean(values) -> float | None:
    vals = [v for v in values if v is not None]
    return float(np.mean(vals)) if vals else None
