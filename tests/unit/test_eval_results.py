"""The evaluation history holds what its columns say (data_schemas/eval_results.py, model.benchmarks.result_rows):
accuracies only in ``accuracy``, counts / settings / correlations under their ``metric`` in ``value``, partial
groups marked with the files they lack; version-3 histories (every number in ``accuracy``) read and upgraded."""
from __future__ import annotations

import csv
import io

import pytest

from data_schemas import TABLES, read_table, write_table
from macco.cli import main
from tests_support import evaluation


def _evaluation(run: str) -> dict:
    """An evaluation whose groups hold what the real benchmarks put beside their averages (ARO's counts and
    settings, STS's correlations, retrieval's recall sum) and a partial VALSE."""
    ev = evaluation(run)
    ev["benchmarks"] |= {
        "aro-vgr": {"subsets": {}, "groups": {"macro": 0.6, "relations_kept": 5, "relations_total": 7,
                                              "exclusion_list": "aro_notebook"}, "cases": {"macro": "110x1"}},
        "aro-vga": {"subsets": {}, "groups": {"macro": None, "groups_kept": 0, "groups_total": 7, "min_count": 5}},
        "sts": {"subsets": {"sick-r": {"n": 4, "cosine_spearman": -0.2}},
                "groups": {"sick-r_cosine_spearman": -0.2, "sick-r_cosine_pearson": 0.3}},
        "retrieval-coco": {"subsets": {}, "groups": {"i2t_r1": 0.5, "t2i_r1": 0.75, "rsum": 1.25}},
        "valse": {"subsets": {"counting": {"n": 3, "correct": 2, "accuracy": 2 / 3}},
                  "groups": {"avg": 2 / 3, "counting": 2 / 3, "relation": None}, "cases": {"avg": "110"},
                  "partial": True, "missing_files": {"avg": ["plurals", "foil-it"], "counting": ["counting-hard"]}},
    }
    return ev


def _sql(capsys, query: str, root) -> list[dict]:
    capsys.readouterr()
    assert main(["sql", query, "--root", str(root), "--csv"]) == 0
    return list(csv.DictReader(io.StringIO(capsys.readouterr().out)))


def test_counts_and_correlations_are_values_under_their_metric_not_accuracies():
    """relations_kept 5 was stored as accuracy 5 (the README's query showed it as one, avg(accuracy) counted it)."""
    from model.benchmarks import EvalConfig, result_rows

    rows = {(r["benchmark"], r["subset"]): r for r in result_rows(_evaluation("m"), EvalConfig())}
    got = {k: (r["metric"], r["accuracy"], r["value"]) for k, r in rows.items() if r["level"] == "group"}
    assert got[("aro-vgr", "macro")] == ("accuracy", 0.6, None)
    assert got[("aro-vgr", "relations_kept")] == ("count", None, 5.0)
    assert got[("aro-vga", "groups_total")] == ("count", None, 7.0)
    assert got[("aro-vga", "min_count")] == ("setting", None, 5.0)
    assert got[("sts", "sick-r_cosine_spearman")] == ("correlation", None, -0.2)
    assert got[("retrieval-coco", "rsum")] == ("recall_sum", None, 1.25)
    assert ("aro-vgr", "exclusion_list") not in got and ("aro-vga", "macro") not in got
    assert all(r["accuracy"] is None or 0 <= r["accuracy"] <= 1 for r in rows.values())
    assert rows[("aro-vgr", "macro")]["n"] == 4 and rows[("aro-vgr", "macro")]["missing_images"] == 1


def test_a_partial_group_is_marked_with_the_files_it_lacks():
    """eval.json said VALSE was partial; the history's rows did not."""
    from model.benchmarks import EvalConfig, result_rows

    rows = {(r["benchmark"], r["level"], r["subset"]): r for r in result_rows(_evaluation("m"), EvalConfig())}
    assert (rows[("valse", "group", "avg")]["partial"], rows[("valse", "group", "avg")]["missing"]) == \
        (True, ["foil-it", "plurals"])
    assert rows[("valse", "group", "counting")]["missing"] == ["counting-hard"]
    assert (rows[("valse", "subset", "counting")]["partial"], rows[("sugarcrepe", "subset", "s1")]["partial"]) == \
        (False, False)
    assert rows[("aro-vgr", "group", "macro")]["missing"] == []


def test_a_number_outside_the_unit_interval_with_no_known_metric_is_refused():
    from model.benchmarks import EvalConfig, result_rows

    ev = evaluation("m")
    ev["benchmarks"]["sugarcrepe"]["groups"] = {"pairs_seen": 12}
    with pytest.raises(ValueError, match=r"benchmarks.sugarcrepe.groups.pairs_seen: 12 is not an accuracy"):
        result_rows(ev, EvalConfig())


def test_two_evaluations_appended_validate_and_average_accuracies_only(tmp_path, capsys):
    from model.benchmarks import EvalConfig, append_results

    for run in ("a", "b"):
        append_results(tmp_path / "eval_results", _evaluation(run), EvalConfig())
    assert main(["validate", str(tmp_path)]) == 0, capsys.readouterr().out[-3000:]
    [row] = _sql(capsys, "select max(accuracy) top, count(*) filter (where partial) partial_rows, "
                         "sum(value) filter (where metric = 'count') counts from eval_results", tmp_path)
    # the largest accuracy is retrieval's t2i_r1 (0.75), not a count or the recall sum
    assert (float(row["top"]), row["partial_rows"], float(row["counts"])) == (0.75, "4", 2 * (5 + 7 + 0 + 7))


def _v3_rows() -> list[dict]:
    from datetime import datetime, timezone

    common = dict(eval_id="e0", run="old", model_id="m", correct=0, ties=0, missing_images=0, checkpoint_sha256="x",
                  config="{}", config_key="k", protocol="authors", activation="gelu", code_version="c",
                  created=datetime(2026, 12, 1, tzinfo=timezone.utc), trigger="macco eval")
    return [dict(common, benchmark="aro-vgr", level="group", subset="macro", n=3, accuracy=0.6),
            dict(common, benchmark="aro-vgr", level="group", subset="relations_kept", n=0, accuracy=5.0),
            dict(common, benchmark="aro-vga", level="group", subset="min_count", n=0, accuracy=25.0),
            dict(common, benchmark="sts", level="group", subset="sts-b_spearman", n=0, accuracy=-0.1),
            dict(common, benchmark="aro-vgr", level="subset", subset="on", n=3, accuracy=0.6)]


def test_a_version_3_history_reads_and_upgrades_with_counts_moved_and_every_row_kept(tmp_path, capsys):
    """Histories written before version 4 hold counts as accuracies: the view and the upgrade move them to
    ``value`` under the group's metric; partial / missing were not recorded (null), not claimed complete."""
    from data_schemas.eval_results import V3_SPEC, upgrade_v3
    from model.benchmarks import EvalConfig, append_results

    table = tmp_path / "eval_results"
    write_table(V3_SPEC, table, V3_SPEC.from_rows(_v3_rows()))
    assert main(["validate", str(tmp_path)]) == 0, capsys.readouterr().out[-3000:]
    query = "select subset, metric, accuracy, value, partial from eval_results where run = 'old' order by subset"
    viewed = _sql(capsys, query, tmp_path)
    assert [(r["subset"], r["metric"], r["accuracy"], r["value"], r["partial"]) for r in viewed] == [
        ("macro", "accuracy", "0.6", "", ""), ("min_count", "setting", "", "25.0", ""),
        ("on", "accuracy", "0.6", "", ""), ("relations_kept", "count", "", "5.0", ""),
        ("sts-b_spearman", "correlation", "", "-0.1", "")]
    append_results(table, _evaluation("new"), EvalConfig())
    assert _sql(capsys, query, tmp_path) == viewed  # the upgraded rows read as the view read them
    rows = read_table(TABLES["eval_results"], table).to_pylist()
    assert sum(r["run"] == "old" for r in rows) == 5
    assert upgrade_v3(V3_SPEC.from_rows(_v3_rows())).to_pylist() == [r for r in rows if r["run"] == "old"]
    assert main(["validate", str(tmp_path)]) == 0


def test_a_groups_per_case_outcomes_are_stored_and_checked_against_its_counts(tmp_path, capsys):
    """Version 5: an accuracy group's row holds its cases (1/0/x), what `macco report --history` pairs; a string
    that disagrees with the row's n / missing_images fails `validate`."""
    from model.benchmarks import EvalConfig, append_results, result_rows

    rows = {(r["benchmark"], r["level"], r["subset"]): r for r in result_rows(_evaluation("m"), EvalConfig())}
    assert rows[("aro-vgr", "group", "macro")]["cases"] == "110x1" and rows[("valse", "group", "avg")]["cases"] == "110"
    assert rows[("aro-vgr", "group", "relations_kept")]["cases"] is None  # a count has no cases
    assert rows[("valse", "subset", "counting")]["cases"] is None
    append_results(tmp_path / "eval_results", _evaluation("m"), EvalConfig())
    assert main(["validate", str(tmp_path)]) == 0
    bad = [dict(r, eval_id="e9", cases="11x") for r in result_rows(_evaluation("m"), EvalConfig())
           if (r["benchmark"], r["subset"]) == ("aro-vgr", "macro")]
    write_table(TABLES["eval_results"], tmp_path / "bad" / "eval_results", TABLES["eval_results"].from_rows(bad))
    assert main(["validate", str(tmp_path / "bad")]) == 1
    assert "eval_results.cases_match_counts: 1 bad row(s)" in capsys.readouterr().err


def test_a_version_4_history_reads_with_cases_null_and_upgrades_every_row(tmp_path, capsys):
    from data_schemas.eval_results import V4_SPEC, upgrade_v4
    from model.benchmarks import EvalConfig, append_results, result_rows

    old = [{k: v for k, v in r.items() if k != "cases"} for r in result_rows(_evaluation("old"), EvalConfig())]
    table = tmp_path / "eval_results"
    write_table(V4_SPEC, table, V4_SPEC.from_rows(old))
    query = "select count(*) n, count(cases) with_cases, count(accuracy) accuracies from eval_results where run = 'old'"
    viewed = _sql(capsys, query, tmp_path)
    assert viewed == [{"n": str(len(old)), "with_cases": "0", "accuracies": str(sum(r["accuracy"] is not None
                                                                                    for r in old))}]
    append_results(table, _evaluation("new"), EvalConfig())
    assert _sql(capsys, query, tmp_path) == viewed
    rows = read_table(TABLES["eval_results"], table).to_pylist()
    assert upgrade_v4(V4_SPEC.from_rows(old)).to_pylist() == [r for r in rows if r["run"] == "old"]
    assert main(["validate", str(tmp_path)]) == 0
