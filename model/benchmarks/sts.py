"""Semantic textual similarity of the text tower: SICK-R and STS-B, Pearson and Spearman between the cosine of
the two sentences' text features and the gold score (unsupervised, as SentEval's STS12-16 ``STSEval.run``:
cosine similarity, ``scipy.stats.pearsonr`` / ``spearmanr``; facebookresearch/SentEval ``senteval/sts.py`` lines
56, 77-78).

Files, as released (the reader for each is SentEval's, with the columns named):
- SICK: ``SICK.txt`` (the full release: tab-separated with a header; pair_ID, sentence_A, sentence_B, ...,
  relatedness_score, ..., SemEval_set in TRAIN/TRIAL/TEST; the TEST rows are scored) or SemEval-2014's
  ``SICK_test_annotated.txt`` (header; pair_ID, sentence_A, sentence_B, relatedness_score, entailment_judgment;
  SentEval ``senteval/sick.py`` lines 42-56 read columns 1, 2, 3 after the header);
- STS-B: the STS benchmark's ``sts-test.csv`` (no header; tab-separated genre, file, year, id, score, sentence1,
  sentence2, sometimes followed by source columns; SentEval ``senteval/sts.py`` lines 161-171 read columns 4, 5,
  6), also as GLUE's ``STS-B/original/sts-test.tsv``; or GLUE's labelled ``STS-B/dev.tsv`` (header with
  sentence1, sentence2, score; GLUE's ``test.tsv`` has no scores).
``root`` holds them directly or in the sub-directories listed in ``SICK_FILES`` / ``STSB_FILES``.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from data_schemas import InputFileError

SICK_FILES = ("SICK.txt", "SICK/SICK.txt", "SICK_test_annotated.txt", "SICK/SICK_test_annotated.txt")
STSB_FILES = ("sts-test.csv", "stsbenchmark/sts-test.csv", "STSBenchmark/sts-test.csv",
              "STS/STSBenchmark/sts-test.csv", "original/sts-test.tsv", "STS-B/original/sts-test.tsv",
              "dev.tsv", "STS-B/dev.tsv")
SEMEVAL_SETS = ("TRAIN", "TRIAL", "TEST")


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


def read_sick(path: str | Path) -> tuple[list[tuple[str, str, float]], dict]:
    """The scored pairs (SemEval_set TEST when the column exists, else every row) and per-set counts."""
    path = Path(path)
    col, rows = _by_header(path, _lines(path), ("pair_ID", "sentence_A", "sentence_B", "relatedness_score"))
    pairs, sets = [], {}
    for n, f in rows:
        s = f[col["SemEval_set"]] if "SemEval_set" in col else "TEST"
        if s not in SEMEVAL_SETS:
            raise InputFileError(f"{path}: line {n}: SemEval_set {s!r} not in {SEMEVAL_SETS}")
        sets[s] = sets.get(s, 0) + 1
        if s == "TEST":
            pairs.append((f[col["sentence_A"]], f[col["sentence_B"]], _score(path, n, f[col["relatedness_score"]])))
    return pairs, {"file": str(path), "split": "TEST", "rows_per_set": sets}


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
            raise InputFileError(f"{path}: line {n}: {len(f)} tab-separated fields, STS-B has at least 7 (genre, file, "
                             "year, id, score, sentence1, sentence2)")
        pairs.append((f[5], f[6], _score(path, n, f[4])))
    return pairs, {"file": str(path), "format": "stsbenchmark", "split": path.stem.replace("sts-", "")}


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


def score_pairs(enc, pairs: list[tuple[str, str, float]]) -> dict:
    A, B = enc.texts([a for a, _, _ in pairs]), enc.texts([b for _, b, _ in pairs])
    A = A / np.linalg.norm(A, axis=1, keepdims=True)
    B = B / np.linalg.norm(B, axis=1, keepdims=True)
    sim = np.sum(A * B, axis=1)
    return {"n": len(pairs)} | correlations(sim, np.array([g for _, _, g in pairs]))


def evaluate(enc, root: str | Path, name: str = "sts") -> dict:
    root = Path(root)
    found = {}
    for key, cands, reader in (("sick-r", SICK_FILES, read_sick), ("sts-b", STSB_FILES, read_stsb)):
        path = next((root / c for c in cands if (root / c).is_file()), None)
        if path is not None:
            found[key] = reader(path)
    if not found:
        raise FileNotFoundError(f"{root}: no SICK ({', '.join(SICK_FILES)}) or STS-B ({', '.join(STSB_FILES)}) file")
    subsets, groups, settings = {}, {}, {}
    for key, (pairs, info) in found.items():
        subsets[key] = score_pairs(enc, pairs) | {"split": info["split"]}
        for m in ("pearson", "spearman"):
            groups[f"{key}_{m}"] = subsets[key][m]
        settings[key] = info
    settings["not_found"] = [k for k in ("sick-r", "sts-b") if k not in found]
    settings["similarity"] = "cosine of the normalised text features"
    return {"subsets": subsets, "groups": groups, "settings": settings}
