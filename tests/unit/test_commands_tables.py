"""macco/commands_tables.py: ``macco sql`` without tables says where it looked."""
from macco.cli import main


def test_sql_without_tables_says_where_it_looked(tmp_path, capsys):
    assert main(["sql", "select 1", "--root", str(tmp_path)]) == 2  # no table: an input error, as for every verb
    assert capsys.readouterr().err.strip() == f"macco sql: no complete tables under {tmp_path}"
