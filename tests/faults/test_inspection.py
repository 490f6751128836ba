"""Faults against ``macco sql`` (pipeline/inspection.py): it is read-only, reads no file outside its tables, and a
query's own error is not blamed on the tables."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from macco.cli import main
from tests_support import strict_one_line_error as one_line_error
from tests_support import captions_and_errors_tables as tables  # noqa: F401 (fixtures)


@pytest.mark.parametrize("statement", [
    "copy (select * from captions limit 1) to '{part}' (format parquet)",  # the issue: 240 rows -> 1, exit 0
    "attach '{tmp}/other.duckdb' as other",
    "create table t as select 1",
    "insert into captions values (1)",
    "copy (select 1) to '{tmp}/anywhere.csv'",
    "set enable_external_access = true",
    "pragma version",
    "install httpfs",
    "select 1; select 2",
    # EXPLAIN ANALYZE runs its statement: the parts are the one path DuckDB lets a query touch
    "explain analyze copy (select * from captions limit 1) to '{part}' (format parquet, use_tmp_file false)",
    "/* a comment */ explain analyze copy (select 1) to '{part}' (format parquet, use_tmp_file false)",
])
def test_sql_refuses_every_statement_that_writes_or_reaches_out(tables, tmp_path, capsys, statement):
    part = tables / "captions" / "part-00000.parquet"
    before = part.read_bytes()
    assert main(["sql", statement.format(part=part, tmp=tmp_path), "--root", str(tables)]) == 2
    err = one_line_error(capsys, "sql")
    assert "read-only" in err or "one query at a time" in err
    assert part.read_bytes() == before and not (tmp_path / "other.duckdb").exists()
    assert not (tmp_path / "anywhere.csv").exists()
    assert main(["validate", str(tables)]) == 0


@pytest.mark.parametrize("function", ["read_csv('/etc/hostname')", "read_text('/etc/hostname')",
                                      "glob('/etc/*')", "read_parquet('{tmp}/w/world.json')"])
def test_sql_cannot_read_files_outside_its_tables(tables, tmp_path, capsys, function):
    assert main(["sql", f"select * from {function.format(tmp=tmp_path)}", "--root", str(tables)]) == 2
    assert "file system operations are disabled" in one_line_error(capsys, "sql")
    assert main(["sql", "select count(*) n from captions", "--root", str(tables), "--csv"]) == 0  # reads still work
    assert capsys.readouterr().out.split() == ["n", "60"]


def test_sql_reading_a_sound_part_as_csv_is_the_querys_error_not_a_damaged_table(tables, capsys):
    """`read_csv` of a valid part was reported as "DuckDB could not read the parts of table captions"; and DuckDB's
    ./.tmp/ folder was among the readable ones."""
    part = next((tables / "captions").glob("part-*.parquet"))
    assert main(["sql", f"select * from read_csv('{part}')", "--root", str(tables)]) == 2
    err = capsys.readouterr().err
    assert "could not read the parts" not in err and "macco sql:" in err
    (tables / ".tmp").mkdir()
    (tables / ".tmp" / "x.csv").write_text("a,b\n1,2\n")
    os_cwd = Path.cwd()
    try:
        os.chdir(tables)
        assert main(["sql", "select * from read_csv('.tmp/x.csv')", "--root", str(tables)]) == 2
        assert "Permission Error" in capsys.readouterr().err
    finally:
        os.chdir(os_cwd)


def test_a_query_that_runs_forever_stops_at_its_time_limit_in_one_line(tables, capsys):
    """`macco sql` had no time limit: a recursive CTE without an end ran until killed."""
    import inspect
    import time

    from pipeline.inspection import query

    forever = "with recursive t(n) as (select 1 union all select n + 1 from t) select count(*) from t"
    start = time.monotonic()
    assert main(["sql", forever, "--root", str(tables), "--timeout", "1"]) == 2
    assert time.monotonic() - start < 30
    assert "the query ran past its time limit of 1 s (--timeout) and was stopped" in one_line_error(capsys, "sql")
    assert inspect.signature(query).parameters["timeout"].default == 60  # a limit without the flag too
    assert main(["sql", "select count(*) n from captions", "--root", str(tables), "--csv", "--timeout", "1"]) == 0
    assert capsys.readouterr().out.split() == ["n", "60"]
    assert main(["sql", "select 1", "--root", str(tables), "--timeout", "-1"]) == 2
    assert "--timeout -1: seconds >= 0 expected" in one_line_error(capsys, "sql")
