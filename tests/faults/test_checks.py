"""Faults in the table checks (data_schemas/checks.py): a table of 0 rows passed every check (each passes vacuously
on no row), so an empty source reached training."""
from __future__ import annotations

from data_schemas import TABLES, write_table
from macco.cli import main


def test_validate_fails_on_an_empty_table_unless_the_params_allow_it(tmp_path, capsys):
    write_table(TABLES["captions"], tmp_path / "captions", TABLES["captions"].from_rows([]))
    write_table(TABLES["errors"], tmp_path / "errors", TABLES["errors"].from_rows([]))  # empty: its good state
    assert main(["validate", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert "FAILED: 1 check(s): captions.not_empty" in err, err
    assert f"{tmp_path / 'captions'} holds 0 rows (validate.params allow_empty_tables: true accepts" in err
    assert main(["validate", str(tmp_path), "--params", "allow_empty_tables=true"]) == 0
    assert "checks passed" in capsys.readouterr().out
