"""Faults in ``macco report``'s inputs (pipeline/results.py): results of the wrong shape and an --out file are one
line, leaving nothing."""
from __future__ import annotations

import json

import pytest

from macco.cli import main
from tests_support import one_line_error


@pytest.mark.parametrize("bench,where", [
    ({"groups": "0.5"}, "benchmarks.sugarcrepe.groups: a mapping"),  # was a KeyError traceback
    ({"groups": [0.5]}, "benchmarks.sugarcrepe.groups: a mapping"),  # was an AttributeError traceback
    ({"groups": {"relation": float("nan")}}, "groups.relation: nan is not a finite number"),  # was "nan"
    ({"groups": {"relation": 0.5}, "subsets": {"replace_rel": {"n": "ten", "accuracy": 0.5}}},
     "subsets.replace_rel.n: 'ten' is not a count"),
])
def test_report_inputs_of_the_wrong_shape_are_one_line(tmp_path, capsys, bench, where):
    f = tmp_path / "r.json"
    f.write_text(json.dumps({"benchmarks": {"sugarcrepe": bench}}))
    assert main(["report", f"macco={f}", "--out", str(tmp_path / "o")]) == 2
    assert where in one_line_error(capsys, "report")
    assert not (tmp_path / "o" / "results.md").exists()


def test_report_inputs_of_other_shapes_and_an_out_file_are_one_line_leaving_nothing(tmp_path, capsys):
    """label: 5, missing_images: "x", case strings shorter than the control's, --out an existing file: TypeError,
    ValueError, FileExistsError tracebacks, and an empty folder left."""
    good = {"sugarcrepe": {"groups": {"relation": 0.5}, "subsets": {"replace_rel": {"n": 4, "accuracy": 0.5}},
                           "cases": {"relation": "1010"}}}
    (tmp_path / "c.json").write_text(json.dumps({"benchmarks": good}))
    cases = [({"label": 5, "benchmarks": good}, "label: '5' is not a run name"),
             ({"benchmarks": {"sugarcrepe": {**good["sugarcrepe"], "subsets": {
                 "replace_rel": {"n": 4, "accuracy": 0.5, "missing_images": "x"}}}}},
              "subsets.replace_rel.missing_images: 'x' is not a count"),
             ({"benchmarks": {"sugarcrepe": {**good["sugarcrepe"], "cases": {"relation": "10"}}}},
              "benchmarks.sugarcrepe.cases.relation has 2 cases")]
    for run, where in cases:
        (tmp_path / "m.json").write_text(json.dumps(run))
        assert main(["report", f"clip-ft={tmp_path / 'c.json'}", f"macco={tmp_path / 'm.json'}", "--out",
                     str(tmp_path / "o")]) == 2
        assert where in one_line_error(capsys, "report")
        assert not (tmp_path / "o").exists()
    (tmp_path / "afile").write_text("mine")
    assert main(["report", f"clip-ft={tmp_path / 'c.json'}", "--out", str(tmp_path / "afile")]) == 2
    assert "afile: is a file, not a folder (--out)" in one_line_error(capsys, "report")
    assert (tmp_path / "afile").read_text() == "mine"


def test_a_deep_a_latin1_or_a_non_number_probe_report_input_is_one_line_naming_the_file(tmp_path, capsys):
    """#48 item 9: [[[...]]] 100,000 deep was a RecursionError traceback; a probe value "high" a TypeError in the
    mean; a Latin-1 results.json in a folder named only the codec's position, not the file."""
    good = {"sugarcrepe": {"groups": {"relation": 0.5}, "subsets": {"replace_rel": {"n": 4, "accuracy": 0.5}}}}
    (tmp_path / "deep.json").write_text('{"benchmarks": ' + "[" * 100_000 + "]" * 100_000 + "}")
    (tmp_path / "probe.json").write_text(json.dumps({"benchmarks": good, "probes": {"text": {"direction_acc": "high"}}}))
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "results.json").write_bytes(json.dumps({"benchmarks": good, "label": "café"},
                                                               ensure_ascii=False).encode("latin-1"))
    for spec, where in [("deep.json", "deep.json: JSON nested too deep to read"),
                        ("probe.json", "probe.json: probes.text.direction_acc: 'high' is not a finite number"),
                        ("run", "run/results.json: not UTF-8 text (byte 0xe9 at offset ")]:
        assert main(["report", f"macco={tmp_path / spec}", "--out", str(tmp_path / "o")]) == 2
        assert where in one_line_error(capsys, "report")
        assert not (tmp_path / "o").exists()
