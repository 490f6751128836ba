"""``macco sql`` and ``macco report``, and the README's DuckDB inspection commands run as written."""
import csv
import io
import json
import shlex
import shutil
from pathlib import Path

import pytest

from macco.cli import main
from pipeline.report import CHANCE, collect, load_results, results_figure, write_report

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_blocks(heading: str) -> list[tuple[str, str]]:
    """(language, code) of the fenced blocks under ``heading``, up to the next heading outside a block."""
    lines = README.read_text().splitlines()
    blocks, fence = [], None
    for ln in lines[lines.index(heading) + 1:]:
        if fence is None and ln.startswith("#"):
            break
        if ln.startswith("```"):
            if fence is None:
                fence = (ln[3:].strip(), [])
            else:
                blocks.append((fence[0], "\n".join(fence[1]) + "\n"))
                fence = None
        elif fence is not None:
            fence[1].append(ln)
    return blocks


def readme_commands(heading: str, verb: str) -> list[list[str]]:
    """The ``macco <verb>`` lines of the section's bash blocks, as argv for ``main`` (comments dropped)."""
    lines = [ln for lang, code in readme_blocks(heading) if lang == "bash" for ln in code.splitlines()]
    return [shlex.split(ln, comments=True)[1:] for ln in lines if ln.startswith(f"macco {verb} ")]


DUCKDB_HEADING = "### Inspecting the mask tables in DuckDB"


@pytest.fixture()
def artifacts_cwd(world_tables, tmp_path, monkeypatch):
    """A copy of the session tables as ``artifacts/`` in a fresh working directory (the README's paths)."""
    shutil.copytree(world_tables["root"], tmp_path / "artifacts")
    monkeypatch.chdir(tmp_path)
    return tmp_path / "artifacts"


def test_readme_python_duckdb_block_runs_as_written(artifacts_cwd, capsys):
    """The README's ``macco inspect`` line writes artifacts/macco.duckdb; its Python block's queries run on it."""
    inspect = readme_commands(DUCKDB_HEADING, "inspect")
    assert inspect == [["inspect", "artifacts/"]]
    assert main(inspect[0]) == 0
    assert (artifacts_cwd / "macco.duckdb").exists()
    capsys.readouterr()
    code = [c for lang, c in readme_blocks(DUCKDB_HEADING) if lang == "python"]
    assert len(code) == 1 and 'duckdb.connect("artifacts/macco.duckdb"' in code[0]
    exec(compile(code[0], "README.md", "exec"), {})
    out = capsys.readouterr().out
    # one printed relation per query: grid averages, relation words, unmatched captions, one caption's concepts
    assert out.count("┌") == code[0].count(".show()") == 4
    assert "avg(len(patch_idx))" in out and "box_xyxy" in out


def test_readme_sql_line_runs_as_written(artifacts_cwd, capsys):
    """The README's ``macco sql`` line, from the directory holding artifacts/ (the default root)."""
    import duckdb

    sql = readme_commands(DUCKDB_HEADING, "sql")
    assert len(sql) == 1 and "--root" not in sql[0]
    assert main(sql[0]) == 0
    out = capsys.readouterr().out.splitlines()
    cols = duckdb.sql(f"select * from read_parquet('{artifacts_cwd}/ground/patch_masks/*.parquet') limit 0").columns
    assert out[0].split() == cols and out[-1] == "(5 rows)" and len(out) == 2 + 5 + 1


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
    con = duckdb.connect(str(tmp_path / "m.duckdb"), read_only=True)
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


def test_sql_without_tables_says_where_it_looked(tmp_path, capsys):
    assert main(["sql", "select 1", "--root", str(tmp_path)]) == 2  # no table: an input error, as for every verb
    assert capsys.readouterr().err.strip() == f"macco sql: no complete tables under {tmp_path}"


# ---- report ----------------------------------------------------------------------------------------------------
def eval_json(label: str | None, whatsup: str, vgr: str = "1100") -> dict:
    """An evaluation result as ``macco eval --out`` / the evaluate stage write it: What's Up and VG-R groups
    with their per-case strings ('1' right, '0' wrong)."""
    res = {"model": "macco-micro", "benchmarks": {
        "whatsup": {"subsets": {"controlled_a": {"n": len(whatsup)}},
                    "groups": {"whatsup_macro": whatsup.count("1") / len(whatsup)},
                    "cases": {"whatsup_macro": whatsup}},
        "aro-vgr": {"subsets": {"on": {"n": len(vgr)}}, "groups": {"macro": vgr.count("1") / len(vgr)},
                    "cases": {"macro": vgr}}}}
    if label is not None:
        res["label"] = label
    return res


def test_report_says_spread_only_with_several_seeds(tmp_path):
    one = {"clip-ft": [eval_json("clip-ft-s0", "000")], "macco": [eval_json("macco-s0", "110")]}
    md = Path(write_report(one, tmp_path / "one", "t")["markdown"]).read_text()
    assert "Accuracy in %; one seed per model: no spread estimate." in md
    assert "standard deviation" not in md and "±" not in md
    two = {**one, "macco": [eval_json("macco-s0", "110"), eval_json("macco-s1", "111")]}
    md = Path(write_report(two, tmp_path / "two", "t")["markdown"]).read_text()
    assert "Accuracy in %; ± is the standard deviation over seeds." in md and "no spread estimate" not in md
    assert "| What's Up controlled | 3 | 25 | 0.0 | 83.3 ± 23.6 |" in md


def test_results_figure_puts_n_under_each_group_and_a_chance_line_per_group():
    results = {"clip-ft": [eval_json("clip-ft-s0", "0x01", "10")],
               "macco": [eval_json("macco-s0", "1x10", "11"), eval_json("macco-s1", "1x11", "01")]}
    table = collect(results)
    names = ["ARO VG-Relation (macro)", "What's Up controlled"]
    fig = results_figure(table, names, "t")
    ax = fig.axes[0]
    # n: the cases the group pools (What's Up: one case with a missing image left out)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["ARO VG-Relation (macro)\n(n=2)",
                                                            "What's Up controlled\n(n=3)"]
    chance = [c for c in ax.collections if c.get_label() == "chance"]
    assert len(chance) == 1
    segs = [tuple(map(tuple, s)) for s in chance[0].get_segments()]
    assert segs == [((i - 0.45, 100 * CHANCE[n]), (i + 0.45, 100 * CHANCE[n])) for i, n in enumerate(names)]
    assert [s[0][1] for s in segs] == [50, 25]


def write_eval(path: Path, res: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(res))
    return path


def test_report_verb_pairs_seeds_by_run_name(tmp_path, capsys):
    ctrl0 = write_eval(tmp_path / "e" / "c0" / "results.json", eval_json("clip-ft-s0", "000"))
    ctrl1 = write_eval(tmp_path / "e" / "c1.json", eval_json("clip-ft-s1", "111"))
    m1 = write_eval(tmp_path / "e" / "m1.json", eval_json("macco-s1", "111"))
    m0 = write_eval(tmp_path / "e" / "m0.json", eval_json("macco-s0", "110"))
    out = tmp_path / "rep"
    # the control's seed 0 as an evaluate stage directory; macco's seeds out of order
    assert main(["report", f"clip-ft={ctrl0.parent}", f"clip-ft={ctrl1}", f"macco={m1}", f"macco={m0}",
                 "--out", str(out), "--title", "T"]) == 0
    assert f"wrote {out / 'results.md'}" in capsys.readouterr().out
    md = (out / "results.md").read_text()
    assert md.startswith("# T\n") and "| clip-ft (2 seeds) | macco (2 seeds) |" in md
    assert "### macco vs clip-ft: paired tests over 2 seed pair(s)" in md
    # paired by seed: (110 vs 000), (111 vs 111) -> 2 model-only right, 0 control-only (by order it would be 3 / 1)
    assert "| What's Up controlled | 3 | 6 | 2 | 0 |" in md
    assert (out / "results.png").stat().st_size > 0 and (out / "results.json").exists()


def test_report_verb_without_run_names_pairs_by_order(tmp_path, capsys):
    files = [write_eval(tmp_path / f"{k}.json", eval_json(None, bits))
             for k, bits in (("c0", "000"), ("c1", "111"), ("m0", "111"), ("m1", "110"))]
    assert main(["report", f"clip-ft={files[0]}", f"clip-ft={files[1]}", f"macco={files[2]}", f"macco={files[3]}",
                 "--out", str(tmp_path / "rep")]) == 0
    assert "| What's Up controlled | 3 | 6 | 3 | 1 |" in (tmp_path / "rep" / "results.md").read_text()
    assert load_results([f"macco={files[2]}"]) == {"macco": [eval_json(None, "111")]}


def test_report_verb_errors_are_one_line(tmp_path, capsys):
    good = write_eval(tmp_path / "good.json", eval_json("macco-s0", "110"))
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "empty").mkdir()
    write_report({"macco": [eval_json("macco-s0", "110")]}, tmp_path / "rep", "t")
    out = ["--out", str(tmp_path / "o")]
    cases = [
        ([str(good)], f"bad results spec {str(good)!r}: expected LABEL=PATH"),
        (["=" + str(good)], "expected LABEL=PATH"),
        (["macco="], "expected LABEL=PATH"),
        ([f"macco={tmp_path / 'missing.json'}"], f"macco: no such file {tmp_path / 'missing.json'}"),
        ([f"macco={tmp_path / 'empty'}"], f"macco: no such file {tmp_path / 'empty' / 'results.json'}"),
        ([f"macco={tmp_path / 'bad.json'}"], f"{tmp_path / 'bad.json'}: not valid JSON"),
        ([f"macco={tmp_path / 'rep'}"], "not an evaluation results.json"),
        ([f"macco={good}", f"macco={good}"], f"macco: seed 0 given more than once ({good}, {good})"),
    ]
    for specs, says in cases:
        assert main(["report", *specs, *out]) == 2, specs
        err = capsys.readouterr().err.rstrip("\n")
        assert "\n" not in err and err.startswith("macco report: ") and says in err, (specs, err)
    assert not (tmp_path / "o").exists()
    # a control that was not given is said on stderr, and the report still written
    assert main(["report", f"macco={good}", f"other={good}", *out, "--control", "base-ft"]) == 0
    assert "no results labelled 'base-ft' (--control): no paired tests" in capsys.readouterr().err
    assert "No paired tests: the control 'base-ft' was not evaluated." in (tmp_path / "o" / "results.md").read_text()


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
        r = subprocess.run([str(duckdb_cli), "-readonly", "-csv", str(db), "-c", "select count(*) from eval_results"],
                           capture_output=True, text=True)
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
