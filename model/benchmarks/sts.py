"""Semantic textual similarity of the text tower, SICK-R and STS-B, under two named protocols:

- ``senteval`` (the paper's numbers): SentEval's supervised relatedness protocol (facebookresearch/SentEval
  ``senteval/sick.py`` ``SICKRelatednessEval``, ``senteval/sts.py`` ``STSBenchmarkEval``,
  ``senteval/tools/relatedness.py``): features ``[|u - v|, u * v]`` of the two sentences' text features, the
  score turned into a distribution over 5 classes (p_floor(y) = floor(y) - y + 1, p_floor(y)+1 = y - floor(y)),
  one linear layer + softmax trained with the mean squared error to it (Adam, lr 1e-3, batch 64, 50 epochs per
  round, at most ~1,000 epochs), the dev Pearson of ``probs . [1..5]`` choosing the best round (training stops at
  the fourth round that does not improve it), seed 1111; reported on test: Pearson, Spearman, MSE (and the dev
  Pearson). Each split is ordered by (words of A, words of B, score) first, as SentEval does. It needs the train
  and dev files.
- ``cosine``: the unsupervised score (SentEval's STS12-16 rule): Pearson / Spearman between the cosine of the two
  sentences' features and the gold score, on test. Always reported, as ``*_cosine_*``.

Files, as released: SICK as SentEval's three files ``SICK_train.txt`` / ``SICK_trial.txt`` /
``SICK_test_annotated.txt`` (a header; pair_ID, sentence_A, sentence_B, relatedness_score, entailment_judgment)
or the full ``SICK.txt`` (a header with a SemEval_set column TRAIN / TRIAL / TEST); STS-B as ``sts-train.csv`` /
``sts-dev.csv`` / ``sts-test.csv`` (no header; tab-separated genre, file, year, id, score, sentence1, sentence2,
maybe source columns), also under GLUE's ``STS-B/original/``, or GLUE's labelled ``dev.tsv`` (test only: no
supervised protocol). ``root`` holds them directly or in the sub-directories listed below. Sentences are used as the
files give them (SentEval's download script Moses-tokenises them; the words are re-joined with single spaces).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from data_schemas import InputFileError

SICK_DIRS = ("", "SICK")
SICK_SPLIT_FILES = {"train": "SICK_train.txt", "dev": "SICK_trial.txt", "test": "SICK_test_annotated.txt"}
STSB_DIRS = ("", "stsbenchmark", "STSBenchmark", "STS/STSBenchmark", "original", "STS-B/original")
STSB_SPLIT_FILES = {"train": ("sts-train.csv", "sts-train.tsv"), "dev": ("sts-dev.csv", "sts-dev.tsv"),
                    "test": ("sts-test.csv", "sts-test.tsv")}
GLUE_FILES = ("dev.tsv", "STS-B/dev.tsv")  # GLUE's labelled dev set: a test set only here
SEMEVAL_SETS = ("TRAIN", "TRIAL", "TEST")
SENTEVAL_SEED = 1111


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def _score(path: Path, n: int, value: str) -> float:
    try:
        s = float(value)
    except ValueError:
        raise InputFileError(f"{path}: line {n}: score {value!r} is not a number") from None
    if not math.isfinite(s):
        raise InputFileError(f"{path}: line {n}: score {value!r} is not finite")
    return s


def _by_header(path: Path, lines: list[str],
               need: tuple[str, ...]) -> tuple[dict[str, int], list[tuple[int, list[str]]]]:
    header = [h.strip() for h in lines[0].split("\t")] if lines else []
    missing = [c for c in need if c not in header]
    if missing:
        raise InputFileError(f"{path}: line 1: header lacks column(s) {missing} (has {header})")
    rows = []
    for n, line in enumerate(lines[1:], 2):
        f = [x.strip() for x in line.split("\t")]
        if len(f) != len(header):
            raise InputFileError(f"{path}: line {n}: {len(f)} tab-separated fields, the header has {len(header)}")
        rows.append((n, f))
    return {c: header.index(c) for c in header}, rows


def read_sick(path: str | Path, split: str | None = None) -> tuple[list[tuple[str, str, float]], dict]:
    """The pairs of one SICK file: with a SemEval_set column (the full ``SICK.txt``) those of ``split``'s set
    (train TRAIN, dev TRIAL, test TEST), else every row; and per-set counts."""
    path = Path(path)
    col, rows = _by_header(path, _lines(path), ("pair_ID", "sentence_A", "sentence_B", "relatedness_score"))
    want = {"train": "TRAIN", "dev": "TRIAL", "test": "TEST", None: "TEST"}[split]
    pairs, sets = [], {}
    for n, f in rows:
        s = f[col["SemEval_set"]] if "SemEval_set" in col else want
        if s not in SEMEVAL_SETS:
            raise InputFileError(f"{path}: line {n}: SemEval_set {s!r} not in {SEMEVAL_SETS}")
        sets[s] = sets.get(s, 0) + 1
        if s == want:
            pairs.append((f[col["sentence_A"]], f[col["sentence_B"]], _score(path, n, f[col["relatedness_score"]])))
    return pairs, {"file": str(path), "split": want, "rows_per_set": sets}


def read_stsb(path: str | Path) -> tuple[list[tuple[str, str, float]], dict]:
    """STS-B pairs from the original tab-separated file (columns 4-6) or a GLUE tsv with a header."""
    path = Path(path)
    lines = _lines(path)
    head = [h.strip() for h in lines[0].split("\t")] if lines else []
    if "sentence1" in head:  # GLUE
        if "score" not in head:
            raise InputFileError(f"{path}: line 1: no 'score' column (GLUE's test.tsv is unlabelled; use dev.tsv or "
                                 "original/sts-test.tsv)")
        col, rows = _by_header(path, lines, ("sentence1", "sentence2", "score"))
        pairs = [(f[col["sentence1"]], f[col["sentence2"]], _score(path, n, f[col["score"]])) for n, f in rows]
        return pairs, {"file": str(path), "format": "glue", "split": path.stem}
    pairs = []
    for n, line in enumerate(lines, 1):
        f = [x.strip() for x in line.split("\t")]
        if len(f) < 7:
            raise InputFileError(f"{path}: line {n}: {len(f)} tab-separated fields, STS-B has at least 7 (genre, "
                                 "file, year, id, score, sentence1, sentence2)")
        pairs.append((f[5], f[6], _score(path, n, f[4])))
    return pairs, {"file": str(path), "format": "stsbenchmark", "split": path.stem.replace("sts-", "")}


def find_splits(root: Path) -> dict[str, dict[str, tuple[list, dict]]]:
    """{"sick-r" / "sts-b": {split: (pairs, info)}} of the files found under ``root`` (test at least)."""
    out: dict[str, dict] = {}
    for d in SICK_DIRS:
        base = root / d
        if (base / SICK_SPLIT_FILES["test"]).is_file():
            out["sick-r"] = {sp: read_sick(base / f, sp) for sp, f in SICK_SPLIT_FILES.items()
                             if (base / f).is_file()}
            break
        if (base / "SICK.txt").is_file():
            full = {sp: read_sick(base / "SICK.txt", sp) for sp in ("train", "dev", "test")}
            out["sick-r"] = {sp: v for sp, v in full.items() if v[0]}
            break
    for d in STSB_DIRS:
        found = {sp: next((root / d / f for f in files if (root / d / f).is_file()), None)
                 for sp, files in STSB_SPLIT_FILES.items()}
        if found["test"] is not None:
            out["sts-b"] = {sp: read_stsb(p) for sp, p in found.items() if p is not None}
            break
    if "sts-b" not in out:
        glue = next((root / g for g in GLUE_FILES if (root / g).is_file()), None)
        if glue is not None:
            out["sts-b"] = {"test": read_stsb(glue)}
    return out


def senteval_order(pairs: list[tuple[str, str, float]]) -> list[tuple[str, str, float]]:
    """SentEval's order of a split: by the word counts of sentence A, then B, then the score; words re-joined."""
    toks = [(a.split(), b.split(), y) for a, b, y in pairs]
    return [(" ".join(a), " ".join(b), y) for a, b, y in sorted(toks, key=lambda z: (len(z[0]), len(z[1]), z[2]))]


def encode_labels(y: np.ndarray, nclass: int = 5) -> np.ndarray:
    """SentEval's target: a score y in [1, 5] as p_floor(y) = floor(y) - y + 1, p_floor(y)+1 = y - floor(y)
    (classes 1..5; a score below 1, as STS-B's 0-1, keeps its mass y - floor(y) on class 1 only, as SentEval)."""
    out = np.zeros((len(y), nclass), dtype=np.float32)
    for j, v in enumerate(y):
        for i in range(nclass):
            if i + 1 == np.floor(v) + 1:
                out[j, i] = v - np.floor(v)
            if i + 1 == np.floor(v):
                out[j, i] = np.floor(v) - v + 1
    return out


def relatedness_regression(train: tuple[np.ndarray, np.ndarray], dev: tuple[np.ndarray, np.ndarray],
                           test: tuple[np.ndarray, np.ndarray], seed: int = SENTEVAL_SEED,
                           max_epochs: int = 1000) -> dict:
    """SentEval's ``RelatednessPytorch``: features -> Linear(5) -> softmax, MSE to ``encode_labels``, Adam 1e-3,
    batch 64; rounds of 50 epochs while at most ``max_epochs``; the round with the best dev Pearson is kept,
    training stops at the fourth round that does not beat it. Returns test pearson / spearman / mse, dev_pearson,
    epochs."""
    import torch

    with torch.random.fork_rng():  # SentEval's seed for this regression only: the process's RNG is left as it was
        torch.manual_seed(seed)
        return _fit_relatedness(train, dev, test, np.random.RandomState(seed), max_epochs)


def _fit_relatedness(train, dev, test, rng, max_epochs: int) -> dict:
    import copy

    import torch

    X, y = torch.from_numpy(train[0].astype(np.float32)), torch.from_numpy(encode_labels(train[1]))
    model = torch.nn.Sequential(torch.nn.Linear(X.shape[1], 5), torch.nn.Softmax(dim=-1))
    opt, loss_fn, r = torch.optim.Adam(model.parameters()), torch.nn.MSELoss(), np.arange(1, 6)

    def predict(feats: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return model(torch.from_numpy(feats.astype(np.float32))).numpy() @ r

    best, best_model, misses, epochs = -1.0, copy.deepcopy(model), 0, 0
    while epochs <= max_epochs:
        model.train()
        for _ in range(50):
            order = rng.permutation(len(X))
            for i in range(0, len(X), 64):
                idx = torch.from_numpy(order[i:i + 64]).long()
                loss = loss_fn(model(X[idx]), y[idx])
                opt.zero_grad()
                loss.backward()
                opt.step()
        epochs += 50
        model.eval()
        pr = _pearson(predict(dev[0]), dev[1])
        if pr > best:
            best, best_model = pr, copy.deepcopy(model)
        else:
            if misses >= 3:
                break
            misses += 1
    model = best_model
    yhat = predict(test[0])
    from sklearn.metrics import mean_squared_error

    return {**correlations(yhat, test[1]), "mse": float(mean_squared_error(yhat, test[1])), "dev_pearson": best,
            "epochs": epochs}


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.stats import pearsonr

    with np.errstate(all="ignore"):
        v = float(pearsonr(a, b)[0]) if len(a) > 1 else float("nan")
    return 0.0 if math.isnan(v) else v  # SentEval: a NaN dev Pearson (constant predictions) counts as 0


def correlations(sim: np.ndarray, gold: np.ndarray) -> dict:
    """Pearson and Spearman of ``sim`` against ``gold`` (None where undefined, e.g. a constant input)."""
    import warnings

    from scipy.stats import pearsonr, spearmanr

    if len(sim) < 2:
        raise InputFileError(f"{len(sim)} pair(s): a correlation needs at least 2")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy warns on a constant input and returns nan
        p, s = float(pearsonr(sim, gold)[0]), float(spearmanr(sim, gold)[0])
    return {"pearson": None if math.isnan(p) else p, "spearman": None if math.isnan(s) else s}


def features(enc, pairs: list[tuple[str, str, float]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(SentEval's features [|u - v|, u * v], the cosines, the gold scores) of a split; u, v: the encoder's
    normalised text features."""
    A, B = enc.texts([a for a, _, _ in pairs]), enc.texts([b for _, b, _ in pairs])
    A = A / np.linalg.norm(A, axis=1, keepdims=True)
    B = B / np.linalg.norm(B, axis=1, keepdims=True)
    return np.c_[np.abs(A - B), A * B], np.sum(A * B, axis=1), np.array([g for _, _, g in pairs])


def evaluate(enc, root: str | Path, name: str = "sts") -> dict:
    root = Path(root)
    found = find_splits(root)
    if not found:
        raise FileNotFoundError(f"{root}: no SICK ({', '.join(SICK_SPLIT_FILES.values())} or SICK.txt) or STS-B "
                                f"({', '.join(f[0] for f in STSB_SPLIT_FILES.values())}) file")
    subsets, groups, settings = {}, {}, {}
    for key, splits in found.items():
        data = {sp: features(enc, senteval_order(pairs)) for sp, (pairs, _) in splits.items()}
        X, cos, gold = data["test"]
        sub = {"n": len(gold), "split": splits["test"][1]["split"],
               **{f"cosine_{m}": v for m, v in correlations(cos, gold).items()}}
        supervised = "train" in data and "dev" in data
        if supervised:
            (Xtr, _, ytr), (Xdev, _, ydev) = data["train"], data["dev"]
            sub |= relatedness_regression((Xtr, ytr), (Xdev, ydev), (X, gold)) | {"n_train": len(ytr),
                                                                                "n_dev": len(ydev)}
            for m in ("pearson", "spearman"):
                groups[f"{key}_{m}"] = sub[m]
        for m in ("pearson", "spearman"):
            groups[f"{key}_cosine_{m}"] = sub[f"cosine_{m}"]
        subsets[key] = sub
        settings[key] = {"files": {sp: info for sp, (_, info) in splits.items()},
                         "protocol": "senteval (supervised) and cosine" if supervised else
                         "cosine only: SentEval's supervised protocol needs the train and dev files"}
    settings["not_found"] = [k for k in ("sick-r", "sts-b") if k not in found]
    settings["features"] = "normalised text features u, v: [|u - v|, u * v] (senteval); cosine(u, v) (cosine)"
    settings["seed"] = SENTEVAL_SEED
    return {"subsets": subsets, "groups": groups, "settings": settings}
