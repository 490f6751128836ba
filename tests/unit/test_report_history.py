"""pipeline/report_history.py: runs named in the evaluation history (written by the real writer,
``model.benchmarks.append_results``) become the report's inputs, the paired comparison read from the stored per-case
outcomes equal to the one from the same evaluations' results files; picks by run, run@time and eval_id; unknown,
ambiguous and case-less picks one line; a version-4 history (no per-case outcomes) read, refused, upgraded."""
from __future__ import annotations

import json

import pytest

from model.benchmarks import EvalConfig, append_results, result_rows
from model.benchmarks.registry import REPORT_ROWS as ROWS
from pipeline.report import collect, paired_tests, partial_groups
from pipeline.report_history import PickError, history_results, unpaired
from pipeline.results import load_results
from tests_support import evaluation, one_line_error

NOV, DEC = "2026-11-26T03:00:00.000000Z", "2026-12-03T03:00:00.000000Z"


def _evaluation(run: str, relation: str, created: str = DEC) -> dict:
    """An evaluation as ``evaluate`` returns it: SugarCrepe's relation group with its per-case outcomes (``x``: a
    missing image), a partial VALSE average, ARO's counts beside its macro."""
    ev = evaluation(run)
    ev["created"] = created
    scored = relation.replace("x", "")
    ev["benchmarks"]["sugarcrepe"] |= {"groups": {"relation": scored.count("1") / len(scored)},
                                       "cases": {"relation": relation}}
    ev["benchmarks"]["valse"] = {"subsets": {"counting": {"n": 4, "correct": 3, "accuracy": 0.75}},
                                 "groups": {"avg": 0.75}, "cases": {"avg": "1101"}, "partial": True,
                                 "missing_files": {"avg": ["foil-it", "plurals"]}}
    ev["benchmarks"]["aro-vgr"] = {"subsets": {}, "groups": {"macro": 0.5, "relations_kept": 5},
                                   "cases": {"macro": "10"}}
    return ev


def _history(tmp_path, *evals: dict):
    for ev in evals:
        append_results(tmp_path / "art" / "eval_results", ev, EvalConfig())
    return tmp_path / "art"


def test_a_run_last_week_against_its_newest_evaluation_is_the_results_files_comparison(tmp_path):
    """The scheduled re-evaluation against last week's, in one call: the history's stored outcomes give the same
    table, the same partial marks and the same paired tests as the two evaluations' results.json files."""
    last, now = _evaluation("nightly", "0000011111x", NOV), _evaluation("nightly", "1111111111x", DEC)
    root = _history(tmp_path, last, now)
    got, picked = history_results(root, ["nightly@2026-11-26", "nightly"], ROWS)
    assert [(p.label, p.evaluation.eval_id) for p in picked] == [("nightly@2026-11-26", last["eval_id"]),
                                                                  ("nightly", now["eval_id"])]
    for name, ev in (("last", last), ("now", now)):
        (tmp_path / f"{name}.json").write_text(json.dumps(ev))
    files = load_results([f"nightly@2026-11-26={tmp_path / 'last.json'}", f"nightly={tmp_path / 'now.json'}"], ROWS)
    assert collect(got, ROWS) == collect(files, ROWS)
    assert partial_groups(got, ROWS) == partial_groups(files, ROWS) == {
        "VALSE avg": {"nightly@2026-11-26": ["foil-it", "plurals"], "nightly": ["foil-it", "plurals"]}}
    tests = paired_tests(got, "nightly@2026-11-26", rows=ROWS)
    assert tests == paired_tests(files, "nightly@2026-11-26", rows=ROWS)
    relation = tests["nightly"]["SugarCrepe relation"]
    assert (relation["b"], relation["c"], relation["cases"]) == (5, 0, 10)  # the missing image's case skipped
    assert got["nightly"][0]["benchmarks"]["aro-vgr"]["groups"] == {"macro": 0.5, "relations_kept": 5.0}


def test_an_eval_id_prefix_picks_one_evaluation_and_a_repeated_label_is_seeds(tmp_path):
    evs = {r: _evaluation(f"tiny/{r}", bits) for r, bits in
           (("macco-s0", "1111"), ("macco-s1", "1110"), ("clip-ft-s0", "0000"), ("clip-ft-s1", "0001"))}
    root = _history(tmp_path, *evs.values())
    got, _ = history_results(root, ["clip-ft=" + evs["clip-ft-s0"]["eval_id"][:6], "clip-ft=tiny/clip-ft-s1",
                                    "macco=tiny/macco-s1", "macco=tiny/macco-s0"], ROWS)
    assert [r["eval_id"] for r in got["clip-ft"]] == [evs["clip-ft-s0"]["eval_id"], evs["clip-ft-s1"]["eval_id"]]
    relation = paired_tests(got, "clip-ft", rows=ROWS)["macco"]["SugarCrepe relation"]
    assert (relation["pairs"], relation["b"], relation["c"]) == (2, 4 + 3, 0 + 1)  # s0 with s0, s1 with s1 (pooled)
    across, _ = history_results(root, ["tiny/clip-ft-s0", "tiny/macco-s1"], ROWS)
    assert unpaired(across, "tiny/clip-ft-s0") == ["tiny/macco-s1"]  # seeds 0 and 1: no pair, said


def test_unknown_ambiguous_and_unmatched_picks_are_one_line(tmp_path):
    runs = [_evaluation(f"r{i}", "10") for i in range(10)]
    twice = _evaluation("r0", "11", "2026-12-03T05:00:00.000000Z")
    root = _history(tmp_path, *runs, twice)
    with pytest.raises(PickError, match=r"'nope': no run or eval_id .* \(runs: r0, r1, .*, r7, and 2 more\)"):
        history_results(root, ["nope"], ROWS)
    with pytest.raises(PickError, match=r"'r0@2026-12-03' names 2 evaluations \(r0 of 2026-12-03T03:00:00Z .*"
                                        r"r0 of 2026-12-03T05:00:00Z .*\): name one by its time"):
        history_results(root, ["r0@2026-12-03"], ROWS)
    got, _ = history_results(root, ["r0@2026-12-03T05", "r0@2026-12-03 03:00", "r0"], ROWS)
    assert [got[k][0]["eval_id"] for k in got] == [twice["eval_id"], runs[0]["eval_id"], twice["eval_id"]]
    with pytest.raises(PickError, match=r"no evaluation of r0 at '2027'"):
        history_results(root, ["r0@2027"], ROWS)
    with pytest.raises(PickError, match=r"no run or eval_id"):  # too short a prefix names nothing
        history_results(root, [twice["eval_id"][:3]], ROWS)
    with pytest.raises(PickError, match=r"bad pick 'a='"):
        history_results(root, ["a="], ROWS)


def test_one_seed_twice_and_other_case_counts_are_refused(tmp_path):
    root = _history(tmp_path, _evaluation("m-s0", "1100", NOV), _evaluation("m-s0", "1110"),
                    _evaluation("other", "110"))
    with pytest.raises(ValueError, match=r"a: seed 0 given more than once"):
        history_results(root, ["a=m-s0@2026-11", "a=m-s0"], ROWS)
    with pytest.raises(ValueError, match=r"other of .* has 3 cases, .* has 4: not evaluations of the same"):
        history_results(root, ["m-s0", "other"], ROWS)


def test_a_version_4_history_is_read_refused_for_pairing_and_upgraded_with_every_row(tmp_path, capsys):
    """Rows appended before the history stored per-case outcomes: read (cases null, not recorded), one line when
    asked to compare them, every row kept when a new evaluation upgrades the table; validate green."""
    from data_schemas import TABLES, read_table, write_table
    from data_schemas.eval_results import V4_SPEC
    from macco.cli import main

    table = tmp_path / "art" / "eval_results"
    old = _evaluation("old", "1010", NOV)
    write_table(V4_SPEC, table, V4_SPEC.from_rows([{k: v for k, v in r.items() if k != "cases"}
                                                   for r in result_rows(old, EvalConfig())]))
    with pytest.raises(PickError, match=r"'old': old of 2026-11-26T03:00:00Z \(eval \w{8}\) holds no per-case "
                                        r"outcomes \(rows appended before the history's schema version 5"):
        history_results(tmp_path / "art", ["old"], ROWS)
    before = len(read_table(V4_SPEC, table))
    append_results(table, _evaluation("new", "1111"), EvalConfig())
    rows = read_table(TABLES["eval_results"], table).to_pylist()
    assert sum(r["run"] == "old" for r in rows) == before and all(r["cases"] is None for r in rows
                                                                  if r["run"] == "old")
    with pytest.raises(PickError, match="no per-case outcomes"):
        history_results(table, ["new", "old"], ROWS)  # the table's folder as the root too
    assert history_results(table, ["new"], ROWS)[0]["new"][0]["benchmarks"]["sugarcrepe"]["cases"] == \
        {"relation": "1111"}
    assert main(["validate", str(tmp_path / "art")]) == 0, capsys.readouterr().out[-2000:]


def test_macco_report_history_prints_the_paired_comparison_and_refuses_in_one_line(tmp_path, capsys):
    from macco.cli import main

    root = _history(tmp_path, _evaluation("nightly", "0000011111x", NOV), _evaluation("nightly", "1111111111x"))
    out = tmp_path / "report"
    assert main(["report", "--history", str(root), "nightly@2026-11-26", "nightly", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "### nightly vs nightly@2026-11-26: paired tests over 1 seed pair(s)" in printed  # the first: control
    assert "| SugarCrepe relation | 10 | 10 | 5 | 0 | 0.0625 | 5 / 0 | 0.0625 | 0.188 |" in printed
    assert f"From the evaluation history under {root}: nightly@2026-11-26 = nightly of 2026-11-26T03:00:00Z" in printed
    saved = json.loads((out / "results.json").read_text())
    assert saved["cases"]["nightly"][0]["groups"]["SugarCrepe relation"] == "1111111111x"
    assert main(["report", "--history", str(root), "nightly@2026", "nightly", "--out", str(tmp_path / "r2")]) == 2
    assert "names 2 evaluations" in one_line_error(capsys, "report")
    assert not (tmp_path / "r2").exists()
    assert main(["report", "--history", str(tmp_path / "nowhere"), "nightly", "--out", str(tmp_path / "r2")]) == 2
    assert "no such folder" in one_line_error(capsys, "report")


def test_two_real_evaluations_compare_from_the_history_as_from_their_results_files(world, tmp_path, capsys):
    """`macco eval` twice on the world (two models) into one history: `macco report --history` prints the report
    `macco report` prints from the two results.json files — table, partial marks, every paired test — but its note."""
    import open_clip
    import torch

    from macco.cli import main
    from model.factory import register_model_configs

    register_model_configs()
    history = tmp_path / "art" / "eval_results"
    for seed, run in enumerate(("a", "b")):
        torch.manual_seed(seed)
        torch.save({"state_dict": open_clip.create_model("macco-micro").state_dict()}, tmp_path / f"{run}.pt")
        assert main(["eval", "--model", "macco-micro", "--checkpoint", str(tmp_path / f"{run}.pt"), "--world",
                     str(world), "--benchmark", "all", "--out", str(tmp_path / f"{run}.json"), "--results-table",
                     str(history), "--run", run, "--vga-min-count", "1"]) == 0
    capsys.readouterr()
    printed = {}
    for name, args in (("files", [f"a={tmp_path / 'a.json'}", f"b={tmp_path / 'b.json'}", "--control", "a"]),
                       ("history", ["--history", str(tmp_path / "art"), "a", "b"])):
        assert main(["report", *args, "--out", str(tmp_path / name)]) == 0
        printed[name] = [ln for ln in capsys.readouterr().out.splitlines()[3:] if not ln.startswith("wrote ")]
    assert printed["history"] == printed["files"] and any(ln.startswith("### b vs a") for ln in printed["files"])
    saved = {n: json.loads((tmp_path / n / "results.json").read_text()) for n in printed}
    for key in ("benchmarks", "paired_tests", "cases", "partial"):
        assert saved["history"][key] == saved["files"][key], key
    assert saved["files"]["partial"] and saved["files"]["paired_tests"]["models"]["b"]  # the world: VALSE partial
    assert main(["validate", str(tmp_path / "art")]) == 0
