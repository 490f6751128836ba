"""pipeline/report.py: Holm's correction over a model's groups, the marks it gives, and the per-case outcomes in
results.json from which every p-value is re-derived."""
import json

import pytest

from model.benchmarks.registry import REPORT_ROWS as ROWS
from model.losses import TERM_LABELS as TERMS
from pipeline.report import case_outcomes, chance_of, holm, mcnemar, write_report


def test_holm_adjusts_step_down_and_stays_monotone():
    got = holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.005})
    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04 -> monotone 0.02, 0.03, 0.06, 0.06
    assert got == pytest.approx({"d": 0.02, "a": 0.03, "c": 0.06, "b": 0.06})
    assert holm({"a": 0.6, "b": 0.7}) == {"a": 1.0, "b": 1.0} and holm({}) == {}


def test_holm_over_eleven_groups_keeps_p_0_003_and_drops_p_0_045():
    """The audit's example (R3-H1 stage 2's table, 11 groups): VL-CheckList attribute (p 0.003) survives, the
    COCO-Order p 0.045 does not."""
    ps = {f"g{i}": 0.5 for i in range(9)} | {"attribute": 0.003, "order": 0.045}
    got = holm(ps)
    assert got["attribute"] == pytest.approx(0.033) and got["attribute"] < 0.05
    assert got["order"] == pytest.approx(0.45) and got["order"] > 0.05


def _run(label: str, bits: dict[str, str]) -> dict:
    """A run whose groups hold the given case strings (each group's score: the share of '1')."""
    benches: dict = {}
    for bench, key, name, _ in ROWS:
        if name in bits:
            b = benches.setdefault(bench, {"subsets": {}, "groups": {}, "cases": {}})
            b["subsets"][key] = {"n": len(bits[name])}
            b["groups"][key] = bits[name].count("1") / len(bits[name])
            b["cases"][key] = bits[name]
    return {"label": label, "benchmarks": benches}


def test_a_raw_p_under_alpha_is_unmarked_when_holm_lifts_it(tmp_path):
    names = [name for _, _, name, _ in ROWS]
    strong, weak = names[0], names[1]
    control = {n: "0" * 40 for n in names}
    model = {n: "0" * 40 for n in names} | {strong: "1" * 30 + "0" * 10, weak: "1" * 7 + "0" * 33}
    assert mcnemar([model[weak]], [control[weak]])["p_case"] < 0.05  # 7 / 0 discordant cases: p 0.016 raw
    write_report({"clip-ft": [_run("clip-ft-s0", control)], "macco": [_run("macco-s0", model)]}, tmp_path, "t",
                 rows=ROWS, terms=TERMS)
    md = (tmp_path / "results.md").read_text()
    main_table = md.split("###")[0]  # the model x group table, before the tests' tables
    row = {line.split(" | ")[0][2:]: line for line in main_table.splitlines() if line.startswith("| ")}
    assert "▲" in row[strong] and "▲" not in row[weak]
    assert f"Holm's correction over each model's {len(names)} groups" in md
    tests = json.loads((tmp_path / "results.json").read_text())["paired_tests"]["models"]["macco"]
    assert tests[weak]["p_case"] < 0.05 < tests[weak]["p_holm"]  # raw p kept beside the corrected one


def test_every_p_value_is_re_derived_from_results_json_alone(tmp_path):
    names = [name for _, _, name, _ in ROWS][:4]
    runs = {"clip-ft": [_run(f"clip-ft-s{s}", {n: ("10" * 21)[s:s + 40] for n in names}) for s in (0, 1)],
            "macco": [_run(f"macco-s{s}", {n: ("110" * 20)[s + i:s + i + 40] for i, n in enumerate(names)})
                      for s in (1, 0)]}
    write_report(runs, tmp_path, "t", rows=ROWS, terms=TERMS)
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["cases"] == case_outcomes(runs, ROWS)
    ctrl = {r["seed"]: r["groups"] for r in data["cases"]["clip-ft"]}
    for name, stored in data["paired_tests"]["models"]["macco"].items():
        pairs = [(r["groups"][name], ctrl[r["seed"]][name]) for r in data["cases"]["macco"]]
        again = mcnemar([m for m, _ in pairs], [c for _, c in pairs])
        assert {k: stored[k] for k in again} == again
    adjusted = holm({n: r["p_case"] for n, r in data["paired_tests"]["models"]["macco"].items()})
    assert adjusted == {n: r["p_holm"] for n, r in data["paired_tests"]["models"]["macco"].items()}


def test_the_captions_image_free_level_is_reported_as_a_baseline_not_a_bound(tmp_path):
    """The captions' frequency estimate is no ceiling for a predictor without the image (R4's trained image-free
    control beat it), so the report names it a baseline and never says accuracy above it must come from the image."""
    recon = {"direction_acc": 0.42, "image_free": {"direction_acc": 0.393}}
    write_report({"macco": [{"label": "macco-s0", "benchmarks": {}, "probes": {"reconstruction": recon}}]},
                 tmp_path, "t", rows=ROWS, terms=TERMS)
    probes = (tmp_path / "results.md").read_text().split("## Probes")[1]
    assert "| recon: direction words, captions' baseline % |  | 39.3 |" in probes
    assert "image-free %" not in probes and "only accuracy above" not in probes
    assert "a baseline, not a bound" in probes


def _partial(run: dict, bench: str, key: str, lacks: list[str]) -> dict:
    """``run`` with ``bench``'s group ``key`` averaged over part of its files, as ``macco eval --allow-partial``
    marks it."""
    b = run["benchmarks"][bench]
    b["partial"] = True
    b.setdefault("missing_files", {})[key] = lacks
    return run


def test_a_partial_group_is_marked_on_its_row_and_the_legend_names_what_it_lacks(tmp_path):
    """eval.json marked VALSE partial; results.md showed "VALSE avg" like any complete average."""
    rows = {"VALSE avg": "1100" * 10, "SugarCrepe object": "10" * 20}
    runs = {m: [_partial(_run(f"{m}-s0", rows), "valse", "avg", ["plurals", "foil-it"])]
            for m in ("clip-ft", "macco")}
    write_report(runs, tmp_path, "t", rows=ROWS, terms=TERMS)
    md = (tmp_path / "results.md").read_text()
    table = {ln.split(" | ")[0][2:]: ln for ln in md.split("###")[0].splitlines() if ln.startswith("| ")}
    assert "VALSE avg †" in table and "SugarCrepe object" in table
    assert "†: partial" in md and "VALSE avg lacks foil-it, plurals" in md
    assert "Not compared" not in md  # both models lack the same files: their cases are the same, tested
    assert "VALSE avg" in json.loads((tmp_path / "results.json").read_text())["paired_tests"]["models"]["macco"]


def test_a_partial_group_is_not_compared_with_a_complete_one_and_the_report_says_so(tmp_path):
    """A model scored on 3 of VALSE's pieces against a control scored on all: the paired test compared them as
    if they were the same cases, and marked the difference."""
    rows = {"VALSE avg": "1" * 40, "SugarCrepe object": "10" * 20}
    control = _run("clip-ft-s0", {"VALSE avg": "0" * 40, "SugarCrepe object": "10" * 20})
    runs = {"clip-ft": [control], "macco": [_partial(_run("macco-s0", rows), "valse", "avg", ["plurals"])]}
    write_report(runs, tmp_path, "t", rows=ROWS, terms=TERMS)
    md = (tmp_path / "results.md").read_text()
    tests = json.loads((tmp_path / "results.json").read_text())["paired_tests"]["models"]["macco"]
    assert "VALSE avg" not in tests and "SugarCrepe object" in tests
    assert "Not compared with clip-ft (no paired test, no mark): VALSE avg (macco lacks plurals, clip-ft complete)" \
        in md
    assert "VALSE avg: macco lacks plurals; clip-ft complete" in md
    [row] = [ln for ln in md.splitlines() if ln.startswith("| VALSE avg")]
    assert row == "| VALSE avg † | 40 | 50 | 0.0 | 100.0 |"  # 40 / 0 cases, unmarked: not the same cases


def test_the_figure_marks_a_partial_group_in_its_label():
    from pipeline.report import collect, results_figure

    run = _partial(_run("m-s0", {"VALSE avg": "10" * 5, "SugarCrepe object": "10" * 5}), "valse", "avg", ["x"])
    fig = results_figure(collect({"m": [run]}, ROWS), ["SugarCrepe object", "VALSE avg"], "t",
                         partial={"VALSE avg"}, chance=chance_of(ROWS))
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert labels == ["SugarCrepe object\n(n=10)", "VALSE avg †\n(n=10)"]
    assert any("†: partial" in t.get_text() for t in fig.texts)


def test_the_reports_rows_are_the_benchmark_records(tmp_path):
    """A benchmark's report rows (group, label, chance) are declared on its registry record: a record's rows reach
    the table and the chance column with no edit to pipeline/ (it is handed the rows)."""
    from model.benchmarks.registry import _RECORDS

    assert ROWS == tuple((b.name, *row) for b in _RECORDS for row in b.rows)
    assert len({name for _, _, name, _ in ROWS}) == len(ROWS)
    new = (("new-bench", "macro", "New bench (macro)", 1 / 3),)
    run = {"label": "m-s0", "benchmarks": {"new-bench": {"subsets": {"a": {"n": 6}}, "groups": {"macro": 0.5},
                                                         "cases": {"macro": "111000"}}}}
    write_report({"m": [run]}, tmp_path, "t", rows=(*ROWS, *new), terms=TERMS)
    assert "| New bench (macro) | 6 | 33 | 50.0 |" in (tmp_path / "results.md").read_text()


def test_ce_clip_s_terms_get_gradient_rows_for_its_modes_only(tmp_path):
    """The report's gradient rows are ``REPORT_TERMS``: MACCO's terms and CE-CLIP's IMC and CMR; a ce-clip mode's
    probe has norms for them, a macco run none, so their rows show the first and '-' for the second."""
    from model.losses import REPORT_TERMS

    def probed(label: str, terms: dict[str, float]) -> dict:
        return {"label": label, "benchmarks": {},
                "probes": {"gradient_norms": {t: {"text": v, "image": v / 2} for t, v in terms.items()} | {"batch": 8}}}

    runs = {"macco": [probed("macco-s0", {"contrast_loss": 1.0, "intra_modal_contrast_loss": 0.5})],
            "macco-ce-clip": [probed(f"macco-ce-clip-s{s}", {"contrast_loss": 1.0, "imc_loss": 0.2 + s,
                                                             "cmr_loss": 0.1}) for s in (0, 1)]}
    write_report(runs, tmp_path, "t", rows=ROWS, terms=REPORT_TERMS)
    probes = (tmp_path / "results.md").read_text().split("## Probes")[1]
    assert "| grad ‖text‖ ← IMC |  | - | 0.7 ± 0.707 |" in probes
    assert "| grad ‖image‖ ← CMR |  | - | 0.05 ± 0 |" in probes
    assert "| grad ‖text‖ ← MIR |  | 0.5 | - |" in probes
    assert "← masked text" not in probes  # a term no run has: no row
    data = json.loads((tmp_path / "results.json").read_text())["probes"]
    assert data["macco-ce-clip"]["grad ‖text‖ ← CMR"] == {"mean": pytest.approx(0.1), "sd": 0.0, "runs": 2}
    assert "grad ‖text‖ ← IMC" not in data["macco"]
