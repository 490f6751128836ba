"""Linear probe on frozen image features over an ImageFolder (``root/train/<class>/*``, ``root/test/<class>/*``,
optionally ``root/val/<class>/*``), as LAION CLIP_benchmark's ``linear_probe`` task does it.

The rule (clip_benchmark ``clip_benchmark/metrics/linear_probe.py`` and ``cli.py``, LAION-AI/CLIP_benchmark):
- features are the L2-normalised ``encode_image`` outputs (``Featurizer``, normalize=True, lines 35-45);
- without a ``val`` split a validation split is carved from train with ``torch.utils.data.random_split(train,
  [1 - p, p])`` (``cli.py`` line 358; ``VAL_PROPORTION`` here, seeded with ``SEED``);
- the regularisation is chosen on the validation split by clip_benchmark's sweep (``linear_probe.py`` lines
  265-278): 7 log-spaced starting points of a 97-point grid, then the peak refined with steps 8, 4, 2, 1;
- the final classifier is trained on train + validation (lines 279-281) and scored on test: top-1 (top-5 with more than
  5 classes) and the mean per-class recall (``balanced_accuracy_score``, line 300).
Deviation: the classifier is scikit-learn's L-BFGS ``LogisticRegression`` with the regularisation as its ``C``,
searched over the CLIP paper's range (Radford et al. 2021, appendix A.3: "between 10^-6 and 10^6"), instead of
clip_benchmark's AdamW-trained linear layer with a weight-decay grid (which also needs CUDA, line 144).
Each split is read by the zero-shot module's ImageFolder reader (``zeroshot.read_image_folder``: torchvision's
rules; the files it skips, and with ``allow_missing`` the images it cannot open, counted in ``settings``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from data_schemas import InputFileError

from .zeroshot import ImageFolder, folder_settings, read_image_folder

C_GRID = np.logspace(-6, 6, 97)  # 1/8 decade steps over the CLIP paper's range
INIT_POINTS = 7  # clip_benchmark: np.logspace(-6, 2, num=7) picks every 16th of its 97 points
VAL_PROPORTION = 0.2
SEED = 0  # clip_benchmark's default --seed
MAX_ITER = 1000


def carve_validation(n: int, proportion: float = VAL_PROPORTION, seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """(train indices, validation indices) of ``n`` training items, as clip_benchmark's ``random_split``."""
    import torch

    if not 0 < proportion < 1:
        raise ValueError(f"validation proportion {proportion} must lie in (0, 1)")
    # random_split's own conversion of fractions to lengths (floors, the remainder dealt round-robin)
    lengths = [int(np.floor(n * f)) for f in (1 - proportion, proportion)]
    for i in range(n - sum(lengths)):
        lengths[i % 2] += 1
    if min(lengths) == 0:
        raise InputFileError(f"{n} training image(s): too few to carve a {proportion:.0%} validation split")
    tr, va = torch.utils.data.random_split(range(n), lengths, generator=torch.Generator().manual_seed(seed))
    return np.array(tr.indices), np.array(va.indices)


def search_regularisation(score: Callable[[int], float], n_grid: int = len(C_GRID), n_init: int = INIT_POINTS) -> int:
    """The grid index clip_benchmark's sweep picks for ``score(index)`` (validation accuracy): the best of
    ``n_init`` evenly spaced indices, then [peak - s, peak, peak + s] for s = 8, 4, 2, 1 (``find_peak``,
    linear_probe.py lines 128-139, 269-277). A tie keeps the earlier index of each candidate list."""
    cache: dict[int, float] = {}

    def peak(idxs):
        best, best_acc = idxs[0], -np.inf
        for i in idxs:
            if i not in cache:
                cache[i] = score(i)
            if cache[i] > best_acc:
                best, best_acc = i, cache[i]
        return best

    p = peak([round(k * (n_grid - 1) / (n_init - 1)) for k in range(n_init)])
    span = 8
    while span > 0:
        p = peak([max(p - span, 0), p, min(p + span, n_grid - 1)])
        span //= 2
    return p


def fit(X: np.ndarray, y: np.ndarray, C: float, seed: int = SEED):
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(C=C, max_iter=MAX_ITER, random_state=seed).fit(X, y)


def probe(X_tr: np.ndarray, y_tr: np.ndarray, X_va: np.ndarray, y_va: np.ndarray, X_te: np.ndarray,
          y_te: np.ndarray, n_classes: int, seed: int = SEED) -> dict:
    """The sweep on (train, val), the final fit on train + val, the test metrics."""
    from sklearn.metrics import balanced_accuracy_score

    if len(np.unique(y_tr)) < 2:
        raise InputFileError(f"the training split has {len(np.unique(y_tr))} class(es); a linear probe needs 2 or more")
    val_acc = {}

    def score(i):
        val_acc[i] = float(fit(X_tr, y_tr, C_GRID[i], seed).score(X_va, y_va))
        return val_acc[i]

    best = search_regularisation(score)
    clf = fit(np.concatenate([X_tr, X_va]), np.concatenate([y_tr, y_va]), C_GRID[best], seed)
    logits = clf.decision_function(X_te)
    if logits.ndim == 1:  # binary: the positive class's margin
        logits = np.stack([-logits, logits], axis=1)
    full = np.full((len(X_te), n_classes), -np.inf)
    full[:, clf.classes_] = logits  # classes never seen in training cannot be predicted
    order = np.argsort(-full, axis=1, kind="stable")
    pred = order[:, 0]
    out = {"n": int(len(y_te)), "correct": int((pred == y_te).sum()), "accuracy": float((pred == y_te).mean()),
           "C": float(C_GRID[best]), "val_accuracy": val_acc[best],
           "mean_per_class_recall": float(balanced_accuracy_score(y_te, pred)),
           "n_train": int(len(y_tr)), "n_val": int(len(y_va)), "classes": int(n_classes),
           "C_tried": {f"{C_GRID[i]:.3g}": a for i, a in sorted(val_acc.items())}}
    if n_classes > 5:  # with 5 classes or fewer top-5 is 1.0 by construction
        out["top5"] = float(np.mean([y in row[:5] for y, row in zip(y_te, order)]))
    return out


def _splits(root: Path, open_images: bool = True, allow_missing: bool = False) -> dict[str, ImageFolder]:
    """train, test and (if present) val, read by the shared ImageFolder reader with train's class indices."""
    def read(split: str, classes=None) -> ImageFolder:
        return read_image_folder(root / split, classes, open_images=open_images, allow_unreadable=allow_missing,
                                 name="linear-probe")

    out = {"train": read("train")}
    for split in ("test", "val"):
        if split == "test" or (root / split).is_dir():
            out[split] = read(split, out["train"].classes)
    return out


def check(root: str | Path) -> None:
    """The run's input refusals that need no image opened (``registry``'s check before the model loads)."""
    _splits(Path(root), open_images=False)


def evaluate(enc, root: str | Path, name: str = "linear-probe", allow_missing: bool = False) -> dict:
    """``{"subsets": {"linear-probe": {n, correct, accuracy, C, ...}}, "groups", "settings"}`` for ``root``;
    ``allow_missing``: images PIL cannot open are left out and counted (else an error)."""
    root = Path(root)
    splits = _splits(root, allow_missing=allow_missing)
    train, test = splits["train"], splits["test"]

    def feats(files: list[str]) -> np.ndarray:
        return enc.images([(f, None) for f in files])

    X, y = feats(train.files), np.array(train.labels)
    if "val" in splits:
        X_tr, y_tr, X_va, y_va = X, y, feats(splits["val"].files), np.array(splits["val"].labels)
        val = "val split"
    else:
        itr, iva = carve_validation(len(train.files))
        X_tr, y_tr, X_va, y_va = X[itr], y[itr], X[iva], y[iva]
        val = f"random {VAL_PROPORTION:.0%} of train (seed {SEED})"
    r = probe(X_tr, y_tr, X_va, y_va, feats(test.files), np.array(test.labels), len(train.classes))
    groups = {"top1": r["accuracy"], "mean_per_class_recall": r["mean_per_class_recall"]}
    if "top5" in r:
        groups["top5"] = r["top5"]
    return {"subsets": {name: r}, "groups": groups,
            "settings": {"validation": val, "classifier": f"sklearn LogisticRegression(lbfgs, max_iter={MAX_ITER})",
                         "C_grid": "logspace(-6, 6, 97)", "normalized_features": True,
                         **folder_settings(*splits.values())}}
