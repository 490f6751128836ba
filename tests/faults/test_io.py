"""Faults in data_schemas/_io.py's writers: concurrent and retried appends keep every row once and never rewrite a
part; a killed finalize carries no row twice; written files are readable by the group and others the umask allows.
Each test injects one fault and fails on the code before the fix."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from data_schemas import TABLES, read_table, write_table
from tests_support import error_rows, evaluation, run_at_once


def _append_many(table_dir: str, run: str, times: int, start) -> None:
    from model.benchmarks import EvalConfig, append_results

    start.wait()  # both writers start together
    for _ in range(times):
        append_results(table_dir, evaluation(run), EvalConfig())


@pytest.fixture()
def umask_022():
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def test_two_processes_appending_at_once_keep_every_row(tmp_path):
    """The issue: two processes each appending 60 rows through --results-table kept 64 of 120."""
    table = str(tmp_path / "eval_results")
    run_at_once(_append_many, [(table, run, 30) for run in ("a", "b")])
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


def test_export_and_table_files_are_readable_by_group_and_others(tmp_path, umask_022):
    import open_clip

    from model.factory import register_model_configs
    from model.export import export_clip

    register_model_configs()
    clip = open_clip.create_model("macco-micro")
    exp = export_clip(clip, "macco-micro", tmp_path / "export")
    files = [tmp_path / "export" / "open_clip_model.safetensors", tmp_path / "export" / "open_clip_config.json",
             tmp_path / "export.pt"]
    spec = TABLES["errors"]
    write_table(spec, tmp_path / "errors", spec.from_rows(error_rows(3)))
    files += sorted((tmp_path / "errors").iterdir())
    assert exp["pt"] == str(tmp_path / "export.pt") and len(files) == 5
    modes = {f.name: oct(f.stat().st_mode & 0o777) for f in files}
    assert all(f.stat().st_mode & 0o777 == 0o644 for f in files), modes
    loaded = open_clip.create_model_and_transforms(f"local-dir:{tmp_path / 'export'}")[0]  # still loads
    assert loaded.state_dict().keys() == clip.state_dict().keys()
