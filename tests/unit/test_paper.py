"""pipeline/paper.py: the paper's numbers beside ours, and the registered comparison (MACCO vs CLIP-FT, Holm)."""
from __future__ import annotations

import json

import pytest

from pipeline import paper as P
from pipeline.report import holm, mcnemar


def run(label: str, vgr: float, cases: dict[str, str] | None = None) -> dict:
    """An evaluation results.json of one seed: VG-R's macro and the bar groups' per-case strings."""
    cases = cases or {}
    bench = {"aro-vgr": {"groups": {"macro": vgr}, "subsets": {}, "cases": {}}}
    for b, key, _ in P.BAR:
        if (b, key) in cases:
            bench.setdefault(b, {"groups": {}, "subsets": {}, "cases": {}})["cases"][key] = cases[(b, key)]
    return {"label": label, "benchmarks": bench}


def test_every_shipped_number_names_its_table_row_and_column():
    data = P.load_paper()
    assert {"main", "general", "text_encoder", "stacking"} <= set(data["tables"])
    for name, t in data["tables"].items():
        assert t["source"] and t["columns"] and t["row_names"], name
        for row, cells in t["rows"].items():  # a number only with its row and column declared
            assert row in t["row_names"] and set(cells) <= set(t["columns"]), (name, row)
    main = data["tables"]["main"]
    assert {"CLIP", "CLIP-FT", "MACCO"} <= set(main["row_names"]) and tuple(main["columns"]) == P.MAIN_COLUMNS
    # every column of the paper's tables has a rule that computes our number for it
    assert all(c in P.OURS for t in data["tables"].values() for c in t["columns"])
    # a cell not read from the paper is absent and said so, never filled in
    filled = sum(len(cells) for t in data["tables"].values() for cells in t["rows"].values())
    assert filled or data["not_found"]


def test_a_table_without_its_source_is_refused(tmp_path):
    bad = {"paper": {}, "tables": {"main": {"columns": {"aro_relation": "VG-R"}, "rows": {"CLIP": {"aro_relation": 1}},
                                            "row_names": {"CLIP": "CLIP"}}}}
    p = tmp_path / "n.json"
    p.write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="tables.main has no 'source'"):
        P.load_paper(p)
    bad["tables"]["main"]["source"] = "Table 1"
    bad["tables"]["main"]["rows"]["CLIP"]["typo"] = 3
    p.write_text(json.dumps(bad))
    with pytest.raises(ValueError, match=r"rows.CLIP: columns \['typo'\]"):
        P.load_paper(p)


def test_ours_beside_the_paper_mean_sd_and_difference():
    table = {"source": "Table 1", "columns": {"aro_relation": "ARO-Relation", "whatsup": "What's Up"},
             "rows": {"CLIP": {"aro_relation": 59.9}, "MACCO": {"aro_relation": 80.0, "whatsup": 41.0}},
             "row_names": {"CLIP": "CLIP", "MACCO": "MACCO-CLIP"}}
    results = {"clip": [run("clip", 0.60)], "macco": [run("macco-s0", 0.70), run("macco-s1", 0.74),
                                                       run("macco-s2", 0.78)]}
    lines = P.compare_table(table, results, {"clip": "CLIP", "macco": "MACCO"})
    by = {(ln["column"], ln["model"]): ln for ln in lines}
    m = by[("aro_relation", "macco")]
    assert m["ours"]["mean"] == pytest.approx(74.0) and m["ours"]["sd"] == pytest.approx(4.0)
    assert m["ours"]["seeds"] == 3 and m["paper"] == 80.0 and m["diff"] == pytest.approx(-6.0)
    c = by[("aro_relation", "clip")]
    assert c["ours"] == {"mean": pytest.approx(60.0), "sd": 0.0, "seeds": 1} and c["diff"] == pytest.approx(0.1)
    # a column we did not evaluate, and one the paper does not print for a row: shown as such, never invented
    assert by[("whatsup", "macco")]["ours"] is None and by[("whatsup", "macco")]["paper"] == 41.0
    assert by[("whatsup", "clip")]["paper"] is None and by[("whatsup", "clip")]["diff"] is None
    md = "\n".join(P.table_lines("main", table, lines, {"clip": "CLIP", "macco": "MACCO"}))
    assert "| ARO-Relation | 60.0 | 59.9 | +0.1 | 74.0 ± 4.0 | 80.0 | -6.0 |" in md
    assert "MACCO-CLIP (paper)" in md


def test_family_means_over_suites_and_the_order_mean():
    r = {"benchmarks": {"zeroshot/cifar10": {"groups": {"top1": 0.5}}, "zeroshot/dtd": {"groups": {"top1": 0.3}},
                        "coco-order": {"groups": {"precision_at_1": 0.4}},
                        "flickr-order": {"groups": {"precision_at_1": 0.6}}}}
    assert P.OURS["zeroshot_mean"](r) == pytest.approx(0.4)
    assert P.OURS["linear_probe_mean"](r) is None
    assert P.OURS["aro_order"](r) == pytest.approx(0.5)
    assert P.OURS["compositional_mean"](r) is None  # the main columns are not all there


def test_the_registered_comparison_is_holm_over_the_bar_groups():
    # seed pairs 0 and 1; VG-R: macco wins 10 cases, loses 0; COCO-Order: a tie; the rest absent
    win, lose = "1" * 10, "0" * 10
    cases_m = {("aro-vgr", "macro"): win, ("coco-order", "precision_at_1"): "10"}
    cases_c = {("aro-vgr", "macro"): lose, ("coco-order", "precision_at_1"): "10"}
    results = {"macco": [run(f"macco-s{s}", 0.7, cases_m) for s in (0, 1)],
               "clip-ft": [run(f"clip-ft-s{s}", 0.6, cases_c) for s in (1, 0)]}
    bar = P.registered_comparison(results, "macco", "clip-ft")
    assert bar["seed_pairs"] == 2 and set(bar["groups"]) == {"ARO VG-Relation", "ARO COCO-Order"}
    vgr = bar["groups"]["ARO VG-Relation"]
    raw = mcnemar([win, win], [lose, lose])
    assert vgr["p_case"] == raw["p_case"] and vgr["b_case"] == 10
    assert vgr["p_holm"] == holm({"a": raw["p_case"], "b": 1.0})["a"] and vgr["mark"] == "▲"
    assert bar["groups"]["ARO COCO-Order"]["mark"] == ""
    assert not bar["met"] and bar["missing"] == ["ARO Flickr-Order", "SugarCrepe relation", "VL-CheckList relation"]
    text = "\n".join(P.bar_lines(bar))
    assert "**not met** (not evaluated: ARO Flickr-Order, SugarCrepe relation, VL-CheckList relation)" in text


def test_the_bar_is_met_only_when_every_group_is_up():
    win, lose = "1" * 12, "0" * 12
    cm = {(b, k): win for b, k, _ in P.BAR}
    cc = {(b, k): lose for b, k, _ in P.BAR}
    results = {"macco": [run("macco-s0", 0.7, cm)], "clip-ft": [run("clip-ft-s0", 0.6, cc)]}
    assert P.registered_comparison(results, "macco", "clip-ft")["met"]
    # one group the other way round: a ▼ there, the bar not met
    cm[("sugarcrepe", "relation")], cc[("sugarcrepe", "relation")] = lose, win
    results = {"macco": [run("macco-s0", 0.7, cm)], "clip-ft": [run("clip-ft-s0", 0.6, cc)]}
    bar = P.registered_comparison(results, "macco", "clip-ft")
    assert bar["groups"]["SugarCrepe relation"]["mark"] == "▼" and not bar["met"]


STACKING = {"negclip": "NegCLIP", "macco-negclip": "NegCLIP+MACCO", "ce-clip": "CE-CLIP",
            "macco-ce-clip": "CE-CLIP+MACCO"}


def stack_run(label: str, vlc_relation: float, vgr: float | None = None, cases: dict | None = None) -> dict:
    """One seed's results.json with VL-CheckList relation (and ARO VG-Relation where given), and the per-case
    strings given ({(benchmark, group): string}); nothing else."""
    bench = {"vl-checklist": {"groups": {"relation": vlc_relation}, "subsets": {}, "cases": {}}}
    if vgr is not None:
        bench["aro-vgr"] = {"groups": {"macro": vgr}, "subsets": {}, "cases": {}}
    for (b, key), string in (cases or {}).items():
        bench.setdefault(b, {"groups": {}, "subsets": {}, "cases": {}})["cases"][key] = string
    return {"label": label, "benchmarks": bench}


def test_the_stacking_table_and_macco_s_gain_over_each_method_beside_the_quoted_one():
    """Runs of the four hard-negative modes mapped to the stacking rows: the stacking table (ours, the paper's cell:
    '-', none read) and the gains table, X + MACCO minus X paired by seed, beside the issue's quoted +3.1 / +1.9."""
    paper = P.load_paper()
    stacking = paper["tables"]["stacking"]
    assert set(stacking["row_names"]) == set(STACKING.values()) and not stacking["rows"]  # no cell invented
    assert {"vlchecklist_relation", "vlchecklist_attribute", "vlchecklist_object", "aro_relation",
            "aro_attribute"} <= set(stacking["columns"]) and any(c.startswith("sugarcrepe") for c in stacking["columns"])
    quoted = stacking["deltas"]["rows"]
    assert quoted == {"NegCLIP+MACCO": {"over": "NegCLIP", "cells": {"vlchecklist_relation": 3.1}},
                      "CE-CLIP+MACCO": {"over": "CE-CLIP", "cells": {"vlchecklist_relation": 1.9}}}
    assert "issue #46" in " ".join(stacking["deltas"]["source"]) and "Not read from the paper" in \
        " ".join(stacking["deltas"]["source"])
    results = {  # negclip has seeds 0 and 1 only: the pair of seed 2 is left out of its gain
        "negclip": [stack_run("negclip-s0", 0.60, 0.50), stack_run("negclip-s1", 0.62, 0.52)],
        "macco-negclip": [stack_run(f"macco-negclip-s{s}", v, 0.55) for s, v in ((0, 0.63), (1, 0.67), (2, 0.90))],
        "ce-clip": [stack_run(f"ce-clip-s{s}", 0.70) for s in (0, 1, 2)],
        "macco-ce-clip": [stack_run(f"macco-ce-clip-s{s}", 0.71) for s in (0, 1, 2)]}
    lines, data = P.paper_section({"macco": results}, STACKING, "clip-ft", paper)
    md = "\n".join(lines)
    assert list(data["tables"]) == ["stacking"] and not data["registered"]  # no MACCO row mapped: no bar
    assert "### stacking: " + stacking["source"] in md
    assert "| VL-CheckList-Relation | 61.0 ± 1.4 | - | - | 73.3 ± 14.6 | - | - | 70.0 ± 0.0 | - | - | " \
           "71.0 ± 0.0 | - | - |" in md
    assert "NegCLIP + MACCO (paper)" in md and "| ARO-Order | - | - | - |" in md  # not evaluated: '-'
    gains = {(g["column"], g["row"]): g for g in data["deltas"]["stacking"]}
    neg = gains[("vlchecklist_relation", "NegCLIP+MACCO")]
    # seed pairs 0 and 1: gains 3.0 and 5.0 points
    assert neg["ours"] == {"mean": pytest.approx(4.0), "sd": pytest.approx(2 ** 0.5), "seeds": 2}
    assert neg["paper"] == 3.1 and (neg["model"], neg["base"]) == ("macco-negclip", "negclip")
    assert gains[("aro_relation", "NegCLIP+MACCO")]["ours"]["mean"] == pytest.approx(4.0)
    assert gains[("aro_relation", "NegCLIP+MACCO")]["paper"] is None  # no delta quoted there: never invented
    assert gains[("aro_relation", "CE-CLIP+MACCO")]["ours"] is None  # CE-CLIP's runs have no VG-Relation
    assert gains[("vlchecklist_relation", "CE-CLIP+MACCO")]["ours"]["mean"] == pytest.approx(1.0)
    assert "| column | macco-negclip − negclip (ours) | NegCLIP + MACCO − NegCLIP (quoted) | macco-ce-clip − ce-clip " \
           "(ours) | CE-CLIP + MACCO − CE-CLIP (quoted) |" in md
    assert "| VL-CheckList-Relation | +4.0 ± 1.4 | +3.1 | +1.0 ± 0.0 | +1.9 |" in md
    assert "| ARO-Relation | +4.0 ± 1.4 | - | - | - |" in md
    assert "Quoted: Not read from the paper's table: the project's issue #46" in md


def test_a_gain_is_printed_only_for_a_method_and_its_stacked_row_both_mapped():
    results = {"negclip": [stack_run("negclip-s0", 0.6)], "macco-negclip": [stack_run("macco-negclip-s0", 0.7)]}
    lines, data = P.paper_section({None: results}, {"negclip": "NegCLIP", "macco-negclip": "NegCLIP+MACCO"}, "x")
    assert {g["row"] for g in data["deltas"]["stacking"]} == {"NegCLIP+MACCO"}
    assert "| VL-CheckList-Relation | +10.0 | +3.1 |" in "\n".join(lines)  # one seed pair: no spread
    _, data = P.paper_section({None: results}, {"negclip": "NegCLIP"}, "x")
    assert "stacking" in data["tables"] and not data["deltas"]
    paper = P.load_paper()
    paper["tables"]["stacking"]["deltas"]["source"] = "One line of text."  # a source as one string, not its lines
    lines, _ = P.paper_section({None: results}, {"negclip": "NegCLIP", "macco-negclip": "NegCLIP+MACCO"}, "x", paper)
    assert "Quoted: One line of text. Ours:" in "\n".join(lines)


def test_a_quoted_delta_without_its_source_or_rows_is_refused(tmp_path):
    data = P.load_paper()
    stacking = data["tables"]["stacking"]
    p = tmp_path / "n.json"
    for bad, message in (({"rows": stacking["deltas"]["rows"]}, "tables.stacking.deltas has no 'source'"),
                         ({"source": "x", "rows": {"NegCLIP+MACCO": {"over": "CLIP", "cells": {}}}},
                          r"deltas.rows.NegCLIP\+MACCO: columns \[\] / the row or its 'over' \('CLIP'\)"),
                         ({"source": "x", "rows": {"CE-CLIP+MACCO": {"over": "CE-CLIP", "cells": {"typo": 1.9}}}},
                          r"columns \['typo'\]")):
        p.write_text(json.dumps({**data, "tables": {"stacking": {**stacking, "deltas": bad}}}))
        with pytest.raises(ValueError, match=message):
            P.load_paper(p)


def test_macco_s_gain_over_a_method_is_a_paired_test_over_the_same_cases_holm_over_the_columns():
    """Where a stacking column is one case group, the stacked run is tested against its method over the same cases
    (seeds paired, the case-level sign test), Holm over the columns tested for that pair; ▲ marks the gain."""
    vlc, vgr = ("vl-checklist", "relation"), ("aro-vgr", "macro")
    win, lose, tie = "1" * 12, "0" * 12, "10" * 6
    results = {"negclip": [stack_run(f"negclip-s{s}", 0.5, 0.5, {vlc: lose, vgr: tie}) for s in (0, 1)],
               "macco-negclip": [stack_run(f"macco-negclip-s{s}", 0.6, 0.5, {vlc: win, vgr: tie}) for s in (1, 0)]}
    lines, data = P.paper_section({"macco": results}, {"negclip": "NegCLIP", "macco-negclip": "NegCLIP+MACCO"}, "x")
    gains = {g["column"]: g for g in data["deltas"]["stacking"]}
    assert set(c for c, g in gains.items() if g["test"]) == {"vlchecklist_relation", "aro_relation"}
    t = gains["vlchecklist_relation"]["test"]
    raw = mcnemar([win, win], [lose, lose])
    assert t["p_case"] == raw["p_case"] and t["b_case"] == 12 and t["mark"] == "▲"
    assert t["p_holm"] == holm({"a": raw["p_case"], "b": 1.0})["a"]
    assert gains["aro_relation"]["test"]["mark"] == "" and gains["aro_order"]["test"] is None  # two groups: no test
    md = "\n".join(lines)
    assert "| VL-CheckList-Relation | +10.0 ± 0.0 ▲ | +3.1 |" in md and "| ARO-Relation | +0.0 ± 0.0 | - |" in md
    assert "after Holm's correction over the columns tested for that pair (ARO-Relation, ARO-Attribute, " \
           "VL-CheckList-Relation" in md
