"""model/benchmarks/senteval.py: SentEval probing tasks (known answers, C chosen on dev, input errors, the CLI)."""
import json
from pathlib import Path

import numpy as np
import pytest

from model.benchmarks import BENCHMARKS, EvalConfig, evaluate, senteval
from tests_support import DictEncoder, micro_eval_cli as _micro_cli


def _probing_fixture(root: Path) -> dict:
    """bigram_shift.txt (O/I) and past_present.txt (PRES/PAST): features carry the class, plus noise."""
    rng = np.random.default_rng(1)
    txt = {}
    for fname, classes in (("bigram_shift.txt", ("O", "I")), ("past_present.txt", ("PRES", "PAST"))):
        lines = []
        for part, n in (("tr", 12), ("va", 4), ("te", 6)):
            for i in range(n):
                c = classes[i % 2]
                s = f"{fname[:4]} {part} sentence {i} ."
                txt[s] = np.r_[np.eye(2)[classes.index(c)], 0.1 * rng.normal(size=2)]
                lines.append(f"{part}\t{c}\t{s}")
        (root / fname).write_text("\n".join(lines) + "\n")
    return txt


def test_senteval_probing_known_answers(tmp_path):
    txt = _probing_fixture(tmp_path)
    cfg = EvalConfig(model="fake", roots={"senteval-probing": str(tmp_path)})
    r = evaluate(cfg, ["senteval-probing"], enc=DictEncoder(txt=txt))["benchmarks"]["senteval-probing"]
    assert set(r["subsets"]) == {"BigramShift", "Tense"}
    for s in r["subsets"].values():
        assert (s["n"], s["correct"], s["accuracy"], s["n_train"], s["n_dev"], s["classes"]) == (6, 6, 1.0, 12, 4, 2)
        assert s["dev_accuracy"] == 1.0 and s["C"] == 0.25  # every C ties on dev: SentEval keeps the first
        assert list(s["C_tried"]) == ["0.25", "0.5", "1", "2", "4", "8"]
    assert r["groups"]["mean"] == 1.0
    assert len(r["settings"]["tasks_missing"]) == 8 and "WordContent" in r["settings"]["tasks_missing"]


def test_senteval_split_classifier_picks_c_on_dev():
    """C is the first of SentEval's grid with the best dev accuracy (in %, rounded to 2 decimals)."""
    rng = np.random.default_rng(0)
    X_tr = np.r_[rng.normal(-1, 1, (200, 2)), rng.normal(1, 1, (40, 2))]
    y_tr = np.r_[np.zeros(200, int), np.ones(40, int)]
    scores = {}
    for C in senteval.REGS:
        from sklearn.linear_model import LogisticRegression

        clf = LogisticRegression(C=C, random_state=senteval.SEED, max_iter=senteval.MAX_ITER).fit(X_tr, y_tr)
        scores[C] = round(100 * clf.score(X_tr, y_tr), 2)
    r = senteval.split_classifier({"train": X_tr, "dev": X_tr, "test": X_tr}, {"train": y_tr, "dev": y_tr,
                                                                              "test": y_tr})
    best = max(scores.values())
    assert r["C"] == next(C for C, s in scores.items() if s == best)
    assert r["dev_accuracy"] == best / 100 and r["n"] == 240


def test_senteval_input_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="none of the SentEval probing files"):
        senteval.evaluate(DictEncoder(), tmp_path)
    p = tmp_path / "subj_number.txt"
    p.write_text("tr\tNN\ta cat sat .\ntx\tNNS\tcats sat .\n")
    with pytest.raises(ValueError, match=r"subj_number.txt: line 2: partition 'tx'"):
        senteval.load(p)
    p.write_text("tr\tNN\ta cat sat .\nva\tNN\ta dog sat .\nte\tNNS\tdogs sat .\n")
    with pytest.raises(ValueError, match=r"test class\(es\) \['NNS'\] never occur in the train partition"):
        senteval.load(p)
    p.write_text("tr\tNN\ta cat sat .\nva\tNN\n")
    with pytest.raises(ValueError, match="line 2: 2 tab-separated field"):
        senteval.load(p)
    p.write_text("tr\tNN\ta cat sat .\nte\tNN\ta dog sat .\n")
    with pytest.raises(ValueError, match="no dev instances"):
        senteval.load(p)


def test_senteval_through_the_cli_and_the_help(tmp_path):
    _probing_fixture(tmp_path)
    out = tmp_path / "r.json"
    assert _micro_cli("--benchmark", "senteval-probing", "--root", str(tmp_path), "--out", str(out)) == 0
    r = json.loads(out.read_text())["benchmarks"]["senteval-probing"]
    assert {k: v["n"] for k, v in r["subsets"].items()} == {"BigramShift": 6, "Tense": 6}
    assert all(0 <= v["accuracy"] <= 1 and v["C"] in senteval.REGS for v in r["subsets"].values())
    from macco.cli import build_parser

    ev = build_parser()._subparsers._group_actions[0].choices["eval"]
    help_text = next(a.help for a in ev._actions if a.dest == "benchmark")
    for name in ("linear-probe", "retrieval-coco", "retrieval-flickr", "sts", "senteval-probing"):
        assert name in BENCHMARKS and name in help_text
