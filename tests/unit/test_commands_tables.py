"""macco/commands_tables.py: ``macco sql`` without tables says where it looked."""
from macco.cli import main


def test_sql_without_tables_says_where_it_looked(tmp_path, capsys):
    assert main(["sql", "select 1", "--root", str(tmp_path)]) == 2  # no table: an input error, as for every verb
    assert capsys.readouterr().err.strip() == f"macco sql: no complete tables under {tmp_path}"


def test_report_writes_its_folder_through_the_runner(tmp_path, capsys):
    """``macco report`` runs the report stage's record through ``run_in_folder``: its --out folder is locked while
    written (another writer holding it: one line, exit 2, nothing written)."""
    import json

    from data_schemas import lock_file
    from data_schemas.locks import output_lock
    from tests_support import one_line_error

    res = {"benchmarks": {"sugarcrepe": {"subsets": {"replace_rel": {"n": 10, "accuracy": 0.6}},
                                         "groups": {"relation": 0.6}}}}
    (tmp_path / "r.json").write_text(json.dumps(res))
    out = tmp_path / "o"
    with output_lock(lock_file(out, "output"), out):
        assert main(["report", f"macco={tmp_path / 'r.json'}", "--out", str(out)]) == 2
    assert f"{out}: another macco process is writing it" in one_line_error(capsys, "report")
    assert not (out / "results.md").exists()
    assert main(["report", f"macco={tmp_path / 'r.json'}", "--out", str(out), "--title", "T"]) == 0
    assert (out / "results.md").read_text().startswith("# T")
