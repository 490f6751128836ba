"""Faults against ``macco validate`` (pipeline/validate.py): a folder holding another table's manifest is refused; a
hand-edited manifest is named (against its stage's record, and its own per-part entries)."""
from __future__ import annotations

import json
import shutil

from macco.cli import main
from tests_support import captions_and_errors_tables as tables  # noqa: F401 (fixtures)


def test_a_folder_holding_another_tables_manifest_is_refused_not_skipped(tables, capsys):
    """A manifest whose `table` field names another table made validate skip that table's checks and pass."""
    shutil.copytree(tables / "captions", tables / "regions")
    m = json.loads((tables / "regions" / "manifest.json").read_text())
    assert m["table"] == "captions"
    assert main(["validate", str(tables)]) == 2
    assert "the folder 'regions' holds a manifest of table 'captions'" in capsys.readouterr().err


def test_validate_compares_a_stage_folders_manifests_with_its_record(tables, capsys):
    """#48: change a table's `content_hash` (or drop a part from its manifest and lower `rows`): `macco validate`
    passed; only `--deep` noticed. A table a flow stage wrote is compared with the stage's record (no byte of a
    part read): one line naming the manifest and what differs."""
    from data_schemas import read_manifest
    from flows.catalog import table_entry
    from flows.runner import write_stage

    write_stage(tables, {"stage": "captions", "outputs": {n: table_entry(read_manifest(tables / n), tables / n)
                                                          for n in ("captions", "errors")}})
    assert main(["validate", str(tables)]) == 0
    capsys.readouterr()
    mpath = tables / "captions" / "manifest.json"
    original = json.loads(mpath.read_text())
    mpath.write_text(json.dumps({**original, "content_hash": "f" * 64}))
    assert main(["validate", str(tables)]) == 2
    err = capsys.readouterr().err
    assert f"table captions: {mpath} says content_hash '{'f' * 64}' (the stage recorded " in err, err
    assert err.count("\n") == 1 and "Traceback" not in err
    mpath.write_text(json.dumps(original))
    assert main(["validate", str(tables)]) == 0


def test_validate_refuses_a_manifest_that_drops_a_part_without_a_stage_record(tmp_path, capsys):
    """The same edit in a folder a verb wrote (no stage record): the manifest's own per-part entries still record
    the dropped part, so validate names it instead of passing on the rows that are left."""
    from data_schemas import TABLES, write_table
    from tests_support import error_rows

    d = tmp_path / "errors"
    write_table(TABLES["errors"], d, TABLES["errors"].from_rows(error_rows(6)), rows_per_part=3)
    assert main(["validate", str(d)]) == 0
    capsys.readouterr()
    m = json.loads((d / "manifest.json").read_text())
    (d / "manifest.json").write_text(json.dumps({**m, "parts": m["parts"][:1], "rows": 3}))
    assert main(["validate", str(d)]) == 2
    assert "part_info records part-00001.parquet (3 rows), which parts does not list" in capsys.readouterr().err


def test_validate_of_the_history_folder_itself_checks_it(tmp_path, capsys):
    """#47: `macco validate tiny/eval_results` (the table's own folder, not a root above it) was a TypeError
    traceback in folder_catalog (the history given as one folder, not the list a root gives)."""
    from model.benchmarks import EvalConfig, append_results
    from tests_support import evaluation

    append_results(tmp_path / "eval_results", evaluation("a"), EvalConfig())
    assert main(["validate", str(tmp_path / "eval_results")]) == 0
    assert "eval_results" in capsys.readouterr().out
