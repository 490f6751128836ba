"""Faults in tables on disk (data_schemas/_read.py): damaged, edited or missing parts and hand-edited manifests are
never served as complete and are named (table and part); an unreadable table is never overwritten."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data_schemas import TABLES, TableError, _read, is_complete, read_table, write_table
from macco.cli import main
from tests_support import error_rows, evaluation, strict_one_line_error as one_line_error
from tests_support import captions_and_errors_tables as tables  # noqa: F401 (fixtures)


def _edit_in_place(part: Path) -> None:
    """Flip bytes inside a part, keeping its size and restoring its mtime (what a size/mtime check trusts)."""
    st = part.stat()
    data = bytearray(part.read_bytes())
    for i in range(len(data) // 3, len(data) // 3 + 200):
        data[i] ^= 0xFF
    part.write_bytes(bytes(data))
    os.utime(part, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.fixture()
def table(tmp_path):
    """An ``errors`` table of 6 rows in two parts of 3."""
    spec = TABLES["errors"]
    d = tmp_path / "errors"
    write_table(spec, d, spec.from_rows(error_rows(6)), rows_per_part=3)
    assert is_complete(d) and len(list(d.glob("part-*.parquet"))) == 2
    return d


def eval_rows(model_id: str) -> list[dict]:
    from datetime import datetime, timezone

    return [dict(eval_id="e0", run=model_id, benchmark="sugarcrepe", level="subset", subset="swap_att",
                 model_id=model_id, n=10, correct=7, metric="accuracy", accuracy=0.7, ties=0, missing_images=0,
                 checkpoint_sha256="abc",
                 config="{}", config_key="k", protocol="authors", activation="gelu", code_version="c",
                 created=datetime(2026, 1, 1, tzinfo=timezone.utc), trigger="macco eval")]


def eval_out(model_id: str) -> dict:
    """An evaluation result as ``model.benchmarks.evaluate`` returns it (what ``append_results`` appends)."""
    return {"model": model_id, "run": model_id, "checkpoint_sha256": "def", "eval_id": f"e-{model_id}",
            "code_version": "c", "created": "2026-01-02T00:00:00.000000Z",
            "benchmarks": {"sugarcrepe": {"subsets": {"swap_att": {"n": 10, "accuracy": 0.5}}}}}


def test_a_part_edited_in_place_is_named_by_validate(tables, capsys):
    """The issue: a same-size edit with the mtime restored made validate die with DuckDB's 'Corrupted file?'
    naming no table or file."""
    part = tables / "captions" / "part-00000.parquet"
    _edit_in_place(part)
    assert main(["validate", str(tables)]) == 2
    err = one_line_error(capsys, "validate")
    assert "table captions" in err and "part-00000.parquet" in err
    assert main(["validate", str(tables), "--deep"]) == 2
    assert "part-00000.parquet has sha256" in one_line_error(capsys, "validate")


def test_a_damaged_part_read_by_sql_is_named(tables, capsys):
    _edit_in_place(tables / "captions" / "part-00000.parquet")
    assert main(["sql", "select * from captions", "--root", str(tables), "--csv"]) == 2
    err = one_line_error(capsys, "sql")
    assert "table captions" in err and "part-00000.parquet" in err


def test_validate_deep_passes_on_untouched_tables(tables, capsys):
    assert main(["validate", str(tables), "--deep"]) == 0
    assert "every part of 2 table(s) is as written" in capsys.readouterr().out


def test_an_append_never_replaces_a_folder_that_is_not_a_table(tmp_path):
    """`--results-table artifacts` (a folder of the user's, tables in its subfolders) was replaced by a new table:
    every file in it deleted. A non-empty folder without a manifest is refused, one line, untouched."""
    from data_schemas import TableError
    from model.benchmarks import EvalConfig, append_results

    folder = tmp_path / "artifacts"
    (folder / "runA").mkdir(parents=True)
    (folder / "runA" / "results.json").write_text("{}")
    (folder / "notes.md").write_text("mine")
    with pytest.raises(TableError, match="is not a table .* refusing to replace it"):
        append_results(folder, evaluation("base"), EvalConfig())
    assert sorted(p.name for p in folder.rglob("*")) == ["notes.md", "results.json", "runA"]
    empty = tmp_path / "empty"
    empty.mkdir()
    append_results(empty, evaluation("base"), EvalConfig())  # an empty folder becomes the table
    assert len(read_table(TABLES["eval_results"], empty)) == 2


def test_a_manifest_listing_parts_outside_its_table_is_refused(tables, tmp_path, capsys):
    """A manifest can make `macco sql` serve another folder's file: parts listed outside the table were read."""
    other = tmp_path / "other"
    shutil.copytree(tables / "captions", other)
    m = json.loads((tables / "captions" / "manifest.json").read_text())
    m["parts"] = [f"../../other/{m['parts'][0]}"]
    (tables / "captions" / "manifest.json").write_text(json.dumps(m))
    assert main(["sql", "select count(*) from captions", "--root", str(tables)]) == 2
    err = capsys.readouterr().err
    assert "lists part '../../other/part-00000.parquet', not a part file of this folder" in err


@pytest.mark.parametrize("content", [b"[1, 2]", b"\xff\xfe\x00", b'{"table": "capt'])
def test_an_unreadable_manifest_given_as_root_is_one_line(tmp_path, capsys, content):
    """A JSON list, non-UTF-8 or truncated manifest given as --root was a traceback."""
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "manifest.json").write_bytes(content)
    for verb in (["sql", "select 1", "--root"], ["validate"], ["inspect"]):
        assert main([*verb, str(tmp_path / "t")]) == 2
        err = capsys.readouterr().err
        assert "manifest.json: not valid JSON" in err and len(err.strip().splitlines()) == 1


def test_part_with_rows_removed_is_not_complete(table):
    part = table / "part-00000.parquet"
    pq.write_table(pq.read_table(part).slice(0, 2), part)  # the manifest still says 3 + 3
    assert not is_complete(table)
    with pytest.raises(TableError, match=rf"{table}.*part-00000.parquet has 2 rows, manifest.json says 3"):
        read_table(TABLES["errors"], table)


def test_part_with_changed_content_is_not_complete(table):
    part = table / "part-00001.parquet"
    t = pq.read_table(part)
    pq.write_table(t.set_column(3, "message", pa.array(["changed"] * t.num_rows)), part)  # same row count
    assert not is_complete(table)
    with pytest.raises(TableError, match=rf"{table}: the parts' content hash .* differs from manifest.json"):
        read_table(TABLES["errors"], table)


def test_garbage_part_names_table_and_file_and_is_not_complete(table):
    (table / "part-00001.parquet").write_bytes(b"garbage")  # 7 bytes
    assert not is_complete(table)
    with pytest.raises(TableError, match=rf"{table}: part-00001.parquet is not a readable Parquet file"):
        read_table(TABLES["errors"], table)


def test_missing_part_is_not_complete(table):
    (table / "part-00000.parquet").unlink()
    assert not is_complete(table)
    with pytest.raises(TableError, match="part-00000.parquet listed in .*manifest.json is missing"):
        read_table(TABLES["errors"], table)


def test_unchanged_table_is_not_rehashed_and_a_touched_one_once(table, monkeypatch):
    calls = []
    orig = _read._sha256_files

    def counting(paths):
        calls.append(1)
        return orig(paths)

    monkeypatch.setattr(_read, "_sha256_files", counting)
    assert is_complete(table) and read_table(TABLES["errors"], table).num_rows == 6
    assert calls == []  # the parts are as the writer hashed them (size, mtime in the manifest)
    for p in table.glob("part-*.parquet"):  # e.g. copied without keeping mtimes: hashed once, then cached
        os.utime(p, ns=(p.stat().st_atime_ns, p.stat().st_mtime_ns + 10**9))
    assert is_complete(table) and is_complete(table) and read_table(TABLES["errors"], table).num_rows == 6
    assert calls == [1]


def test_eval_results_with_unreadable_manifest_is_not_replaced(tmp_path):
    from model.benchmarks import EvalConfig, append_results

    spec = TABLES["eval_results"]
    d = tmp_path / "eval_results"
    write_table(spec, d, spec.from_rows(eval_rows("old")))
    (d / "manifest.json").write_text('{"table": "eval_results", "rows": ')  # truncated by a full disk
    parts = sorted(p.name for p in d.glob("part-*.parquet"))
    with pytest.raises(TableError, match=rf"{d / 'manifest.json'}: not valid JSON.*move it aside"):
        append_results(d, eval_out("new"), EvalConfig())
    with pytest.raises(TableError, match="move it aside"):
        write_table(spec, d, spec.from_rows(eval_rows("other")))
    assert sorted(p.name for p in d.glob("part-*.parquet")) == parts  # the history is still there
    assert pq.read_table(d / parts[0]).column("model_id").to_pylist() == ["old"]


def test_eval_results_with_a_damaged_part_is_not_replaced_by_an_append(tmp_path):
    from model.benchmarks import EvalConfig, append_results

    spec = TABLES["eval_results"]
    d = tmp_path / "eval_results"
    write_table(spec, d, spec.from_rows(eval_rows("old")))
    part = next(d.glob("part-*.parquet"))
    part.write_bytes(b"garbage")  # the manifest still reads
    with pytest.raises(TableError, match=part.name):
        append_results(d, eval_out("new"), EvalConfig())
    assert part.read_bytes() == b"garbage"  # not overwritten with the new rows alone


def test_parts_without_manifest_are_not_replaced(tmp_path):
    spec = TABLES["eval_results"]
    d = tmp_path / "eval_results"
    write_table(spec, d, spec.from_rows(eval_rows("old")))
    (d / "manifest.json").unlink()
    with pytest.raises(TableError, match=rf"{d}: holds Parquet parts but no manifest.json.*move it aside"):
        write_table(spec, d, spec.from_rows(eval_rows("new")))
    assert pq.read_table(next(d.glob("*.parquet"))).column("model_id").to_pylist() == ["old"]


def test_a_damaged_table_with_a_readable_manifest_is_rewritten(table):
    """A stage's output with a bad part is recomputed by rerunning the stage (its manifest says what it was)."""
    (table / "part-00001.parquet").write_bytes(b"garbage")
    spec = TABLES["errors"]
    write_table(spec, table, spec.from_rows(error_rows(4)))
    assert is_complete(table) and read_table(spec, table).num_rows == 4


def test_a_manifest_that_drops_a_part_and_lowers_rows_is_not_complete_and_named(table):
    """#48: drop one listed part and lower `rows` to match: the table was complete (every stage Cached, validate
    passed), its rows silently lost. The manifest's per-part entries still record the dropped part: named, no byte
    of a part read."""
    mpath = table / "manifest.json"
    original = json.loads(mpath.read_text())
    m = {**original, "parts": original["parts"][:1], "rows": 3}
    mpath.write_text(json.dumps(m))
    assert not is_complete(table)
    with pytest.raises(TableError, match=r"part_info records part-00001.parquet \(3 rows\), which parts does not "
                                         r"list \(a part dropped from the manifest\?\)"):
        read_table(TABLES["errors"], table)
    mpath.write_text(json.dumps({**original, "rows": 5,
                                 "part_info": {**original["part_info"],
                                               "part-00001.parquet": {**original["part_info"]["part-00001.parquet"],
                                                                      "rows": 2}}}))
    with pytest.raises(TableError, match=r"part-00001.parquet has 3 rows, manifest.json says 2"):
        read_table(TABLES["errors"], table)
    mpath.write_text(json.dumps({**original, "rows": 5}))
    with pytest.raises(TableError, match=r"rows is 5, its parts' entries record 6"):
        read_table(TABLES["errors"], table)
    mpath.write_text(json.dumps(original))
    assert is_complete(table) and read_table(TABLES["errors"], table).num_rows == 6
