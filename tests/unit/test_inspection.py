"""pipeline/inspection.py: ``macco inspect``'s summary and DuckDB file, ``macco sql`` over its views (formats, limits,
errors in one line)."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from macco.cli import main
from tests_support import artifacts_cwd, world_tables_copy as tables  # noqa: F401 (fixtures)


def test_inspect_summary_names_its_columns(tables, capsys):
    assert main(["inspect", str(tables)]) == 0
    out = capsys.readouterr().out
    assert "top_relations:\n  relation | count\n" in out and "masked_patches_per_phrase:\n  grid | mean | min | max" in out


def test_sql_csv_json_and_limit_over_the_inspect_views(world_tables, capsys):
    import duckdb

    root = str(world_tables["root"])
    n_caps = duckdb.sql(f"select count(*) from read_parquet('{world_tables['captions']}/*.parquet')").fetchall()[0][0]
    grids = dict(duckdb.sql(f"select grid, count(*) from read_parquet('{world_tables['patch_masks']}/*.parquet') "
                            "group by grid").fetchall())
    assert n_caps > 5 and grids

    assert main(["sql", "select grid, count(*) n from patch_masks group by grid order by grid", "--root", root,
                 "--csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert {int(r["grid"]): int(r["n"]) for r in rows} == grids

    assert main(["sql", "select caption_id, patch_idx, null as nothing from patch_masks order by all limit 3",
                 "--root", root, "--json"]) == 0
    recs = json.loads(capsys.readouterr().out)
    assert len(recs) == 3 and set(recs[0]) == {"caption_id", "patch_idx", "nothing"}
    assert all(isinstance(i, int) for i in recs[0]["patch_idx"]) and recs[0]["nothing"] is None

    # the table view: at most --limit rows, saying how many were cut; --csv ignores the limit
    assert main(["sql", "select caption_id, caption from captions order by caption_id", "--root", root,
                 "--limit", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["caption_id", "caption"] and len(out) == 2 + 3 + 1
    assert out[-1].startswith(f"(3 of {n_caps} rows shown; {n_caps - 3} cut")
    assert main(["sql", "select caption_id from captions", "--root", root, "--limit", "0"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"({n_caps} rows)"
    assert main(["sql", "select caption_id from captions", "--root", root, "--limit", "3", "--csv"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1 + n_caps


def test_sql_sees_the_views_inspect_writes(world_tables, tmp_path, capsys):
    import duckdb

    root = str(world_tables["root"])
    assert main(["inspect", root, "--db", str(tmp_path / "m.duckdb")]) == 0
    con = duckdb.connect(str(tmp_path / "m.duckdb"), read_only=True, config={"file_search_path": str(tmp_path)})
    names = [v for (v,) in con.sql("select view_name from duckdb_views() where not internal").fetchall()]
    counts = {v: con.sql(f"select count(*) from {v}").fetchall()[0][0] for v in names}
    con.close()
    assert {"captions", "token_masks", "scene_graphs", "regions", "patch_masks"} <= set(counts)
    capsys.readouterr()
    q = " union all ".join(f"select '{v}' v, count(*) n from {v}" for v in names)
    assert main(["sql", q, "--root", root, "--json"]) == 0
    assert {r["v"]: r["n"] for r in json.loads(capsys.readouterr().out)} == counts


@pytest.mark.parametrize("query, says", [
    ("selec * from captions", 'Parser Error: syntax error at or near "selec"'),
    ("select * from no_such_table", "Catalog Error: Table with name no_such_table does not exist!"),
    ("select no_such_column from captions", 'Binder Error: Referenced column "no_such_column" not found'),
    ("select cast(caption as int) from captions", "Conversion Error: Could not convert string"),
])
def test_sql_bad_query_is_one_line_and_exit_2(world_tables, capsys, query, says):
    assert main(["sql", query, "--root", str(world_tables["root"])]) == 2
    cap = capsys.readouterr()
    err = cap.err.rstrip("\n")
    assert "\n" not in err and err.startswith("macco sql: ") and says in err
    assert "Traceback" not in err and cap.out == ""
    if "Catalog" in says:
        assert "(views: captions, errors, patch_masks, regions, scene_graphs, token_masks)" in err


def test_macco_duckdb_follows_new_rows_and_opens_in_the_duckdb_command(artifacts_cwd, capsys):
    """`artifacts/macco.duckdb` named fixed part files: after one more evaluation it still showed the old rows until
    `macco inspect` ran again; and no `duckdb` command came with the install (its format: one that command reads)."""
    import subprocess
    import sys

    from pipeline.inspection import refresh_duckdb

    from model.benchmarks import EvalConfig, append_results

    assert main(["inspect", str(artifacts_cwd)]) == 0
    db = artifacts_cwd / "macco.duckdb"
    duckdb_cli = Path(sys.executable).with_name("duckdb")

    def history_rows() -> str:
        r = subprocess.run([str(duckdb_cli), "-readonly", "-csv", db.name, "-c", "select count(*) from eval_results"],
                           capture_output=True, text=True, cwd=db.parent)  # its views: relative to its folder
        assert r.returncode == 0, r.stderr
        return r.stdout.split()[-1]

    res = {"model": "m", "run": "r", "checkpoint_sha256": "x", "eval_id": "e1", "code_version": "c",
           "created": "2026-12-04T00:00:00.000000Z",
           "benchmarks": {"sugarcrepe": {"subsets": {"s": {"n": 2, "correct": 1, "accuracy": 0.5}}}}}
    append_results(artifacts_cwd / "eval_results", res, EvalConfig())
    refresh_duckdb(artifacts_cwd)
    assert history_rows() == "1"
    append_results(artifacts_cwd / "eval_results", {**res, "eval_id": "e2"}, EvalConfig())
    refresh_duckdb(artifacts_cwd)  # what every flow run and `macco eval --results-table` do
    assert history_rows() == "2"


def test_a_copied_artifacts_folder_opens_its_own_tables_in_macco_duckdb(artifacts_cwd, tmp_path, capsys):
    """#47: macco.duckdb's views named absolute part paths: a copied artifacts/ read the original's tables (or none
    once the original was gone). Copied after `macco inspect`, the original deleted: the copy's file reads the copy."""
    import shutil
    import subprocess
    import sys

    import duckdb

    assert main(["inspect", str(artifacts_cwd)]) == 0
    copy = tmp_path / "elsewhere" / "artifacts"
    shutil.copytree(artifacts_cwd, copy)
    shutil.rmtree(artifacts_cwd)
    con = duckdb.connect(str(copy / "macco.duckdb"), read_only=True, config={"file_search_path": str(copy)})
    assert con.execute("select count(*) from captions").fetchone()[0] > 0
    con.close()
    r = subprocess.run([str(Path(sys.executable).with_name("duckdb")), "-readonly", "-csv", "macco.duckdb", "-c",
                        "select count(*) from patch_masks"], capture_output=True, text=True, cwd=copy)
    assert r.returncode == 0 and int(r.stdout.split()[-1]) > 0, r.stderr
