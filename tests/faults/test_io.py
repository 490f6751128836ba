"""#28, the data record never loses a row: the evaluation history is append-only, `macco sql` is read-only, one
stage's errors never remove another's, a part edited in place is named. Each test injects exactly one fault from
the issue and fails on the code before the fix."""
from __future__ import annotations

import json
import multiprocessing
import os
import shutil
from pathlib import Path

import pytest

from data_schemas import TABLES, read_table, write_table
from macco.cli import main


def one_line_error(capsys, verb: str) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1 and err.startswith(f"macco {verb}: "), err
    return err


def evaluation(run: str, subsets: int = 2) -> dict:
    """One evaluation's result as ``model.benchmarks.evaluate`` returns it."""
    import uuid

    return {"model": "macco-micro", "run": run, "checkpoint_sha256": f"sha-{run}", "eval_id": uuid.uuid4().hex,
            "code_version": "c", "created": "2026-12-03T00:00:00.000000Z", "activation": "gelu",
            "benchmarks": {"sugarcrepe": {"subsets": {f"s{i}": {"n": 10, "correct": i, "accuracy": i / 10}
                                                      for i in range(subsets)}}}}


# ---- the evaluation history --------------------------------------------------------------------------------
def _append_many(table_dir: str, run: str, times: int, start) -> None:
    from model.benchmarks import EvalConfig, append_results

    start.wait()  # both writers start together
    for _ in range(times):
        append_results(table_dir, evaluation(run), EvalConfig())


def test_two_processes_appending_at_once_keep_every_row(tmp_path):
    """The issue: two processes each appending 60 rows through --results-table kept 64 of 120."""
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(2)
    table = str(tmp_path / "eval_results")
    procs = [ctx.Process(target=_append_many, args=(table, run, 30, start)) for run in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    rows = read_table(TABLES["eval_results"], table).to_pylist()
    assert len(rows) == 120 and sum(r["run"] == "a" for r in rows) == 60
    assert len({r["eval_id"] for r in rows}) == 60  # 30 evaluations per process, 2 subsets each
    m = json.loads((Path(table) / "manifest.json").read_text())
    assert m["rows"] == 120 and len(m["parts"]) == 60  # one part per evaluation, never rewritten


def test_an_append_never_rewrites_the_earlier_parts(tmp_path):
    from model.benchmarks import EvalConfig, append_results

    table = tmp_path / "eval_results"
    append_results(table, evaluation("base"), EvalConfig())
    first = {p.name: p.read_bytes() for p in table.glob("part-*.parquet")}
    append_results(table, evaluation("base"), EvalConfig())
    assert all((table / name).read_bytes() == data for name, data in first.items())
    assert len(read_table(TABLES["eval_results"], table)) == 4


def test_a_version_1_table_is_upgraded_with_its_rows_and_read_in_the_view(tmp_path, capsys):
    """A history written before the run/eval_id columns keeps its rows: appended to, every old row is carried
    into the new schema; read by `macco sql` as it is, its rows appear with run = its model_id."""
    from data_schemas.eval_results import LEGACY_SPEC
    from model.benchmarks import EvalConfig, append_results

    old = [dict(benchmark="sugarcrepe", subset="swap_att", model_id="old-model", n=10, correct=7, accuracy=0.7,
                ties=0, missing_images=0, checkpoint_sha256="abc", config='{"protocol": "authors"}',
                created="2026-01-01T00:00:00Z")]
    write_table(LEGACY_SPEC, tmp_path / "legacy" / "eval_results", LEGACY_SPEC.from_rows(old))
    write_table(LEGACY_SPEC, tmp_path / "upgraded" / "eval_results", LEGACY_SPEC.from_rows(old))
    assert main(["sql", "select run, protocol, accuracy from eval_results", "--root", str(tmp_path / "legacy"),
                 "--csv"]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == ["old-model,authors,0.7"]
    append_results(tmp_path / "upgraded" / "eval_results", evaluation("new"), EvalConfig())
    rows = read_table(TABLES["eval_results"], tmp_path / "upgraded" / "eval_results").to_pylist()
    assert sorted(r["run"] for r in rows) == ["new", "new", "old-model"]


# ---- macco sql is read-only --------------------------------------------------------------------------------
@pytest.fixture()
def tables(tmp_path):
    """A captions table and an errors table under tmp_path/T (as `macco captions --out T` writes them)."""
    from pipeline.world import WorldConfig, generate_world

    generate_world(tmp_path / "w", WorldConfig(seed=1, images=6, size=32, eval_fraction=0.5, benchmarks=False))
    assert main(["captions", str(tmp_path / "w"), "--out", str(tmp_path / "T")]) == 0
    return tmp_path / "T"


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


# ---- one stage's errors never remove another's --------------------------------------------------------------
def test_parse_after_captions_in_one_folder_keeps_the_captions_errors(tmp_path, capsys):
    """The README's sequence: `macco captions --out T` then `macco parse T/captions --out T` replaced the
    captions stage's errors table; its missing_image rows were gone."""
    from pipeline.world import WorldConfig, generate_world

    w = tmp_path / "w"
    generate_world(w, WorldConfig(seed=1, images=6, size=32, eval_fraction=0.5, benchmarks=False))
    victim = sorted((w / "train2014").iterdir())[0]
    victim.unlink()
    t = tmp_path / "T"
    assert main(["captions", str(w), "--out", str(t)]) == 0
    missing = {e["item_id"] for e in read_table(TABLES["errors"], t / "errors").to_pylist()}
    assert len(missing) == 5  # the image's five captions
    assert main(["parse", str(t / "captions"), "--out", str(t), "--model", "macco-micro"]) == 0
    errs = read_table(TABLES["errors"], t / "errors").to_pylist()
    assert {e["item_id"] for e in errs if e["reason"] == "missing_image"} == missing
    assert main(["captions", str(w), "--out", str(t)]) == 0  # a rerun replaces its own rows only
    errs = read_table(TABLES["errors"], t / "errors").to_pylist()
    assert sorted(e["item_id"] for e in errs if e["stage"] == "captions") == sorted(missing)
    capsys.readouterr()
    assert main(["validate", str(t)]) == 0


# ---- a part edited in place --------------------------------------------------------------------------------
def _edit_in_place(part: Path) -> None:
    """Flip bytes inside a part, keeping its size and restoring its mtime (what a size/mtime check trusts)."""
    st = part.stat()
    data = bytearray(part.read_bytes())
    for i in range(len(data) // 3, len(data) // 3 + 200):
        data[i] ^= 0xFF
    part.write_bytes(bytes(data))
    os.utime(part, ns=(st.st_atime_ns, st.st_mtime_ns))


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


# ---- the world's files are part of its cache entry ----------------------------------------------------------
def test_a_stage_whose_listed_files_are_gone_or_resized_is_not_done(tmp_path):
    """The world's manifest listed no files: with every training image deleted, world came back Cached."""
    from flows.records_data import FILE_LIST
    from flows.runner import STAGE_FILE, stage_done, write_stage

    out = tmp_path / "world"
    (out / "train2014").mkdir(parents=True)
    for i in range(3):
        (out / "train2014" / f"{i}.jpg").write_bytes(b"x" * (10 + i))
    listing = {str(p.relative_to(out)): p.stat().st_size for p in sorted(out.rglob("*")) if p.is_file()}
    (out / FILE_LIST).write_text(json.dumps(listing))
    write_stage(out, {"stage": "world", "content_hash": "h", "file_list": FILE_LIST})
    assert stage_done(out)
    (out / "train2014" / "1.jpg").write_bytes(b"y" * 11)  # same size: still done (sizes, not content)
    assert stage_done(out)
    (out / "train2014" / "1.jpg").write_bytes(b"y" * 99)  # resized
    assert not stage_done(out)
    (out / "train2014" / "1.jpg").write_bytes(b"x" * 11)
    shutil.rmtree(out / "train2014")
    assert not stage_done(out) and (out / STAGE_FILE).exists()


# ---- review round: what a second reading of the data record found -----------------------------------------
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


def test_a_retried_append_of_one_evaluation_adds_its_rows_once(tmp_path):
    """A flow stopped between the history append and its stage record redid the evaluation and appended it
    again: now the evaluation is read back and its eval_id appended once."""
    from model.benchmarks import EvalConfig, append_results

    table, ev = tmp_path / "eval_results", evaluation("macco-s0")
    append_results(table, ev, EvalConfig())
    append_results(table, ev, EvalConfig())
    append_results(table, evaluation("macco-s0"), EvalConfig())  # a new evaluation of the same run: added
    rows = read_table(TABLES["eval_results"], table).to_pylist()
    assert len(rows) == 4 and sum(r["eval_id"] == ev["eval_id"] for r in rows) == 2


def test_an_evaluate_stopped_before_its_stage_record_appends_once_when_resumed(tmp_path, monkeypatch):
    """The flow's evaluate task killed after the append (before write_stage): the rerun reads its results.json
    back, appends nothing new, and completes the stage."""
    import flows.runner as runner
    import model.benchmarks as benchmarks
    from flows.catalog import Catalog
    from flows.config import EvaluatePlan
    from flows.registry import BY_NAME
    from flows.stage import Call
    from model.benchmarks import EvalConfig

    calls = []

    def fake_evaluate(cfg, roots, run):
        calls.append(run)
        res = evaluation(run)
        res["benchmarks"]["sugarcrepe"]["groups"] = {"avg": 0.5}
        return res

    monkeypatch.setattr(benchmarks, "evaluate", fake_evaluate)
    real_write_stage = runner.write_stage
    monkeypatch.setattr(runner, "write_stage", lambda out, m: (_ for _ in ()).throw(KeyboardInterrupt()))
    out, history = tmp_path / "evaluate" / "k", str(tmp_path / "eval_results")
    run = {"arch": "macco-micro", "export_pt": str(tmp_path / "export.pt")}

    def call() -> Call:
        return Call(EvaluatePlan(probes=False), Catalog(), out, "k", label="macco-s0",
                    extra={"run": run, "eval_config": EvalConfig(), "probe": None, "history": history})

    with pytest.raises(KeyboardInterrupt):
        runner.complete(BY_NAME["evaluate"], call())
    monkeypatch.setattr(runner, "write_stage", real_write_stage)
    done = runner.complete(BY_NAME["evaluate"], call())
    rows = read_table(TABLES["eval_results"], history).to_pylist()
    assert calls == ["macco-s0"] and len(rows) == 3 and {r["eval_id"] for r in rows} == {done["eval_id"]}  # 2 subsets, 1 group


def test_a_finalize_killed_after_carrying_rows_does_not_carry_them_twice(tmp_path, monkeypatch):
    """A sharded errors table replacing one stage's rows writes the other stages' rows as an extra part; killed
    before the rename, that part stayed in .partial and the resumed finalize carried the rows again."""
    import data_schemas._io as io
    from data_schemas._io import ShardedTableWriter

    spec, d = TABLES["errors"], tmp_path / "errors"
    row = dict(stage="captions", item_id="img-1", reason="missing_image", message="no file")
    write_table(spec, d, spec.from_rows([row]))
    w = ShardedTableWriter(spec, d, 1)
    w.write_shard(0, spec.from_rows([{**row, "stage": "parse", "reason": "empty_caption"}]))
    real = io._part_info
    state = {"killed": False}

    def die_once(parts):
        if not state["killed"]:
            state["killed"] = True
            raise KeyboardInterrupt()
        return real(parts)

    monkeypatch.setattr(io, "_part_info", die_once)
    with pytest.raises(KeyboardInterrupt):
        w.finalize(replaces={"stage": ["parse"]})
    ShardedTableWriter(spec, d, 1).finalize(replaces={"stage": ["parse"]})
    rows = read_table(spec, d).to_pylist()
    assert sorted(r["stage"] for r in rows) == ["captions", "parse"]


# ---- hand-edited manifests, and what macco sql may read (bad input, round 3) ----------------------------------
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


def test_a_folder_holding_another_tables_manifest_is_refused_not_skipped(tables, capsys):
    """A manifest whose `table` field names another table made validate skip that table's checks and pass."""
    shutil.copytree(tables / "captions", tables / "regions")
    m = json.loads((tables / "regions" / "manifest.json").read_text())
    assert m["table"] == "captions"
    assert main(["validate", str(tables)]) == 2
    assert "the folder 'regions' holds a manifest of table 'captions'" in capsys.readouterr().err


@pytest.mark.parametrize("content", [b"[1, 2]", b"\xff\xfe\x00", b'{"table": "capt'])
def test_an_unreadable_manifest_given_as_root_is_one_line(tmp_path, capsys, content):
    """A JSON list, non-UTF-8 or truncated manifest given as --root was a traceback."""
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "manifest.json").write_bytes(content)
    for verb in (["sql", "select 1", "--root"], ["validate"], ["inspect"]):
        assert main([*verb, str(tmp_path / "t")]) == 2
        err = capsys.readouterr().err
        assert "manifest.json: not valid JSON" in err and len(err.strip().splitlines()) == 1


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


def test_the_history_holds_group_averages_a_timestamp_and_what_triggered_it(tmp_path, capsys):
    """`created` was a string, the report's group averages were not in the history, and nothing told a scheduled
    re-evaluation from a manual one but the time. A version-2 table is read and upgraded with every row."""
    from data_schemas.eval_results import V2_SPEC
    from model.benchmarks import EvalConfig, append_results

    table = tmp_path / "eval_results"
    old = [dict(eval_id="e0", run="old", benchmark="sugarcrepe", subset="s0", model_id="m", n=10, correct=5,
                accuracy=0.5, ties=0, missing_images=0, checkpoint_sha256="x", config="{}", config_key="k",
                protocol="authors", activation="gelu", code_version="c", created="2026-12-01T00:00:00.000000Z")]
    write_table(V2_SPEC, table, V2_SPEC.from_rows(old))
    assert main(["sql", "select typeof(created) t, level, trigger from eval_results", "--root", str(table),
                 "--csv"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == "TIMESTAMP WITH TIME ZONE,subset,"  # v2 in the view
    ev = evaluation("macco-s0")
    ev["benchmarks"]["sugarcrepe"]["groups"] = {"relation": 0.25}
    ev["benchmarks"]["sugarcrepe"]["cases"] = {"relation": "1000x"}
    append_results(table, ev, EvalConfig(), trigger="flow run calm-fox, deployment reevaluate")
    rows = read_table(TABLES["eval_results"], table).to_pylist()
    assert len(rows) == 4 and {r["run"] for r in rows} == {"old", "macco-s0"}  # upgraded, every row kept
    [group] = [r for r in rows if r["level"] == "group"]
    assert (group["subset"], group["n"], group["accuracy"], group["missing_images"]) == ("relation", 4, 0.25, 1)
    assert group["trigger"] == "flow run calm-fox, deployment reevaluate" and group["created"].year == 2026
    assert main(["sql", "select run, level from eval_results order by created desc limit 1", "--root", str(table),
                 "--csv"]) == 0
    assert capsys.readouterr().out.splitlines()[1].startswith("macco-s0,")  # the newest first, by time
