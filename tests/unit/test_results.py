"""pipeline/results.py: ``macco report``'s inputs (results files paired by run name or order, one-line errors, groups
dropped) and the table they make."""
from __future__ import annotations

import json
from pathlib import Path

from macco.cli import main
from model.benchmarks.registry import REPORT_ROWS as ROWS
from model.losses import TERM_LABELS as TERMS
from pipeline.report import load_results, write_report
from tests_support import eval_json


def write_eval(path: Path, res: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(res))
    return path


def test_report_names_a_group_it_drops(tmp_path, capsys):
    """A benchmark present without the report's group value (e.g. every VG-A group under vga_min_count)."""
    res = {"benchmarks": {"aro-vga": {"subsets": {"x": {"n": 3, "accuracy": 0.5}}, "groups": {}},
                          "sugarcrepe": {"subsets": {"replace_rel": {"n": 10, "accuracy": 0.6}},
                                         "groups": {"relation": 0.6}}}}
    (tmp_path / "r.json").write_text(json.dumps(res))
    assert main(["report", f"macco={tmp_path / 'r.json'}", "--out", str(tmp_path / "o")]) == 0
    md = (tmp_path / "o" / "results.md").read_text()
    assert "Not reported (the benchmark ran but gave no value for the group" in md and "ARO VG-Attribution (macro) (macco)" in md


def test_report_says_spread_only_with_several_seeds(tmp_path):
    one = {"clip-ft": [eval_json("clip-ft-s0", "000")], "macco": [eval_json("macco-s0", "110")]}
    md = Path(write_report(one, tmp_path / "one", "t", rows=ROWS, terms=TERMS)["markdown"]).read_text()
    assert "Accuracy in %; one seed per model: no spread estimate." in md
    assert "standard deviation" not in md and "±" not in md
    two = {**one, "macco": [eval_json("macco-s0", "110"), eval_json("macco-s1", "111")]}
    md = Path(write_report(two, tmp_path / "two", "t", rows=ROWS, terms=TERMS)["markdown"]).read_text()
    assert "Accuracy in %; ± is the standard deviation over seeds." in md and "no spread estimate" not in md
    assert "| What's Up controlled | 3 | 25 | 0.0 | 83.3 ± 23.6 |" in md


def test_report_verb_pairs_seeds_by_run_name(tmp_path, capsys):
    ctrl0 = write_eval(tmp_path / "e" / "c0" / "results.json", eval_json("clip-ft-s0", "000"))
    ctrl1 = write_eval(tmp_path / "e" / "c1.json", eval_json("clip-ft-s1", "111"))
    m1 = write_eval(tmp_path / "e" / "m1.json", eval_json("macco-s1", "111"))
    m0 = write_eval(tmp_path / "e" / "m0.json", eval_json("macco-s0", "110"))
    out = tmp_path / "rep"
    # the control's seed 0 as an evaluate stage directory; macco's seeds out of order
    assert main(["report", f"clip-ft={ctrl0.parent}", f"clip-ft={ctrl1}", f"macco={m1}", f"macco={m0}",
                 "--out", str(out), "--title", "T"]) == 0
    assert f"wrote {out / 'results.md'}" in capsys.readouterr().out
    md = (out / "results.md").read_text()
    assert md.startswith("# T\n") and "| clip-ft (2 seeds) | macco (2 seeds) |" in md
    assert "### macco vs clip-ft: paired tests over 2 seed pair(s)" in md
    # paired by seed: (110 vs 000), (111 vs 111) -> 2 model-only right, 0 control-only (by order it would be 3 / 1)
    assert "| What's Up controlled | 3 | 6 | 2 | 0 |" in md
    assert (out / "results.png").stat().st_size > 0 and (out / "results.json").exists()


def test_report_verb_without_run_names_pairs_by_order(tmp_path, capsys):
    files = [write_eval(tmp_path / f"{k}.json", eval_json(None, bits))
             for k, bits in (("c0", "000"), ("c1", "111"), ("m0", "111"), ("m1", "110"))]
    assert main(["report", f"clip-ft={files[0]}", f"clip-ft={files[1]}", f"macco={files[2]}", f"macco={files[3]}",
                 "--out", str(tmp_path / "rep")]) == 0
    assert "| What's Up controlled | 3 | 6 | 3 | 1 |" in (tmp_path / "rep" / "results.md").read_text()
    assert load_results([f"macco={files[2]}"], ROWS) == {"macco": [eval_json(None, "111")]}


def test_report_verb_errors_are_one_line(tmp_path, capsys):
    good = write_eval(tmp_path / "good.json", eval_json("macco-s0", "110"))
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "empty").mkdir()
    write_report({"macco": [eval_json("macco-s0", "110")]}, tmp_path / "rep", "t", rows=ROWS, terms=TERMS)
    out = ["--out", str(tmp_path / "o")]
    cases = [
        ([str(good)], f"bad results spec {str(good)!r}: expected LABEL=PATH"),
        (["=" + str(good)], "expected LABEL=PATH"),
        (["macco="], "expected LABEL=PATH"),
        ([f"macco={tmp_path / 'missing.json'}"], f"macco: no such file {tmp_path / 'missing.json'}"),
        ([f"macco={tmp_path / 'empty'}"], f"macco: no such file {tmp_path / 'empty' / 'results.json'}"),
        ([f"macco={tmp_path / 'bad.json'}"], f"{tmp_path / 'bad.json'}: not valid JSON"),
        ([f"macco={tmp_path / 'rep'}"], "not an evaluation results.json"),
        ([f"macco={good}", f"macco={good}"], f"macco: seed 0 given more than once ({good}, {good})"),
    ]
    for specs, says in cases:
        assert main(["report", *specs, *out]) == 2, specs
        err = capsys.readouterr().err.rstrip("\n")
        assert "\n" not in err and err.startswith("macco report: ") and says in err, (specs, err)
    assert not (tmp_path / "o").exists()
    # a control that was not given is said on stderr, and the report still written
    assert main(["report", f"macco={good}", f"other={good}", *out, "--control", "base-ft"]) == 0
    assert "no results labelled 'base-ft' (--control): no paired tests" in capsys.readouterr().err
    assert "No paired tests: the control 'base-ft' was not evaluated." in (tmp_path / "o" / "results.md").read_text()
