"""SentEval probing tasks (Conneau et al., ACL 2018) on frozen text features: a logistic regression per task,
its ``C`` chosen on the validation partition, accuracy on the test partition.

Files, as released (``data/probing/*.txt`` of facebookresearch/SentEval): one instance a line, tab-separated,
the partition (tr/va/te) first, the class second, the tokenised sentence last (SentEval ``senteval/probing.py``
lines 41-55: ``line[0]``, ``line[1]``, ``line[-1]``; class indices from the sorted train labels). ``root`` is
the directory holding them; ``TASKS`` maps each task to its file (``probing.py`` lines 104-171).

The classifier is SentEval's scikit-learn ``SplitClassifier`` (``senteval/tools/validation.py`` lines 184-246):
``C`` in 2^-2 .. 2^3, ``LogisticRegression(C, random_state=1111)`` fitted on train, the best validation accuracy
(in % rounded to 2 decimals, first maximum) picks ``C``, the classifier refitted on train with it is scored on
test. Deviation: ``max_iter`` is raised from scikit-learn's 100 to ``MAX_ITER``, as 100 L-BFGS steps do not
converge on 100k instances.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from data_schemas import InputFileError

TASKS = {"SentLen": "sentence_length.txt", "WordContent": "word_content.txt", "Depth": "tree_depth.txt",
         "TopConstituents": "top_constituents.txt", "BigramShift": "bigram_shift.txt", "Tense": "past_present.txt",
         "SubjNumber": "subj_number.txt", "ObjNumber": "obj_number.txt", "OddManOut": "odd_man_out.txt",
         "CoordinationInversion": "coordination_inversion.txt"}
SPLITS = {"tr": "train", "va": "dev", "te": "test"}
REGS = [2.0 ** t for t in range(-2, 4)]
SEED = 1111  # SentEval's default seed
MAX_ITER = 1000


def load(path: str | Path) -> dict[str, tuple[list[str], list[str]]]:
    """{train|dev|test: (sentences, labels)} of one probing file."""
    path = Path(path)
    out: dict[str, tuple[list[str], list[str]]] = {s: ([], []) for s in SPLITS.values()}
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            f = line.rstrip("\r\n").split("\t")
            if len(f) < 3:
                raise InputFileError(f"{path}: line {n}: {len(f)} tab-separated field(s), a probing instance has "
                                 "partition, class and sentence")
            if f[0] not in SPLITS:
                raise InputFileError(f"{path}: line {n}: partition {f[0]!r} not in {sorted(SPLITS)}")
            if not f[-1].strip() or not f[1].strip():
                raise InputFileError(f"{path}: line {n}: empty class or sentence")
            out[SPLITS[f[0]]][0].append(f[-1])
            out[SPLITS[f[0]]][1].append(f[1])
    for s, (x, _) in out.items():
        if not x:
            raise InputFileError(f"{path}: no {s} instances")
    classes = sorted(set(out["train"][1]))
    for s in ("dev", "test"):
        unseen = sorted(set(out[s][1]) - set(classes))
        if unseen:
            raise InputFileError(f"{path}: {s} class(es) {unseen[:5]} never occur in the train partition")
    return out


def split_classifier(X: dict[str, np.ndarray], y: dict[str, np.ndarray], seed: int = SEED) -> dict:
    """SentEval's SplitClassifier (scikit-learn branch): C on dev, refit on train, accuracy on test."""
    from sklearn.linear_model import LogisticRegression

    if len(np.unique(y["train"])) < 2:
        raise InputFileError("the train partition has a single class; a probe needs 2 or more")
    scores = []
    for reg in REGS:
        clf = LogisticRegression(C=reg, random_state=seed, max_iter=MAX_ITER).fit(X["train"], y["train"])
        scores.append(round(100 * clf.score(X["dev"], y["dev"]), 2))
    best = int(np.argmax(scores))
    clf = LogisticRegression(C=REGS[best], random_state=seed, max_iter=MAX_ITER).fit(X["train"], y["train"])
    correct = int((clf.predict(X["test"]) == y["test"]).sum())
    return {"n": int(len(y["test"])), "correct": correct, "accuracy": correct / len(y["test"]),
            "dev_accuracy": scores[best] / 100, "C": REGS[best], "n_train": int(len(y["train"])),
            "n_dev": int(len(y["dev"])), "classes": int(len(np.unique(y["train"]))),
            "C_tried": {f"{r:g}": s / 100 for r, s in zip(REGS, scores)}}


def probe_task(enc, path: str | Path, seed: int = SEED) -> dict:
    data = load(path)
    index = {c: k for k, c in enumerate(sorted(set(data["train"][1])))}
    X = {s: enc.texts(x) for s, (x, _) in data.items()}
    y = {s: np.array([index[c] for c in labels]) for s, (_, labels) in data.items()}
    return split_classifier(X, y, seed)


def evaluate(enc, root: str | Path, name: str = "senteval-probing") -> dict:
    root = Path(root)
    present = {t: root / f for t, f in TASKS.items() if (root / f).is_file()}
    if not present:
        raise FileNotFoundError(f"{root}: none of the SentEval probing files ({', '.join(TASKS.values())})")
    subsets = {t: probe_task(enc, p) for t, p in present.items()}
    groups = {t: r["accuracy"] for t, r in subsets.items()}
    groups["mean"] = float(np.mean(list(groups.values())))
    return {"subsets": subsets, "groups": groups,
            "settings": {"tasks_missing": [t for t in TASKS if t not in present], "C_grid": REGS, "seed": SEED,
                         "classifier": f"sklearn LogisticRegression(lbfgs, max_iter={MAX_ITER})"}}
