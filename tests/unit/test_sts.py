"""model/benchmarks/sts.py: SICK-R / STS-B on fixtures in the datasets' original file formats (cosine and SentEval's
supervised protocol), through ``evaluate`` and the CLI."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from model.benchmarks import EvalConfig, evaluate, sts
from tests_support import DictEncoder, micro_eval_cli as _micro_cli


SICK_HEADER = ("pair_ID\tsentence_A\tsentence_B\tentailment_label\trelatedness_score\tentailment_AB\tentailment_BA\t"
               "sentence_A_original\tsentence_B_original\tsentence_A_dataset\tsentence_B_dataset\tSemEval_set")


def _pair_vectors(a: str, b: str, sim: float, txt: dict) -> None:
    """Text features whose cosine is exactly ``sim``."""
    txt[a] = np.array([1.0, 0.0])
    txt[b] = np.array([sim, np.sqrt(1 - sim ** 2)])


def _sts_fixture(root: Path, reverse: bool = False) -> dict:
    txt = {}
    rows = [SICK_HEADER]
    sets = ["TRAIN", "TEST", "TRIAL", "TEST", "TEST", "TEST", "TRAIN"]
    for k, (s, score) in enumerate(zip(sets, [4.5, 1.0, 3.2, 2.4, 4.9, 3.6, 1.5])):
        a, b = f"sick a {k}", f"sick b {k}"
        _pair_vectors(a, b, (1 - score / 5) if reverse else score / 5, txt)
        rows.append(f"{k + 1}\t{a}\t{b}\tNEUTRAL\t{score}\tA_neutral_B\tB_neutral_A\t{a}\t{b}\tFLICKR\tFLICKR\t{s}")
    (root / "SICK.txt").write_text("\n".join(rows) + "\n")
    lines = []
    for k, score in enumerate([0.0, 5.0, 2.75, 3.8, 1.2]):
        a, b = f"sts one {k}", f"sts two {k}"
        _pair_vectors(a, b, (1 - score / 5) if reverse else score / 5, txt)
        extra = "\tsrc1\tsrc2" if k == 2 else ""  # some original rows carry source columns
        lines.append(f"main-captions\tMSRvid\t2012test\t{k:04d}\t{score}\t{a}\t{b}{extra}")
    (root / "stsbenchmark").mkdir()
    (root / "stsbenchmark" / "sts-test.csv").write_text("\n".join(lines) + "\n")
    return txt


def _senteval_sick(root: Path, n: dict[str, int], seed: int = 0) -> dict:
    """SentEval's three SICK files (a header; pair_ID, sentence_A, sentence_B, relatedness_score, entailment) with
    scores in [1, 5] and text features whose cosine is a monotone function of the score."""
    rng = np.random.RandomState(seed)
    txt = {}
    files = {"train": "SICK_train.txt", "dev": "SICK_trial.txt", "test": "SICK_test_annotated.txt"}
    k = 0
    for split, count in n.items():
        rows = ["pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment"]
        for _ in range(count):
            score = round(float(rng.uniform(1, 5)), 2)
            a, b = f"sick {split} a {k}", f"sick {split} b {k}"
            _pair_vectors(a, b, np.cos(np.pi / 2 * (5 - score) / 4), txt)
            rows.append(f"{k}\t{a}\t{b}\t{score}\tNEUTRAL")
            k += 1
        (root / files[split]).write_text("\n".join(rows) + "\n")
    return txt


def test_sts_known_correlations(tmp_path):
    txt = _sts_fixture(tmp_path)
    cfg = EvalConfig(model="fake", roots={"sts": str(tmp_path)})
    r = evaluate(cfg, ["sts"], enc=DictEncoder(txt=txt))["benchmarks"]["sts"]
    assert r["subsets"]["sick-r"]["n"] == 4 and r["subsets"]["sts-b"]["n"] == 5  # SICK: the TEST rows only
    assert r["settings"]["sick-r"]["files"]["test"]["rows_per_set"] == {"TRAIN": 2, "TEST": 4, "TRIAL": 1}
    for key in ("sick-r_cosine_pearson", "sick-r_cosine_spearman", "sts-b_cosine_pearson", "sts-b_cosine_spearman"):
        assert r["groups"][key] == pytest.approx(1.0)
    # SICK.txt has TRAIN and TRIAL rows: SentEval's supervised protocol runs too (sick-r_pearson); STS-B has only
    # its test file here: cosine only, said so
    assert "sick-r_pearson" in r["groups"] and "sts-b_pearson" not in r["groups"]
    assert r["settings"]["sts-b"]["protocol"].startswith("cosine only")
    rev = tmp_path / "rev"
    rev.mkdir()
    r = evaluate(EvalConfig(model="fake", roots={"sts": str(rev)}), ["sts"],
                 enc=DictEncoder(txt=_sts_fixture(rev, reverse=True)))["benchmarks"]["sts"]
    assert r["groups"]["sts-b_cosine_spearman"] == pytest.approx(-1.0)
    assert r["groups"]["sick-r_cosine_pearson"] == pytest.approx(-1)
    # one file alone is evaluated, and the other is named as absent
    (tmp_path / "SICK.txt").unlink()
    r = sts.evaluate(DictEncoder(txt=txt), tmp_path)
    assert set(r["subsets"]) == {"sts-b"} and r["settings"]["not_found"] == ["sick-r"]


def test_stsb_glue_dev_and_sick_semeval_files(tmp_path):
    head = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"
    txt, lines = {}, [head]
    for k, score in enumerate([5.0, 0.5, 3.0]):
        _pair_vectors(f"glue a {k}", f"glue b {k}", score / 5, txt)
        lines.append(f"{k}\tmain-news\tMSRpar\t2012test\t{k}\tnone\tnone\tglue a {k}\tglue b {k}\t{score}")
    (tmp_path / "STS-B").mkdir()
    (tmp_path / "STS-B" / "dev.tsv").write_text("\n".join(lines) + "\n")
    rows = ["pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment"]
    for k, score in enumerate([1.0, 4.0, 2.0]):
        _pair_vectors(f"sem a {k}", f"sem b {k}", score / 5, txt)
        rows.append(f"{k + 1}\tsem a {k}\tsem b {k}\t{score}\tNEUTRAL")
    (tmp_path / "SICK_test_annotated.txt").write_text("\r\n".join(rows) + "\r\n")
    r = sts.evaluate(DictEncoder(txt=txt), tmp_path)
    assert r["subsets"]["sts-b"]["n"] == 3 and r["settings"]["sts-b"]["files"]["test"]["format"] == "glue"
    assert r["subsets"]["sts-b"]["split"] == "dev" and r["subsets"]["sick-r"]["n"] == 3
    assert r["groups"]["sts-b_cosine_spearman"] == pytest.approx(1.0)
    assert r["groups"]["sick-r_cosine_spearman"] == pytest.approx(1)


def test_sts_input_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no SICK"):
        sts.evaluate(DictEncoder(), tmp_path)
    p = tmp_path / "SICK.txt"
    p.write_text(SICK_HEADER + "\n" + "\t".join(["1", "a", "b", "NEUTRAL", "3.0"] + ["x"] * 6 + ["TEST"]) + "\n"
                 + "\t".join(["2", "a", "b", "NEUTRAL", "abc"] + ["x"] * 6 + ["TEST"]) + "\n")
    with pytest.raises(ValueError, match=r"SICK.txt: line 3: score 'abc' is not a number"):
        sts.read_sick(p)
    p.write_text(SICK_HEADER + "\n" + "\t".join(["1", "a", "b", "NEUTRAL", "3.0"] + ["x"] * 6 + ["DEV"]) + "\n")
    with pytest.raises(ValueError, match="line 2: SemEval_set 'DEV'"):
        sts.read_sick(p)
    p.write_text("pair_ID\tsentence_A\n1\ta\n")
    with pytest.raises(ValueError, match=r"header lacks column\(s\) \['sentence_B', 'relatedness_score'\]"):
        sts.read_sick(p)
    q = tmp_path / "test.tsv"
    q.write_text("index\tsentence1\tsentence2\n0\ta\tb\n")
    with pytest.raises(ValueError, match="GLUE's test.tsv is unlabelled"):
        sts.read_stsb(q)
    q.write_text("main-captions\tMSRvid\t2012test\t0001\t2.5\tonly one sentence\n")
    with pytest.raises(ValueError, match="line 1: 6 tab-separated fields"):
        sts.read_stsb(q)


def test_sts_through_the_cli(tmp_path, capsys):
    _sts_fixture(tmp_path)
    out = tmp_path / "r.json"
    assert _micro_cli("--benchmark", "sts", "--root", str(tmp_path), "--out", str(out),
                      "--results-table", str(tmp_path / "er")) == 0
    r = json.loads(out.read_text())["benchmarks"]["sts"]
    for key in ("sick-r", "sts-b"):
        for m in ("cosine_pearson", "cosine_spearman"):
            assert -1 <= r["subsets"][key][m] <= 1 and r["groups"][f"{key}_{m}"] == r["subsets"][key][m]
    assert -1 <= r["groups"]["sick-r_pearson"] <= 1  # SICK.txt brings TRAIN and TRIAL rows: SentEval's protocol
    from data_schemas import TABLES, read_table

    rows = [r for r in read_table(TABLES["eval_results"], tmp_path / "er").to_pylist() if r["level"] == "subset"]
    assert {(x["subset"], x["n"], x["accuracy"]) for x in rows} == {("sick-r", 4, None), ("sts-b", 5, None)}
    (tmp_path / "stsbenchmark" / "sts-test.csv").write_text("a\tb\tc\td\tfive\ts1\ts2\n")
    assert _micro_cli("--benchmark", "sts", "--root", str(tmp_path)) == 2
    assert "sts-test.csv: line 1: score 'five' is not a number" in capsys.readouterr().err


def test_sts_senteval_supervised_protocol_on_a_known_answer(tmp_path):
    """#30 item 4: SICK-R as SentEval scores it (a regressor on [|u - v|, u * v] trained on train, chosen on dev):
    with features that determine the score, the test Pearson is ~1; the unsupervised cosine is kept as a second,
    named metric."""
    txt = _senteval_sick(tmp_path, {"train": 300, "dev": 60, "test": 60})
    r = sts.evaluate(DictEncoder(txt=txt), tmp_path)
    s = r["subsets"]["sick-r"]
    assert (s["n"], s["n_train"], s["n_dev"]) == (60, 300, 60)
    assert s["pearson"] > 0.98 and s["dev_pearson"] > 0.98 and 0 < s["mse"] < 1.0
    assert s["cosine_spearman"] == pytest.approx(1.0)  # the cosine is monotone in the score by construction
    assert r["groups"]["sick-r_pearson"] == s["pearson"] and r["groups"]["sick-r_cosine_pearson"] == s["cosine_pearson"]
    assert r["settings"]["sick-r"]["protocol"] == "senteval (supervised) and cosine" and r["settings"]["seed"] == 1111
    assert {sp: f["split"] for sp, f in r["settings"]["sick-r"]["files"].items()} == \
        {"train": "TRAIN", "dev": "TRIAL", "test": "TEST"}  # each split file recorded as its own set
    torch.manual_seed(7)
    state = torch.get_rng_state()
    again = sts.evaluate(DictEncoder(txt=txt), tmp_path)["subsets"]["sick-r"]
    assert again["pearson"] == s["pearson"]  # seeded: the same numbers
    assert torch.equal(torch.get_rng_state(), state)  # and the process's RNG left as it was


def test_senteval_targets_and_early_stopping_rule():
    """The target distribution (Tai et al.'s, SentEval's encode_labels) and the stopping rule: the best dev round
    is kept, training stops at the fourth round that does not improve it (rounds of 50 epochs)."""
    y = np.array([3.6, 5.0, 1.0, 2.25])
    t = sts.encode_labels(y)
    assert t.tolist()[0] == pytest.approx([0, 0, 0.4, 0.6, 0]) and t[1].tolist() == [0, 0, 0, 0, 1]
    assert np.allclose(t @ np.arange(1, 6), y) and np.allclose(t.sum(1), 1)
    X = np.random.RandomState(0).randn(40, 6).astype(np.float32)
    flat = (X[:10], np.full(10, 3.0))  # a constant dev set: its Pearson is nan -> 0, never improved after round 1
    r = sts.relatedness_regression((X, np.linspace(1, 5, 40)), flat, (X[:10], np.linspace(1, 5, 10)))
    assert r["epochs"] == 250 and r["dev_pearson"] == 0.0
